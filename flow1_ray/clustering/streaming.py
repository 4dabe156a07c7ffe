"""flow1's streaming layer above the KMeans backends.

The seed refits KMeans inside a forward hook, on the training path, for every batch.
Here: fit once on a warm-up reservoir; then each new batch of states costs one
assignment (a matrix product against the centroids) and one mini-batch step of the
centroids (each moves toward its new points with a per-centroid rate 1/count, Sculley's
web-scale k-means); a full refit happens only when the assignment inertia per point
drifts by more than ``refit_drift`` from its level after the last fit (the state
distribution moved as the policy learnt).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backends import make_backend


class StreamingKMeans:
    def __init__(self, k: int, *, backend: str | Any = "sklearn", seed: int = 0, max_iter: int = 20,
                 refit_drift: float = 0.25, reservoir: int = 50_000) -> None:
        self.k = k
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        self.seed = seed
        self.max_iter = max_iter
        self.refit_drift = refit_drift
        self.reservoir_size = reservoir
        self.rng = np.random.default_rng(seed)
        self.centroids: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        self.reference: float | None = None   # inertia per point right after the last fit
        self.reservoir: np.ndarray | None = None
        self.seen = 0
        self.refits = 0

    def _remember(self, x: np.ndarray) -> None:
        """Reservoir sampling (Algorithm R), so a refit sees the whole history uniformly."""
        if self.reservoir is None:
            self.reservoir = x[: self.reservoir_size].copy()
            start = len(self.reservoir)
        else:
            start = 0
            room = self.reservoir_size - len(self.reservoir)
            if room > 0:
                self.reservoir = np.concatenate([self.reservoir, x[:room]])
                start = min(room, len(x))
        if start < len(x):  # row i replaces a random slot with probability size / (seen + i + 1)
            t = self.seen + np.arange(start, len(x))
            j = (self.rng.random(len(t)) * (t + 1)).astype(np.int64)
            keep = j < self.reservoir_size
            self.reservoir[j[keep]] = x[start:][keep]  # a later row wins a slot, as in sequence
        self.seen += len(x)

    def fit(self, x: np.ndarray) -> float:
        """A full fit on the reservoir (seeded with ``x`` on the first call)."""
        if self.reservoir is None:
            self._remember(np.asarray(x, dtype=np.float32))
        data = self.reservoir
        res = self.backend.fit(data, self.k, seed=self.seed + self.refits, max_iter=self.max_iter)
        self.centroids = res.centroids.astype(np.float32)
        self.counts = np.bincount(res.labels, minlength=self.k).astype(np.float64)
        self.reference = res.inertia / len(data)
        self.refits += 1
        return self.reference

    def partial_fit(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """Assign a batch, move the centroids one mini-batch step, refit on drift.
        Returns (labels, inertia per point of the batch before the step)."""
        x = np.asarray(x, dtype=np.float32)
        if self.centroids is None:
            self.fit(x)
        else:
            self._remember(x)
        labels, d2 = self.backend.assign(x, self.centroids)
        per_point = float(d2.mean())
        sums = np.zeros_like(self.centroids, dtype=np.float64)
        np.add.at(sums, labels, x)
        n = np.bincount(labels, minlength=self.k).astype(np.float64)
        hit = n > 0
        self.counts[hit] += n[hit]
        rate = n[hit] / self.counts[hit]
        self.centroids[hit] += (rate[:, None] * (sums[hit] / n[hit, None] - self.centroids[hit])).astype(np.float32)
        if self.reference and abs(per_point - self.reference) / self.reference > self.refit_drift:
            self.fit(x)
            labels, _ = self.backend.assign(x, self.centroids)
        return labels, per_point

    def inertia(self, x: np.ndarray) -> float:
        """Sum of squared distances of ``x`` to the current centroids."""
        return float(self.backend.assign(np.asarray(x, np.float32), self.centroids)[1].sum())
