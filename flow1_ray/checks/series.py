"""A per-step series (rewards, step times, reset features) kept in a bounded number of bytes.

A Python float in a deque costs ~60 bytes; a check of millions of steps kept several
such series in full. :class:`Series` keeps rows compactly (numpy chunks: 8 bytes a value
plus 8 for its step) up to ``max_bytes``; beyond that it keeps a uniform random sample of
the rows (a reservoir), so the distribution rules (medians, percentiles, ratios, the
early-vs-recent drift test) read an unbiased sample, while what a sample would miss is
kept exactly beside it: how many rows were seen, how many were not finite, the first of
those, and the largest and smallest values with their steps. ``window`` keeps the most
recent rows instead (a live run's sliding window).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: rows gathered in a Python list before they are packed into a numpy chunk
CHUNK = 4096


class Series:
    """Rows of ``width`` float64 values, each with the int64 step it belongs to."""

    def __init__(self, max_bytes: int | None = None, window: int | None = None, seed: int = 0) -> None:
        self.max_bytes = max_bytes
        self.window = window
        self._rng = np.random.default_rng(seed)
        self._pending_v: list[Any] = []
        self._pending_s: list[int] = []
        self._chunks_v: list[np.ndarray] = []
        self._chunks_s: list[np.ndarray] = []
        self._kept = 0                   # rows in the chunks
        self._packed = 0                 # rows packed so far (kept or not)
        self.width: int | None = None    # values per row, fixed by the first row
        self.ragged = False              # a row of another width came: the series stops there
        self.non_finite = 0              # rows with a NaN/inf value, over every row packed
        self.first_non_finite: tuple[np.ndarray, int] | None = None
        self._extremes: dict[str, tuple[float, np.ndarray, int]] = {}  # "max"/"min" of column 0

    # -- the hot path --------------------------------------------------------------------
    def append(self, value: Any, step: int) -> None:
        self._pending_v.append(value)
        self._pending_s.append(step)
        if len(self._pending_v) >= CHUNK:
            self._pack()

    # -- what the rules read -------------------------------------------------------------
    @property
    def seen(self) -> int:
        """Rows appended so far (kept or not)."""
        return self._packed + len(self._pending_v)

    @property
    def sampled(self) -> bool:
        """Whether rows were dropped by the byte cap (not by a window)."""
        self._pack()
        return self.window is None and self._kept < self._packed

    @property
    def capacity(self) -> int | None:
        """Rows kept at most under the byte cap (None: no cap)."""
        if self.max_bytes is None or self.width is None:
            return None
        return max(16, int(self.max_bytes) // (8 * self.width + 8))

    def __len__(self) -> int:
        self._pack()
        return self._kept

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, steps) in step order: every row, the window, or (past the byte cap) the
        uniform sample with the exact extremes and the first non-finite row added."""
        self._pack()
        shape = (0,) if (self.width or 1) == 1 else (0, self.width)
        if not self._chunks_v:
            return np.zeros(shape), np.zeros(0, np.int64)
        v = np.concatenate(self._chunks_v) if len(self._chunks_v) > 1 else self._chunks_v[0]
        s = np.concatenate(self._chunks_s) if len(self._chunks_s) > 1 else self._chunks_s[0]
        if not self.sampled:
            return v, s
        extra = [(row, step) for _, row, step in self._extremes.values()]
        if self.first_non_finite is not None:
            extra.append(self.first_non_finite)
        missing = [(r, st) for r, st in extra if not np.any(s == st)]
        if missing:
            v = np.concatenate([v, np.stack([r for r, _ in missing]).reshape((len(missing),) + v.shape[1:])])
            s = np.concatenate([s, np.array([st for _, st in missing], np.int64)])
        order = np.argsort(s, kind="stable")
        return v[order], s[order]

    def values(self) -> np.ndarray:
        return self.rows()[0]

    def describe(self) -> dict:
        """The numbers a PASS row reports: rows seen and, past the cap, rows judged."""
        out = {"rows": self.seen}
        if self.sampled:
            out.update({"sampled": True, "rows_judged": self._kept, "max_bytes": self.max_bytes})
        return out

    # -- packing -------------------------------------------------------------------------
    def _pack(self) -> None:
        if not self._pending_v:
            return
        pv, ps = self._pending_v, self._pending_s
        self._pending_v, self._pending_s = [], []
        if self.ragged:
            self._packed += len(pv)
            return
        try:
            v = np.asarray(pv, dtype=np.float64)
        except (TypeError, ValueError):  # rows of different widths
            v = self._until_ragged(pv)
        if v.ndim > 2 or (v.ndim == 2 and self.width is not None and v.shape[1] != self.width):
            self.ragged = True
            self._packed += len(pv)
            return
        width = 1 if v.ndim == 1 else v.shape[1]
        if self.width is None:
            self.width = width
        s = np.asarray(ps[:v.shape[0]], dtype=np.int64)
        self._note(v, s)
        start = self._packed
        self._packed += len(pv)
        if self.window is not None:
            self._keep(v, s)
            self._trim_window()
        elif self.capacity is None or self._kept + v.shape[0] <= self.capacity:
            self._keep(v, s)
        else:
            self._reservoir(v, s, start)

    def _until_ragged(self, pv: list) -> np.ndarray:
        """The rows before the first one of another width; the series is ragged from there."""
        widths = [np.size(x) for x in pv]
        first = self.width if self.width is not None else widths[0]
        n = next((i for i, w in enumerate(widths) if w != first), len(pv))
        self.ragged = True
        return np.asarray(pv[:n], dtype=np.float64).reshape((n,) if first == 1 and np.ndim(pv[0]) == 0 else (n, first))

    def _note(self, v: np.ndarray, s: np.ndarray) -> None:
        """What a sample could miss, counted on every row."""
        col = v if v.ndim == 1 else v[:, 0]
        bad = ~np.isfinite(v.reshape(v.shape[0], -1)).all(axis=1)
        k = int(bad.sum())
        if k:
            if self.first_non_finite is None:
                i = int(np.argmax(bad))
                self.first_non_finite = (v[i].copy(), int(s[i]))
            self.non_finite += k
        fin = ~bad
        if fin.any():
            idx = np.flatnonzero(fin)
            hi, lo = idx[int(np.argmax(col[idx]))], idx[int(np.argmin(col[idx]))]
            for key, i, better in (("max", hi, np.greater), ("min", lo, np.less)):
                cur = self._extremes.get(key)
                if cur is None or better(col[i], cur[0]):
                    self._extremes[key] = (float(col[i]), v[i].copy(), int(s[i]))

    def _keep(self, v: np.ndarray, s: np.ndarray) -> None:
        self._chunks_v.append(v)
        self._chunks_s.append(s)
        self._kept += v.shape[0]

    def _trim_window(self) -> None:
        excess = self._kept - int(self.window or 0)
        while excess > 0 and self._chunks_v:
            n = self._chunks_v[0].shape[0]
            if n <= excess:
                self._chunks_v.pop(0)
                self._chunks_s.pop(0)
                self._kept -= n
                excess -= n
            else:
                self._chunks_v[0] = self._chunks_v[0][excess:]
                self._chunks_s[0] = self._chunks_s[0][excess:]
                self._kept -= excess
                excess = 0

    def _reservoir(self, v: np.ndarray, s: np.ndarray, start: int) -> None:
        """Algorithm R over a chunk: row i (1-based, over all rows) replaces a random slot
        with probability capacity / i, which keeps every row seen equally likely to be kept.
        ``start``: rows seen before this chunk."""
        cap = int(self.capacity or 0)
        if self._kept < cap:  # fill up first
            room = cap - self._kept
            self._keep(v[:room], s[:room])
            v, s, start = v[room:], s[room:], start + room
        if len(self._chunks_v) > 1:  # one array, written in place from here on
            self._chunks_v = [np.concatenate(self._chunks_v)]
            self._chunks_s = [np.concatenate(self._chunks_s)]
        n = v.shape[0]
        if n == 0:
            return
        i = np.arange(start + 1, start + n + 1, dtype=np.float64)
        take = self._rng.random(n) * i < cap
        slots = self._rng.integers(0, cap, int(take.sum()))
        self._chunks_v[0][slots] = v[take]
        self._chunks_s[0][slots] = s[take]
