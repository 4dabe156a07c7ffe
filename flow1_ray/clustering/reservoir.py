"""A uniform reservoir of rows (Algorithm R, vectorised per batch).

Bounded memory over an unbounded stream: after ``seen`` rows each of them is in the
reservoir with probability ``size / seen``. The streaming KMeans keeps one for its refits;
the StateClusterer keeps one per snapshot window.
"""

from __future__ import annotations

import numpy as np


def admit(held: int, seen: int, n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm R for a batch of ``n`` new rows offered to a reservoir of ``size`` slots that
    holds ``held`` rows after ``seen`` offered: (rows, slots), which of the new rows enter
    and where (a later row that draws the same slot wins, as in sequence). Apart so that a
    caller holding costly rows (frames) makes only those it keeps."""
    fill = max(0, min(size - held, n))
    t = seen + np.arange(fill, n)     # row i replaces a random slot with probability size / (seen + i + 1)
    j = (rng.random(len(t)) * (t + 1)).astype(np.int64) if len(t) else np.zeros(0, np.int64)
    keep = j < size
    return (np.concatenate([np.arange(fill), np.arange(fill, n)[keep]]),
            np.concatenate([held + np.arange(fill), j[keep]]))


class Reservoir:
    def __init__(self, size: int, rng: np.random.Generator | None = None) -> None:
        self.size = int(size)
        self.rng = rng or np.random.default_rng(0)
        self.data: np.ndarray | None = None
        self.seen = 0

    def __len__(self) -> int:
        return 0 if self.data is None else len(self.data)

    def add(self, x: np.ndarray) -> None:
        held = len(self)
        rows, slots = admit(held, self.seen, len(x), self.size, self.rng)
        grow = min(max(0, self.size - held), len(x))
        if self.data is None:
            self.data = x[:grow].copy()
        elif grow:
            self.data = np.concatenate([self.data, x[:grow]])
        late = rows[grow:]
        if len(late):
            self.data[slots[grow:]] = x[late]  # a later row wins a slot, as in sequence
        self.seen += len(x)

    def take(self) -> tuple[np.ndarray | None, int]:
        """The rows and how many were seen; the reservoir starts empty again."""
        data, seen = self.data, self.seen
        self.data, self.seen = None, 0
        return data, seen
