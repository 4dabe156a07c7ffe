"""KMeans backends behind one small adapter: cuML, torch (CUDA or CPU), scikit-learn.

``fit`` runs Lloyd's algorithm from k-means++ seeds; ``assign`` gives each row its nearest
centroid. The torch backend writes both as matrix products (``||x||^2 - 2 x.c + ||c||^2``),
which is what a GPU does well: on CUDA an assignment is one fused Triton kernel
(``fused_nearest.py``), elsewhere a chunk of rows at a time (never the n x k matrix); it
seeds from a subsample. Every RLlib GPU node has torch with CUDA (and Triton with it), few
have RAPIDS.
The CPU path is scikit-learn's own KMeans, not a hand-written one. Nothing here imports Ray.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "cuml", "torch", "sklearn")


@dataclass
class KMeansResult:
    centroids: np.ndarray   # (k, d) float32
    labels: np.ndarray      # (n,) int64
    inertia: float          # sum of squared distances to the assigned centroid
    iterations: int


def _cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _cuml_available() -> bool:
    try:
        import cuml  # noqa: F401
    except Exception:
        return False
    return _cuda_available()


def resolve_backend(name: str = "auto") -> str:
    """``auto``: cuML if it imports and a GPU is visible, else torch on CUDA, else sklearn."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name != "auto":
        return name
    if _cuml_available():
        return "cuml"
    if _cuda_available():
        return "torch"
    return "sklearn"


class SklearnKMeans:
    name = "sklearn"

    def fit(self, x: np.ndarray, k: int, seed: int = 0, max_iter: int = 20) -> KMeansResult:
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed, tol=0.0).fit(x)
        return KMeansResult(km.cluster_centers_.astype(np.float32), km.labels_.astype(np.int64),
                            float(km.inertia_), int(km.n_iter_))

    def assign(self, x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(labels, squared distance of each row to its centroid)."""
        from sklearn.metrics import pairwise_distances_argmin_min

        labels, dist = pairwise_distances_argmin_min(x, centroids)
        return labels.astype(np.int64), dist.astype(np.float64) ** 2


#: bytes of one chunk's (rows x k) distance block: the assignment never holds the n x k matrix
#: (at n=1M, k=256 that is 1 GB written and read back, which made one pass memory-bound);
#: 32 MB stays in a large GPU's L2 cache between the GEMM that writes it and the argmin
CHUNK_BYTES = 32 * 1024**2
#: k-means++ seeds from a random subsample of this many rows per cluster (at least
#: SEED_MIN_ROWS): its k sequential steps then cost little next to the Lloyd passes
SEED_ROWS_PER_CLUSTER = 256
SEED_MIN_ROWS = 16_384


class TorchKMeans:
    """Lloyd with k-means++ init as matrix products, on ``device`` (cuda if present)."""

    name = "torch"

    def __init__(self, device: str | None = None, dtype: Any = None, chunk_bytes: int = CHUNK_BYTES,
                 fused: bool | None = None) -> None:
        """``fused``: the assignment as one Triton kernel (``clustering/fused_nearest.py``);
        by default on CUDA wherever Triton imports. A fused call that raises turns it off
        for this instance (``fused_error`` says why) and the chunked path answers."""
        import torch

        from flow1_ray.clustering import fused_nearest

        self.torch = torch
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype or torch.float32
        self.chunk_bytes = int(chunk_bytes)
        self.fused = (self.device.type == "cuda" and fused_nearest.available()) if fused is None else bool(fused)
        self.fused_error: str | None = None

    def _t(self, x: np.ndarray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(x), dtype=self.dtype, device=self.device)

    def _sqdist(self, x: Any, c: Any, x2: Any) -> Any:
        """Squared distances (n, k) for a small k (the seeding's candidates): one GEMM with
        ||c||^2 fused in, then ||x||^2 in place."""
        d = self.torch.addmm((c * c).sum(1)[None, :], x, c.T, beta=1.0, alpha=-2.0)
        return d.add_(x2[:, None]).clamp_min_(0.0)

    def _rows_per_chunk(self, k: int) -> int:
        return max(1024, self.chunk_bytes // (4 * max(k, 1)))

    def nearest(self, x: Any, c: Any, x2: Any | None = None) -> tuple[Any, Any]:
        """(labels, squared distance to that centroid) of each row. ``||x||^2`` is the same
        for every centroid of a row, so the argmin needs only ``||c||^2 - 2 x.c``. On CUDA
        with Triton that is one fused kernel; else chunk by chunk, per chunk one GEMM with
        ||c||^2 fused in and one min over the block while it is hot. The n x k matrix is
        never held."""
        torch = self.torch
        fused = self._fused(x, c)
        if fused is not None:
            labels, dist = fused
        else:
            n = x.shape[0]
            c2 = (c * c).sum(1)[None, :]
            labels = torch.empty(n, dtype=torch.int64, device=x.device)
            dist = torch.empty(n, dtype=x.dtype, device=x.device)
            step = self._rows_per_chunk(c.shape[0])
            for i in range(0, n, step):
                block = torch.addmm(c2, x[i:i + step], c.T, beta=1.0, alpha=-2.0)
                torch.min(block, 1, out=(dist[i:i + step], labels[i:i + step]))
        if x2 is not None:
            dist.add_(x2).clamp_min_(0.0)
        return labels, dist

    def _fused(self, x: Any, c: Any) -> tuple[Any, Any] | None:
        """The fused kernel's answer, or None where it does not apply or has failed."""
        from flow1_ray.clustering import fused_nearest

        if not self.fused or x.dtype != self.torch.float32 or x.shape[1] > fused_nearest.MAX_D:
            return None
        try:
            return fused_nearest.nearest(x, c)
        except Exception as e:  # a Triton or driver failure: the chunked path answers from now on
            self.fused, self.fused_error = False, f"{type(e).__name__}: {e}"[:300]
            logger.warning("flow1: the fused CUDA assignment failed (%s); the clusterer assigns with chunked "
                           "matrix products from now on", self.fused_error)
            return None

    def _nearest(self, x: Any, c: Any) -> Any:
        return self.nearest(x, c)[0]

    def _kmeanspp(self, x: Any, x2: Any, k: int, gen: Any) -> Any:
        """Greedy k-means++ (as scikit-learn does it): at each step draw 2 + log(k)
        candidates by D^2 sampling and keep the one that lowers the potential most; plain
        k-means++ with one draw often seeds two centres in one blob. The k steps run on the
        device without a sync: every step's random numbers are drawn on the host and copied
        in one go, the draw is an inverse CDF of the running potential (``searchsorted``),
        a uniform draw where the potential is zero, and the best candidate is picked by
        ``index_select``, never read back (each ``.item()`` or host copy waits for the
        device's queue: ~2k waits a seeding before)."""
        torch = self.torch
        n = x.shape[0]
        trials = 2 + int(np.log(k))
        uniform = torch.rand((k, trials), generator=gen, dtype=torch.float64).to(x.device)
        fallback = torch.randint(n, (k, trials), generator=gen).to(x.device)
        first = fallback[0, :1]
        centers = [x.index_select(0, first)]
        closest = self._sqdist(x, centers[0], x2)[:, 0]
        for i in range(1, k):
            cdf = closest.double().cumsum(0)
            total = cdf[-1]
            drawn = torch.searchsorted(cdf, uniform[i] * total).clamp_max_(n - 1)
            cand = torch.where(total > 0, drawn, fallback[i])
            d = torch.minimum(closest[:, None], self._sqdist(x, x.index_select(0, cand), x2))  # (n, trials)
            best = d.sum(0).argmin().view(1)
            closest = d.index_select(1, best)[:, 0]
            centers.append(x.index_select(0, cand.index_select(0, best)))
        return torch.cat(centers)

    def seed(self, x: Any, x2: Any, k: int, gen: Any) -> Any:
        """k-means++ on a random subsample (all rows when there are few): the seeding's k
        sequential steps each read the rows they seed from."""
        n = x.shape[0]
        m = max(SEED_MIN_ROWS, SEED_ROWS_PER_CLUSTER * k)
        if n <= m:
            return self._kmeanspp(x, x2, k, gen)
        pick = self.torch.randperm(n, generator=gen)[:m].to(x.device)
        return self._kmeanspp(x[pick], x2[pick], k, gen)

    def lloyd_step(self, x: Any, c: Any, ones: Any) -> tuple[Any, Any, Any]:
        """One Lloyd step on the device: (the new centroids, their squared shift as a
        tensor, the labels they are the means of). Sums and counts by ``index_add_``
        (``bincount`` and boolean-mask indexing each wait for the device to learn their
        output's size); an empty cluster keeps its centroid (``torch.where``)."""
        torch = self.torch
        labels = self._nearest(x, c)
        sums = torch.zeros_like(c).index_add_(0, labels, x)
        counts = torch.zeros(c.shape[0], dtype=ones.dtype, device=x.device).index_add_(0, labels, ones)
        new = torch.where((counts > 0)[:, None], sums / counts.clamp_min(1.0).to(x.dtype)[:, None], c)
        return new, ((new - c) ** 2).sum(), labels

    def fit(self, x: np.ndarray, k: int, seed: int = 0, max_iter: int = 20, tol: float = 0.0) -> KMeansResult:
        torch = self.torch
        gen = torch.Generator(device="cpu").manual_seed(seed)
        xt = self._t(x)
        x2 = (xt * xt).sum(1)
        c = self.seed(xt, x2, k, gen)
        ones = torch.ones(xt.shape[0], dtype=torch.float64, device=xt.device)   # counts exact past 2**24 rows
        it, labels = 0, None
        for it in range(1, max_iter + 1):
            c, shift, new_labels = self.lloyd_step(xt, c, ones)
            # converged when the centroids stop moving or, as scikit-learn's strict test, when
            # no row changes cluster: on CUDA index_add_'s atomics sum in no fixed order, so
            # the means of unchanged labels still move in their last bits
            done = shift <= tol if labels is None else (shift <= tol) | (new_labels == labels).all()
            if bool(done):   # the one read back per step
                break
            labels = new_labels
        labels, dist = self.nearest(xt, c, x2)
        return KMeansResult(c.float().cpu().numpy(), labels.cpu().numpy().astype(np.int64),
                            float(dist.double().sum()), it)

    def assign(self, x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt, ct = self._t(x), self._t(centroids)
        labels, dist = self.nearest(xt, ct, (xt * xt).sum(1))
        return labels.cpu().numpy().astype(np.int64), dist.double().cpu().numpy()


class CumlKMeans:
    name = "cuml"

    def fit(self, x: np.ndarray, k: int, seed: int = 0, max_iter: int = 20) -> KMeansResult:
        from cuml.cluster import KMeans

        km = KMeans(n_clusters=k, max_iter=max_iter, random_state=seed, init="k-means++", n_init=1,
                    output_type="numpy").fit(x.astype(np.float32))
        return KMeansResult(np.asarray(km.cluster_centers_, np.float32), np.asarray(km.labels_, np.int64),
                            float(km.inertia_), int(getattr(km, "n_iter_", max_iter)))

    def assign(self, x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return TorchKMeans("cuda").assign(x, centroids)


def make_backend(name: str = "auto") -> Any:
    chosen = resolve_backend(name)
    return {"cuml": CumlKMeans, "torch": TorchKMeans, "sklearn": SklearnKMeans}[chosen]()
