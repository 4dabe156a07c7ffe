"""Deep equality of any gymnasium space's values (observations, actions, infos)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality of two values of any gymnasium space, NaN equal to itself.

    Observations, actions and infos are trees of dicts, tuples (a GraphInstance is one),
    lists (a Sequence without stacking, RLlib's Repeated), arrays of numbers or of objects,
    scalars and strings. ``==`` on such a tree raises ("the truth value of an array ... is
    ambiguous") as soon as an array sits inside a list or a dict, and says NaN != NaN, so a
    deterministic reset that returns a NaN would read as nondeterministic. This walks the
    tree instead, and compares the leaves by value (1 == 1.0; NaN == NaN; same shape).
    """
    if a is b:
        return True
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (isinstance(a, Mapping) and isinstance(b, Mapping) and a.keys() == b.keys()
                and all(values_equal(a[k], b[k]) for k in a))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return _arrays_equal(a, b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(values_equal(x, y) for x, y in zip(a, b)))
    if isinstance(a, (str, bytes)) or isinstance(b, (str, bytes)):
        return type(a) is type(b) and a == b
    if _is_nan(a) and _is_nan(b):
        return True
    try:
        same = a == b
        return bool(same) if isinstance(same, (bool, np.bool_)) else bool(np.all(same))
    except Exception:  # an object whose == raises or answers with something that has no truth value
        return False


def _is_nan(x: Any) -> bool:
    try:
        return isinstance(x, (float, complex, np.inexact)) and bool(np.isnan(x))
    except (TypeError, ValueError):
        return False


def _arrays_equal(a: Any, b: Any) -> bool:
    """Two values of which at least one is an ndarray: same shape, equal elements (NaN
    equal to NaN); object arrays (and a list against an array) element by element."""
    try:
        x = a if isinstance(a, np.ndarray) else np.asarray(a)
        y = b if isinstance(b, np.ndarray) else np.asarray(b)
    except (TypeError, ValueError):  # a ragged list against an array: not equal
        return False
    if x.shape != y.shape:
        return False
    if x.dtype == object or y.dtype == object:
        return all(values_equal(p, q) for p, q in zip(x.ravel().tolist() if x.dtype != object else x.ravel(),
                                                       y.ravel().tolist() if y.dtype != object else y.ravel()))
    nan_ok = x.dtype.kind in "fc" and y.dtype.kind in "fc"
    try:
        return bool(np.array_equal(x, y, equal_nan=nan_ok))
    except TypeError:  # e.g. strings against numbers
        return False
