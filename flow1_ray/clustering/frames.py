"""Thumbnails of image states: the real frame of a sample near each cluster's centroid.

The clusters of an image env are made of 8x8 pooled blocks, which no person reads; a
small picture of an actual state of the cluster says at once what the cluster is. The
frames travel beside the pooled rows in a bounded way: a runner keeps at most
``FRAMES_PER_SEND`` frames per send (a uniform sample of the rows it took since its
last send, chosen before any frame is downscaled, so a runner downscales a handful of
frames every ``state_send_interval_s``, never one per row), each downscaled to at most
``THUMB_SIDE`` pixels a side as uint8 (<= 12 kB); the clusterer keeps a uniform
``FRAME_BANK`` of them over the run (<= 3 MB per module) and at each snapshot picks,
per cluster, the kept frame whose features lie nearest its centroid among those assigned
to it. A cluster no kept frame falls in gets no thumbnail (said, not guessed).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from gymnasium import spaces

from .features import is_frame_space
from .reservoir import admit

THUMB_SIDE = 64         # a thumbnail's longest side at most (pixels)
FRAMES_PER_SEND = 8     # frames a runner sends with one batch of rows, at most
FRAME_BANK = 256        # frames the clusterer keeps per module, a uniform sample of the run's


def frame_leaf(space: spaces.Space, path: tuple = ()) -> tuple[tuple, spaces.Box] | None:
    """(path, space) of the observation's frames: the space itself, or the first leaf of a
    Dict/Tuple that is a frame space; None for an observation without frames."""
    if is_frame_space(space):
        return path, space
    items = space.spaces.items() if isinstance(space, spaces.Dict) else \
        enumerate(space.spaces) if isinstance(space, spaces.Tuple) else ()
    for key, sub in items:
        found = frame_leaf(sub, path + (key,))
        if found is not None:
            return found
    return None


def leaf_of(obs: Any, path: tuple) -> Any:
    """The frames of a batch of observations (the leaf at ``path``)."""
    for key in path:
        obs = obs[key]
    return obs


def _to_uint8(x: np.ndarray, space: spaces.Box) -> np.ndarray:
    """Frames as uint8 for a picture: uint8 as they are; other dtypes scaled from the
    space's bounds when finite, else from the frames' own range."""
    if x.dtype == np.uint8:
        return x
    lo, hi = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if np.isfinite(lo).all() and np.isfinite(hi).all() and float(hi.max()) > float(lo.min()):
        a, b = float(lo.min()), float(hi.max())
    else:
        a, b = float(np.nanmin(x)), float(np.nanmax(x))
        b = b if b > a else a + 1.0
    y = (np.nan_to_num(x.astype(np.float64), nan=a) - a) / (b - a) * 255.0
    return np.clip(y, 0, 255).astype(np.uint8)


def thumbnails(frames: np.ndarray, space: spaces.Box) -> np.ndarray:
    """(n, h, w, c) uint8 pictures of a batch of frames, each side <= ``THUMB_SIDE`` (block
    means), c = 1 (grey) or 3 (RGB). Channel-first frames are turned; 2 or 4 channels are
    stacked frames (RLlib's Atari wrapper stacks 4), so the newest, the last, is shown."""
    x = np.asarray(frames)
    if x.ndim == 3:
        x = x[..., None]
    if space.shape[-1] > 4 and space.shape[0] <= 4:   # (C, H, W)
        x = np.moveaxis(x, 1, -1)
    if x.shape[-1] not in (1, 3):
        x = x[..., -1:]
    n, h, w, c = x.shape
    f = max(1, -(-max(h, w) // THUMB_SIDE))
    x = _to_uint8(x[:, : h // f * f, : w // f * f], space)
    if f > 1:   # block means in integers (uint16 holds 255 * f * f up to f = 16): ~3x a float mean
        acc = np.uint16 if f <= 16 else np.uint32
        s = x.reshape(n, h // f, f, w // f, f, c).sum(axis=(2, 4), dtype=acc)
        x = ((s + (f * f) // 2) // (f * f)).astype(np.uint8)
    return np.ascontiguousarray(x)


def png(picture: np.ndarray) -> bytes:
    """One (h, w, c) uint8 picture as PNG bytes (grey or RGB)."""
    from PIL import Image

    img = picture[..., 0] if picture.shape[-1] == 1 else picture
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


class FrameBank:
    """A uniform sample of (feature row, thumbnail) pairs of bounded size: a runner's for
    one send (``FRAMES_PER_SEND``), the clusterer's for the run (``FRAME_BANK``). Frames of
    another picture shape than the first are refused (a module's frames share one)."""

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self.size, self.rng = size, rng
        self.x: np.ndarray | None = None       # (held, d) float32 features
        self.img: np.ndarray | None = None     # (held, h, w, c) uint8
        self.seen = 0

    def __len__(self) -> int:
        return 0 if self.x is None else len(self.x)

    def offer(self, n: int, make: Any) -> int:
        """Offer ``n`` rows; ``make(rows)`` gives (features, thumbnails) of the chosen rows
        only (a costly call: frames are downscaled there). Returns how many were kept."""
        rows, slots = admit(len(self), self.seen, n, self.size, self.rng)
        self.seen += n
        if not len(rows):
            return 0
        last = {int(s): int(r) for r, s in zip(rows, slots)}    # a later row wins its slot
        slots = np.fromiter(last.keys(), np.int64)
        x, img = make(np.fromiter(last.values(), np.int64))
        return self.put(np.asarray(x, np.float32), np.asarray(img, np.uint8), slots)

    def put(self, x: np.ndarray, img: np.ndarray, slots: np.ndarray | None = None) -> int:
        """Store rows at ``slots`` (new slots at the end: appended), or offer them all."""
        if slots is None:
            return self.offer(len(x), lambda rows: (x[rows], img[rows]))
        if img.ndim != 4 or len(x) != len(img) or x.ndim != 2 or \
                (self.img is not None and (img.shape[1:] != self.img.shape[1:] or x.shape[1] != self.x.shape[1])):
            return 0
        if self.x is None:
            self.x, self.img = x[:0].copy(), img[:0].copy()
        grow = slots >= len(self.x)
        order = np.argsort(slots[grow], kind="stable")
        self.x = np.concatenate([self.x, x[grow][order]])
        self.img = np.concatenate([self.img, img[grow][order]])
        self.x[slots[~grow]], self.img[slots[~grow]] = x[~grow], img[~grow]
        return len(x)

    def take(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The frames held (the bank starts empty again), or None."""
        if self.x is None or not len(self.x):
            return None
        out, self.x, self.img, self.seen = (self.x, self.img), None, None, 0
        return out


def nearest(labels: np.ndarray, d2: np.ndarray, k: int) -> np.ndarray:
    """Per cluster, the index of the row assigned to it nearest its centroid (-1: none)."""
    out = np.full(k, -1, np.int64)
    labels = np.asarray(labels, np.int64)
    if not len(labels):
        return out
    order = np.lexsort((np.asarray(d2), labels))          # by cluster, nearest first
    first = np.r_[True, labels[order][1:] != labels[order][:-1]]
    out[labels[order][first]] = order[first]
    return out
