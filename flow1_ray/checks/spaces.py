"""Spaces as flat lists of leaves, so every check handles Box/Discrete/... and nesting once.

A Dict or Tuple space becomes leaves with a path (``obs['pos']``, ``obs[1]``); each check
works on one leaf's values, one at a time (type/shape/dtype) or stacked (bounds, NaN,
precision). Bounds are precomputed per leaf so the hot path does no space introspection.

Every other gymnasium space (Text, Sequence, Graph, OneOf, a package's own subclass such
as MiniGrid's ``MissionSpace``) is a valid space too, only not an array: it becomes an
*opaque* leaf, whose values are judged by the space's own ``contains`` and by nothing that
assumes numbers. Only an object that is not a gymnasium Space at all is unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

LEAF_TYPES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class UnsupportedSpace(Exception):
    """Not a gymnasium space at all (every ``gymnasium.spaces.Space`` is supported)."""


@dataclass(frozen=True)
class Leaf:
    """One leaf of a (possibly nested) space."""

    path: str                  # "obs", "obs['pos']", "action[0]"
    keys: tuple                # how to reach it in a sample
    space: spaces.Space
    dtype: np.dtype
    shape: tuple
    low: np.ndarray | None     # inclusive lower bound, broadcast to shape; None = unbounded
    high: np.ndarray | None
    is_float: bool
    is_image: bool
    opaque: bool = False       # not an array: judged by ``space.contains`` only

    def describe(self) -> str:
        if self.opaque:
            return f"{type(self.space).__name__} (checked by contains() only)"
        return f"{type(self.space).__name__} {self.dtype} {self.shape}"


def _opaque_leaf(space: spaces.Space, path: str, keys: tuple) -> Leaf:
    return Leaf(path, keys, space, np.dtype(object), (), None, None, False, False, opaque=True)


def _bounds(space: spaces.Space) -> tuple[np.ndarray | None, np.ndarray | None]:
    if isinstance(space, spaces.Box):
        low, high = np.asarray(space.low), np.asarray(space.high)
        if np.issubdtype(space.dtype, np.floating):
            low = np.where(np.isfinite(low), low, -np.inf)
            high = np.where(np.isfinite(high), high, np.inf)
            if not (np.isfinite(low).any() or np.isfinite(high).any()):
                return None, None
        return low, high
    if isinstance(space, spaces.Discrete):
        return np.asarray(space.start), np.asarray(space.start + space.n - 1)
    if isinstance(space, spaces.MultiDiscrete):
        return np.asarray(space.start), np.asarray(space.start + space.nvec - 1)
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(space.shape, np.int8), np.ones(space.shape, np.int8)
    return None, None


def is_image_space(space: spaces.Space, min_side: int = 8) -> bool:
    """uint8 Box of rank 2 (H, W) or 3 (H, W, C / C, H, W) with sides >= min_side."""
    if not isinstance(space, spaces.Box) or space.dtype != np.uint8:
        return False
    shape = space.shape
    if len(shape) == 2:
        return min(shape) >= min_side
    if len(shape) == 3:
        sides = shape[:2] if shape[2] <= 4 else shape[1:]
        return min(sides) >= min_side
    return False


def leaves(space: Any, root: str, image_min_side: int = 8) -> list[Leaf]:
    """Flatten a space into leaves: array leaves for the numeric types, opaque leaves for
    any other gymnasium space; raises :class:`UnsupportedSpace` on a non-space."""
    out: list[Leaf] = []

    def walk(sp: Any, path: str, keys: tuple) -> None:
        if isinstance(sp, spaces.Dict):
            for k, sub in sp.spaces.items():
                walk(sub, f"{path}[{k!r}]", keys + (k,))
        elif isinstance(sp, spaces.Tuple):
            for i, sub in enumerate(sp.spaces):
                walk(sub, f"{path}[{i}]", keys + (i,))
        elif isinstance(sp, LEAF_TYPES):
            low, high = _bounds(sp)
            dtype = np.dtype(sp.dtype) if sp.dtype is not None else np.dtype(np.int64)
            out.append(Leaf(path, keys, sp, dtype, tuple(sp.shape or ()), low, high,
                            bool(np.issubdtype(dtype, np.floating)),
                            is_image_space(sp, image_min_side)))
        elif isinstance(sp, spaces.Space):
            out.append(_opaque_leaf(sp, path, keys))
        else:
            raise UnsupportedSpace(f"{path}: expected a gymnasium.spaces.Space, actual {type(sp).__name__}")

    walk(space, root, ())
    return out


def get(sample: Any, keys: tuple) -> Any:
    """The value of one leaf in a nested sample (KeyError/IndexError/TypeError if absent)."""
    for k in keys:
        sample = sample[k]
    return sample


def structure_error(sample: Any, space: spaces.Space, path: str) -> tuple[str, str, str] | None:
    """(path, expected, actual) where a nested sample's structure differs from its space."""
    if isinstance(space, spaces.Dict):
        if not isinstance(sample, dict):
            return path, "dict", type(sample).__name__
        if set(sample) != set(space.spaces):
            return path, f"keys {sorted(space.spaces)}", f"keys {sorted(map(str, sample))}"
        for k, sub in space.spaces.items():
            err = structure_error(sample[k], sub, f"{path}[{k!r}]")
            if err:
                return err
    elif isinstance(space, spaces.Tuple):
        if not isinstance(sample, tuple) or len(sample) != len(space.spaces):
            actual = f"{type(sample).__name__} of {len(sample)}" if hasattr(sample, "__len__") else type(sample).__name__
            return path, f"tuple of {len(space.spaces)}", actual
        for i, sub in enumerate(space.spaces):
            err = structure_error(sample[i], sub, f"{path}[{i}]")
            if err:
                return err
    return None


def flat_bounds(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    """The leaf's low and high, one entry per flattened value (a scalar leaf: one entry)."""
    if leaf.shape:
        return (np.broadcast_to(leaf.low, leaf.shape).reshape(-1), np.broadcast_to(leaf.high, leaf.shape).reshape(-1))
    return np.asarray(leaf.low).reshape(-1), np.asarray(leaf.high).reshape(-1)


def bounds_violation(leaf: Leaf, batch: np.ndarray) -> tuple[np.ndarray, float] | None:
    """For values stacked on axis 0: (rows outside the leaf's bounds, largest excess).

    NaNs are not counted here (they are OBS_NAN_INF); None when every row is inside.
    """
    if leaf.low is None or batch.size == 0:
        return None
    x = batch.reshape(batch.shape[0], -1)
    low, high = (b.reshape(1, -1) for b in flat_bounds(leaf))
    if x.shape[1] != low.shape[1]:
        return None
    below, above = x < low, x > high
    rows = (below | above).any(axis=1)
    if not rows.any():
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float64)
        excess = np.maximum(np.where(below, low - xf, 0.0), np.where(above, xf - high, 0.0))
    return rows, float(np.nanmax(excess))
