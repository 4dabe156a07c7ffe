"""A uniform reservoir of rows (Algorithm R, vectorised per batch).

Bounded memory over an unbounded stream: after ``seen`` rows each of them is in the
reservoir with probability ``size / seen``. The streaming KMeans keeps one for its refits;
the StateClusterer keeps one per snapshot window.
"""

from __future__ import annotations

import numpy as np


class Reservoir:
    def __init__(self, size: int, rng: np.random.Generator | None = None) -> None:
        self.size = int(size)
        self.rng = rng or np.random.default_rng(0)
        self.data: np.ndarray | None = None
        self.seen = 0

    def __len__(self) -> int:
        return 0 if self.data is None else len(self.data)

    def add(self, x: np.ndarray) -> None:
        if self.data is None:
            self.data = x[: self.size].copy()
            start = len(self.data)
        else:
            start = 0
            room = self.size - len(self.data)
            if room > 0:
                self.data = np.concatenate([self.data, x[:room]])
                start = min(room, len(x))
        if start < len(x):  # row i replaces a random slot with probability size / (seen + i + 1)
            t = self.seen + np.arange(start, len(x))
            j = (self.rng.random(len(t)) * (t + 1)).astype(np.int64)
            keep = j < self.size
            self.data[j[keep]] = x[start:][keep]  # a later row wins a slot, as in sequence
        self.seen += len(x)

    def take(self) -> tuple[np.ndarray | None, int]:
        """The rows and how many were seen; the reservoir starts empty again."""
        data, seen = self.data, self.seen
        self.data, self.seen = None, 0
        return data, seen
