"""A batch of observations as the (N, d) feature matrix the state clusters are made of.

Observations from any supported space are flattened (images and frame-shaped boxes
average-pooled to at most IMAGE_POOL x IMAGE_POOL per channel first; Discrete one-hot; the
leaves of a Dict or Tuple that carry no numbers left out) and standardised, so that one
large-valued dimension does not decide the clusters. The engine
(:mod:`flow1_ray.clustering.state_action_map`), the names of the columns
(:mod:`flow1_ray.clustering.describe`), the thumbnails (:mod:`flow1_ray.clustering.frames`)
and each EnvRunner's state sampler read observations through this one module.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from ..checks.spaces import is_image_space

IMAGE_POOL = 8          # images are average-pooled to at most 8 x 8 per channel


def _pool_images(x: np.ndarray, space: spaces.Box) -> np.ndarray:
    """(N, H, W[, C]) -> (N, <=8*<=8*C) by block averages; channel-first handled. The
    blocks are summed in the images' own integer type where it cannot overflow (a uint8
    frame's rows in uint16), rows within a block first, over contiguous memory: ten times
    faster than averaging a float copy of every frame (a runner pools a share of its frames
    at every sample())."""
    if x.ndim == 3:
        x = x[..., None]
    if space.shape[-1] > 4 and space.shape[0] <= 4:  # (C, H, W)
        x = np.moveaxis(x, 1, -1)
    n, h, w, c = x.shape
    fh, fw = max(1, h // IMAGE_POOL), max(1, w // IMAGE_POOL)
    bh, bw = h // fh, w // fw
    x = x[:, : bh * fh, : bw * fw]
    if x.dtype == np.uint8 and fh <= 257:
        rows_t, cols_t = np.uint16, np.uint32
    elif x.dtype.kind == "f":
        rows_t = cols_t = np.float32 if x.dtype.itemsize <= 4 else np.float64
    else:
        rows_t = cols_t = np.float64
    y = x.reshape(n, bh, fh, bw * fw * c).sum(axis=2, dtype=rows_t)   # the rows of each block
    y = y.reshape(n, bh, bw, fw, c).sum(axis=3, dtype=cols_t)         # ... then its columns
    return (y.reshape(n, -1) / (fh * fw)).astype(np.float32)


FRAME_MIN_SIDE = 16     # a Box of any dtype shaped like frames, both sides at least this, is pooled


def is_frame_space(space: spaces.Space) -> bool:
    """Observations pooled for the state map: a uint8 image, or a Box of any dtype shaped
    like frames -- (H, W), (H, W, C) or (C, H, W) with C <= 4 and H, W >= FRAME_MIN_SIDE.
    RLlib's Atari wrapper hands the module float32 frames in [-1, 1] (64 x 64 x 4): read as
    16,384 raw features they cost a copy of every taken frame at every sample() and a k-means
    in 16,384 dimensions."""
    if not isinstance(space, spaces.Box):
        return False
    if is_image_space(space):
        return True
    shape = space.shape
    if len(shape) == 2:
        return min(shape) >= FRAME_MIN_SIDE
    if len(shape) == 3:
        sides = shape[:2] if shape[2] <= 4 else shape[1:] if shape[0] <= 4 else ()
        return bool(sides) and min(sides) >= FRAME_MIN_SIDE
    return False


NUMERIC_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiBinary, spaces.MultiDiscrete)


def has_numbers(space: spaces.Space) -> bool:
    """Whether a space has numeric features to cluster on (a Text leaf, a mission string, a
    Graph or Sequence has none: it is left out of the features, not an error)."""
    if isinstance(space, spaces.Dict):
        return any(has_numbers(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(has_numbers(s) for s in space.spaces)
    return isinstance(space, NUMERIC_SPACES)


def flatten_observations(obs: Any, space: spaces.Space) -> np.ndarray:
    """A batch of observations (leading axis N) as an (N, d) float32 matrix; the leaves of
    a Dict/Tuple that carry no numbers (Text, Graph, Sequence...) are left out."""
    if isinstance(space, (spaces.Dict, spaces.Tuple)) and not has_numbers(space):
        raise ValueError(f"unsupported observation space {space}: no numeric leaf to cluster on")
    if isinstance(space, spaces.Dict):
        return np.concatenate([flatten_observations(obs[k], s) for k, s in space.spaces.items() if has_numbers(s)],
                              axis=1)
    if isinstance(space, spaces.Tuple):
        return np.concatenate([flatten_observations(obs[i], s) for i, s in enumerate(space.spaces) if has_numbers(s)],
                              axis=1)
    x = np.asarray(obs)
    if isinstance(space, spaces.Discrete):
        return np.eye(int(space.n), dtype=np.float32)[x.astype(np.int64) - int(space.start)]
    if is_frame_space(space):
        return _pool_images(x, space)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return x.reshape(x.shape[0], -1).astype(np.float32)
    raise ValueError(f"unsupported observation space {space}")


def standardize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z-scored x, mean, scale); constant features keep scale 1."""
    mean = x.mean(0)
    std = x.std(0)
    scale = np.where(std > 1e-8, std, 1.0)
    return ((x - mean) / scale).astype(np.float32), mean, scale
