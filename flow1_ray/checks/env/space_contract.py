"""SPACE_INVALID: is the env's space a gymnasium space, and a well-formed one? (A Box with
low > high or NaN bounds, a Discrete with n <= 0, infinite action bounds, a malformed space
nested inside a Sequence, Graph or OneOf.) And one RLlib can use: a Discrete whose ``start``
is not 0 is valid gymnasium, but RLlib never reads ``start`` (its action distributions emit
0..n-1, its one-hot encodings take values 0..n-1), so an action space ``Discrete(2, start=1)``
receives action 0, which it does not hold (SB3 does the same: DLR-RM/stable-baselines3#1841)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from ..spaces import UnsupportedSpace, leaves

RULES = (
    Rule("SPACE_INVALID", C.ENV_SPEC, C.FAIL,
         "Discrete n<=0 or start != 0 (RLlib emits and encodes 0..n-1), Box low>high, NaN/infinite bounds where "
         "not allowed, not a gymnasium space"),
)


def validate_space(space: Any, role: str) -> list[Finding]:
    """SPACE_INVALID findings for one space; ``role`` is "obs" or "action".

    gymnasium's constructors reject most bad specs, but a space can be built otherwise
    (bounds computed and written in afterwards, a non-gymnasium object), and an action Box
    with infinite bounds cannot be squashed or clipped. Every gymnasium space is valid as
    a type: a Text, Sequence, Graph, OneOf or a package's own Space subclass is judged on
    its structure (lengths, the spaces inside it), never refused for being unusual.
    """
    return _validate(space, role, role)


def _validate(space: Any, role: str, root: str) -> list[Finding]:
    try:
        lvs = leaves(space, root)
    except UnsupportedSpace as e:
        return [Finding(C.SPACE_INVALID, f"{role} space unsupported: {e}", {"role": role, "space": repr(space)})]
    out: list[Finding] = []
    for lf in lvs:
        why = _opaque_problem(lf.space) if lf.opaque else _array_problem(lf.space, role)
        if why is not None:
            out.append(Finding(C.SPACE_INVALID, f"{lf.path} {lf.space}: {why[0]}",
                               {"path": lf.path, "space": repr(lf.space), **why[1]}))
        for name, inner in _inner_spaces(lf.space) if lf.opaque else ():
            out.extend(_validate(inner, role, f"{lf.path}.{name}"))
    return out


def _array_problem(sp: spaces.Space, role: str) -> tuple[str, dict] | None:
    """(why, evidence) when a Box/Discrete/MultiDiscrete/MultiBinary is malformed."""
    if isinstance(sp, spaces.Discrete) and int(sp.n) <= 0:
        return f"expected n > 0, actual n={int(sp.n)}", {"n": int(sp.n)}
    if isinstance(sp, spaces.Discrete) and int(sp.start) != 0:
        n, s = int(sp.n), int(sp.start)
        what = (f"the env receives actions 0..{n - 1}, not {s}..{s + n - 1}" if role == "action"
                else f"its one-hot encoding takes values 0..{n - 1}, not {s}..{s + n - 1}")
        return (f"expected start=0, actual Discrete({n}, start={s}): RLlib never reads start, {what}; "
                f"shift the values in the env (or a wrapper)", {"n": n, "start": s})
    if isinstance(sp, spaces.MultiDiscrete) and np.any(np.asarray(sp.nvec) <= 0):
        return f"expected every nvec > 0, actual nvec={np.asarray(sp.nvec).tolist()}", {}
    if isinstance(sp, spaces.MultiBinary) and np.prod(sp.shape) <= 0:
        return f"expected n > 0, actual shape {sp.shape}", {}
    if isinstance(sp, spaces.Box):
        return _box_problem(sp, role)
    return None


def _box_problem(sp: spaces.Box, role: str) -> tuple[str, dict] | None:
    low, high = np.asarray(sp.low), np.asarray(sp.high)
    if low.shape != sp.shape or high.shape != sp.shape:
        return f"expected bounds of shape {sp.shape}, actual low {low.shape} high {high.shape}", {}
    if not (np.issubdtype(sp.dtype, np.number) or sp.dtype == np.bool_):
        return f"expected a numeric dtype, actual {sp.dtype}", {}
    if np.issubdtype(low.dtype, np.floating) and (np.isnan(low).any() or np.isnan(high).any()):
        return f"expected real bounds, actual {int(np.isnan(low).sum() + np.isnan(high).sum())} NaN bound(s)", {}
    if np.any(low > high):
        idx = int(np.flatnonzero((low > high).ravel())[0])
        return (f"expected low <= high, actual low {low.ravel()[idx]} > high {high.ravel()[idx]} at index {idx}",
                {"index": idx, "low": low.ravel()[idx], "high": high.ravel()[idx]})
    if role == "action" and not (np.isfinite(low).all() and np.isfinite(high).all()):
        return ("expected finite action bounds, actual infinite: an unbounded action cannot be clipped "
                "or squashed (RLlib's normalize_actions/clip_actions need them)", {})
    return None


def _opaque_problem(sp: spaces.Space) -> tuple[str, dict] | None:
    """(why, evidence) when a non-array space is malformed (only Text has numbers to check)."""
    if isinstance(sp, spaces.Text):
        lo, hi = int(sp.min_length), int(sp.max_length)
        if not 0 <= lo <= hi:
            return (f"expected 0 <= min_length <= max_length, actual min_length {lo}, max_length {hi}",
                    {"min_length": lo, "max_length": hi})
        if not sp.character_set:
            return "expected a non-empty charset, actual an empty one", {}
    return None


def _inner_spaces(sp: spaces.Space) -> list[tuple[str, Any]]:
    """The spaces a Sequence, Graph or OneOf is made of (validated like any other)."""
    if isinstance(sp, spaces.Sequence):
        return [("feature_space", sp.feature_space)]
    if isinstance(sp, spaces.Graph):
        return [(n, s) for n, s in (("node_space", sp.node_space), ("edge_space", sp.edge_space)) if s is not None]
    if isinstance(sp, spaces.OneOf):
        return [(f"spaces[{i}]", s) for i, s in enumerate(sp.spaces)]
    return []
