"""ACTION_PIPE checks: does the policy's intent reach ``env.step`` intact?

Two questions: are the actions inside the space before clipping, and does their dtype,
shape or value change on the way to the env (a wrapper that casts float32 to float64, a
rescaling nobody meant)?
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from ..spaces import Leaf, bounds_violation
from ..values import values_equal

RULES = (
    Rule("ACTION_OUT_OF_BOUNDS", C.ACTION_PIPE, C.WARN,
         "policy actions outside the action space before clipping (or rejected by its contains())"),
)


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype} {x.shape}"
    if isinstance(x, np.generic):
        return f"{type(x).__name__}"
    return type(x).__name__


def action_cast_error(sent: Any, received: Any, path: str = "action",
                      on_values: Callable[[str, np.ndarray, np.ndarray], None] | None = None
                      ) -> tuple[str, dict] | None:
    """(message, evidence) when the action that reached the env differs from the one sent.

    An integer that only changes its Python type (np.int64 -> int) is fine; an array whose
    dtype, shape or values change is not. ``on_values``: a numeric array whose values alone
    changed goes there instead (:class:`~.action_map.ActionMapWatch` tells a rescale from a
    loss over many such pairs).
    """
    if isinstance(sent, dict):
        if not isinstance(received, dict) or received.keys() != sent.keys():
            return (f"{path}: expected dict with keys {sorted(sent)}, actual {_describe(received)}",
                    {"path": path, "expected": "dict", "actual": _describe(received)})
        for k in sent:
            err = action_cast_error(sent[k], received[k], f"{path}[{k!r}]", on_values)
            if err:
                return err
        return None
    if isinstance(sent, tuple):
        if not isinstance(received, tuple) or len(received) != len(sent):
            return (f"{path}: expected tuple of {len(sent)}, actual {_describe(received)}",
                    {"path": path, "expected": f"tuple of {len(sent)}", "actual": _describe(received)})
        for i, (s, r) in enumerate(zip(sent, received)):
            err = action_cast_error(s, r, f"{path}[{i}]", on_values)
            if err:
                return err
        return None
    if isinstance(sent, np.ndarray):
        if not isinstance(received, np.ndarray):
            return (f"{path}: expected ndarray {sent.dtype} {sent.shape} at env.step, actual {_describe(received)}",
                    {"path": path, "expected": f"ndarray {sent.dtype}", "actual": _describe(received)})
        if received.dtype != sent.dtype:
            return (f"{path}: dtype changed on the way to env.step: expected {sent.dtype}, actual {received.dtype}",
                    {"path": path, "expected": str(sent.dtype), "actual": str(received.dtype)})
        if received.shape != sent.shape:
            return (f"{path}: shape changed on the way to env.step: expected {sent.shape}, actual {received.shape}",
                    {"path": path, "expected": str(sent.shape), "actual": str(received.shape)})
        if not values_equal(sent, received):
            if on_values is not None and sent.dtype.kind in "fiu":
                on_values(path, sent, received)
                return None
            try:
                diff = float(np.nanmax(np.abs(sent.astype(np.float64) - received.astype(np.float64))))
            except (TypeError, ValueError):  # object or string actions: no numeric difference
                diff = float("nan")
            return (f"{path}: values changed on the way to env.step (a wrapper rescales or clips): "
                    f"expected unchanged, actual max |diff| {diff:.4g}",
                    {"path": path, "expected": "unchanged", "max_abs_diff": diff})
        return None
    if isinstance(sent, (int, np.integer)):
        if isinstance(received, (bool, np.bool_)) or not isinstance(received, (int, np.integer, np.ndarray)):
            return (f"{path}: expected an integer at env.step, actual {_describe(received)}",
                    {"path": path, "expected": "int", "actual": _describe(received)})
        if np.ndim(received) != 0 or int(received) != int(sent):
            return (f"{path}: value changed on the way to env.step: expected {int(sent)}, actual {received!r}",
                    {"path": path, "expected": int(sent), "actual": repr(received)})
    return None


def check_action_batch(leaf: Leaf, batch: np.ndarray, steps: np.ndarray) -> list[Finding]:
    """ACTION_OUT_OF_BOUNDS over stacked actions (the policy's, before any clipping)."""
    oob = bounds_violation(leaf, batch)
    if oob is None:
        return []
    rows, excess = oob
    k = int(rows.sum())
    first = int(steps[int(np.argmax(rows))])
    return [Finding(C.ACTION_OUT_OF_BOUNDS,
                    f"{leaf.path} outside {leaf.space} before clipping: expected within bounds, actual excess "
                    f"{excess:.4g} on {k} of {batch.shape[0]} steps (first at step {first}); squash or clip in the "
                    f"policy (RLlib: normalize_actions / clip_actions)",
                    {"path": leaf.path, "max_excess": excess, "steps_bad": k, "steps_checked": int(batch.shape[0]),
                     "first_step": first}, env_step=first, count=k)]
