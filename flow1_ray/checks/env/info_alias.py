"""Two things an env must not do to what it returned: change an info dict after returning it
(or return the same dict twice), and modify a returned observation array in place later
(INFO_MUTATION_DETECTED and OBS_ALIASED, declared in :mod:`flow1_ray.checks.env.rollout`).
A step's values are frozen into plain, comparable copies and looked at again later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..spaces import Leaf

_ATOMS = (int, str, bool, bytes, type(None))


def freeze(x: Any) -> Any:
    """A comparable, immutable snapshot of an info value (NaN-safe; arrays by bytes, object
    arrays by what they hold). The common types are told by their exact type first: this
    runs twice per checked step on every value of the info dict."""
    t = type(x)
    if t in _ATOMS:
        return x
    if t is float:
        return ("nan",) if x != x else x
    if t is dict:
        return ("d", tuple((k if type(k) is str else repr(k), freeze(v)) for k, v in x.items()))
    if t is np.ndarray:
        return _freeze_array(x)
    if isinstance(x, np.generic):   # immutable: its dtype and value (NaN-safe)
        return ("g", x.dtype.char, x.item()) if x == x else ("g", x.dtype.char, "nan")
    if isinstance(x, Mapping):
        return ("d", tuple((k if type(k) is str else repr(k), freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return ("l", tuple(freeze(v) for v in x))
    if isinstance(x, np.ndarray):
        return _freeze_array(x)
    if isinstance(x, (set, frozenset)):
        return ("s", frozenset(x))
    if isinstance(x, float) and math.isnan(x):
        return ("nan",)
    return x


def _freeze_array(x: np.ndarray) -> Any:
    if x.dtype == object:  # its bytes are pointers: snapshot what they point to
        return ("o", x.shape, tuple(freeze(v) for v in x.ravel()))
    return ("a", x.dtype.str, x.shape, x.tobytes())


#: values that cannot change in place: an info dict holding only these is snapshot by its items
_IMMUTABLE = frozenset({int, float, str, bool, bytes, type(None), np.float64, np.float32, np.int64, np.int32,
                        np.bool_})


def _info_snapshot(info: Any) -> Any:
    """What :class:`InfoWatch` compares: a plain dict as its items, each immutable value as
    itself (compared by identity first, so a NaN equals itself) and the others frozen (twice
    per checked step: the common info of scalars costs one pass and no recursion)."""
    if not info:
        return ("d", ())
    if type(info) is not dict:
        return freeze(info)
    return tuple((k, v) if type(v) in _IMMUTABLE else (k, freeze(v)) for k, v in info.items())


class InfoWatch:
    """INFO_MUTATION_DETECTED: the env edits an info dict it returned (a new one each step, or
    one dict handed out again with new contents).

    Keeps the previous info and a frozen snapshot of it; at the next step the old dict must
    still equal its snapshot. One dict returned again unchanged is no fault: PettingZoo hands
    each agent the same (empty) info dict every step, and nothing stored from it ever changes.
    """

    __slots__ = ("_prev", "_snap", "_prev_step")

    def __init__(self) -> None:
        self._prev: dict | None = None
        self._snap: Any = None
        self._prev_step = -1

    def observe(self, info: dict, step: int) -> tuple[str, dict] | None:
        prev, problem = self._prev, None
        if prev is not None and _info_snapshot(prev) != self._snap:
            if info is prev:
                problem = ("the same info dict object was returned at steps "
                           f"{self._prev_step} and {step} with new contents: the info stored for step "
                           f"{self._prev_step} changed with it; expected a new dict per step, or one never changed",
                           {"first_step": self._prev_step, "second_step": step, "kind": "reused"})
            else:
                problem = (f"the info dict returned at step {self._prev_step} was modified by the env "
                           f"before step {step}; expected it unchanged after return",
                           {"returned_step": self._prev_step, "seen_changed_step": step, "kind": "modified"})
        self._prev, self._prev_step = info, step
        self._snap = _info_snapshot(info)
        return problem

    def reset(self) -> None:
        self._prev = None


class AliasWatch:
    """OBS_ALIASED: an observation array the env returned is later changed in place.

    Keeps a reference and a copy of each returned array leaf; one step later the
    reference must still equal the copy. The copies double as the values the batch
    checks read, so buffered observations never change under the checker.
    """

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: list[tuple[Leaf, np.ndarray, np.ndarray, int]] = []

    def remember(self, leaf: Leaf, ref: np.ndarray, copy: np.ndarray, step: int) -> None:
        self._refs.append((leaf, ref, copy, step))

    def check(self, step: int) -> list[tuple[Leaf, int, float]]:
        """(leaf, step returned, max abs change) for each remembered array that changed."""
        bad = []
        for leaf, ref, copy, at in self._refs:
            if ref.shape != copy.shape or not _same_bytes(ref, copy):
                try:
                    diff = float(np.max(np.abs(ref.astype(np.float64) - copy.astype(np.float64))))
                except ValueError:
                    diff = float("nan")
                bad.append((leaf, at, diff))
        self._refs.clear()
        return bad


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality of two arrays of one dtype and shape (NaN-safe). Bytes are ~20x
    cheaper than ``np.array_equal`` on small arrays; a large one is compared as unsigned
    integers of its item size, so no bytes copy of it is made (100 MB each, per step)."""
    if a.nbytes <= 1 << 16 or a.dtype != b.dtype or a.dtype.itemsize not in (1, 2, 4, 8) or a.dtype == object:
        return a.tobytes() == b.tobytes()
    u = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(u), b.view(u)))
