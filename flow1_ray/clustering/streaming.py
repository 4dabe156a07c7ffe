"""flow1's streaming layer above the KMeans backends.

Refitting KMeans inside a forward hook, on the training path, for every batch costs a
full fit per batch. Here: fit once on a warm-up reservoir; then each new batch of states costs one
assignment (a matrix product against the centroids) and one mini-batch step of the
centroids (each moves toward its new points with a per-centroid rate 1/count, Sculley's
web-scale k-means); a full refit happens only when the assignment inertia per point
drifts by more than ``refit_drift`` from its level after the last fit (the state
distribution moved as the policy learnt).

With ``standardize=True`` the layer takes raw features: each full fit z-scores them with
the reservoir's mean and spread (so one large-valued dimension does not decide the
clusters, and the scale follows the states as the policy moves), and every batch is
transformed with the scale of the last fit. ``raw_centroids`` are in the input's units.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backends import make_backend
from .reservoir import Reservoir


class StreamingKMeans:
    def __init__(self, k: int, *, backend: str | Any = "sklearn", seed: int = 0, max_iter: int = 20,
                 refit_drift: float = 0.25, reservoir: int = 50_000, standardize: bool = False) -> None:
        self.k = k
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        self.seed = seed
        self.max_iter = max_iter
        self.refit_drift = refit_drift
        self.rng = np.random.default_rng(seed)
        self.centroids: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        self.reference: float | None = None   # inertia per point right after the last fit
        self._reservoir = Reservoir(reservoir, self.rng)
        self.refits = 0
        self.standardize = standardize
        self.mean: np.ndarray | float = 0.0
        self.scale: np.ndarray | float = 1.0

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Raw features in the units of the centroids (identity without ``standardize``)."""
        if not self.standardize:
            return x
        return ((x - self.mean) / self.scale).astype(np.float32)

    @property
    def raw_centroids(self) -> np.ndarray:
        return (self.centroids * self.scale + self.mean).astype(np.float32)

    @property
    def reservoir(self) -> np.ndarray | None:
        return self._reservoir.data

    @property
    def seen(self) -> int:
        return self._reservoir.seen

    def _remember(self, x: np.ndarray) -> None:
        """Reservoir sampling, so that a refit sees the whole history uniformly."""
        self._reservoir.add(x)

    def fit(self, x: np.ndarray) -> float:
        """A full fit on the reservoir (seeded with ``x`` on the first call)."""
        if self.reservoir is None:
            self._remember(np.asarray(x, dtype=np.float32))
        data = self.reservoir
        if self.standardize:
            self.mean = data.mean(0)
            std = data.std(0)
            self.scale = np.where(std > 1e-8, std, 1.0)
            data = self.transform(data)
        res = self.backend.fit(data, self.k, seed=self.seed + self.refits, max_iter=self.max_iter)
        self.centroids = res.centroids.astype(np.float32)
        self.counts = np.bincount(res.labels, minlength=self.k).astype(np.float64)
        self.reference = res.inertia / len(data)
        self.refits += 1
        return self.reference

    def partial_fit(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """Assign a batch, move the centroids one mini-batch step, refit on drift.
        Returns (labels, inertia per point of the batch before the step)."""
        raw = np.asarray(x, dtype=np.float32)
        if self.centroids is None:
            self.fit(raw)
        else:
            self._remember(raw)
        x = self.transform(raw)
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
            self.fit(raw)
            labels, _ = self.backend.assign(self.transform(raw), self.centroids)
        return labels, per_point

    def inertia(self, x: np.ndarray) -> float:
        """Sum of squared distances of ``x`` to the current centroids."""
        return float(self.backend.assign(self.transform(np.asarray(x, np.float32)), self.centroids)[1].sum())
