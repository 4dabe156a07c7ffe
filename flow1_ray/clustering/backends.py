"""KMeans backends behind one small adapter: cuML, torch (CUDA or CPU), scikit-learn.

``fit`` runs Lloyd's algorithm from k-means++ seeds; ``assign`` gives each row its nearest
centroid. The torch backend writes both as matrix products (``||x||^2 - 2 x.c + ||c||^2``),
which is what a GPU does well; every RLlib GPU node has torch with CUDA, few have RAPIDS.
The CPU path is scikit-learn's own KMeans, not a hand-written one. Nothing here imports Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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


class TorchKMeans:
    """Lloyd with k-means++ init as matrix products, on ``device`` (cuda if present)."""

    name = "torch"

    def __init__(self, device: str | None = None, dtype: Any = None) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype or torch.float32

    def _t(self, x: np.ndarray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(x), dtype=self.dtype, device=self.device)

    def _sqdist(self, x: Any, c: Any, x2: Any) -> Any:
        """Squared distances (n, k): one GEMM with ||c||^2 fused in, then ||x||^2 in place."""
        d = self.torch.addmm((c * c).sum(1)[None, :], x, c.T, beta=1.0, alpha=-2.0)
        return d.add_(x2[:, None]).clamp_min_(0.0)

    def _nearest(self, x: Any, c: Any) -> Any:
        """The nearest centroid of each row: ||x||^2 is the same for every centroid of a row,
        so the argmin needs only ||c||^2 - 2 x.c (one GEMM, one read of its output)."""
        return self.torch.addmm((c * c).sum(1)[None, :], x, c.T, beta=1.0, alpha=-2.0).argmin(1)

    def _kmeanspp(self, x: Any, x2: Any, k: int, gen: Any) -> Any:
        """Greedy k-means++ (as scikit-learn does it): at each step draw 2 + log(k)
        candidates by D^2 sampling and keep the one that lowers the potential most; plain
        k-means++ with one draw often seeds two centres in one blob."""
        torch = self.torch
        n = x.shape[0]
        trials = 2 + int(np.log(k))
        idx = torch.randint(n, (1,), generator=gen).item()
        centers = [x[idx]]
        closest = self._sqdist(x, x[idx:idx + 1], x2)[:, 0]
        for _ in range(1, k):
            total = closest.sum()
            if total <= 0:
                cand = torch.randint(n, (trials,), generator=gen).to(x.device)
            else:  # D^2 sampling on the device: inverse CDF of the running potential
                cdf = closest.double().cumsum(0)
                u = torch.rand(trials, generator=gen, dtype=torch.float64).to(x.device) * cdf[-1]
                cand = torch.searchsorted(cdf, u).clamp_max_(n - 1)
            d = torch.minimum(closest[:, None], self._sqdist(x, x[cand], x2))  # (n, trials)
            best = int(d.sum(0).argmin())
            closest = d[:, best]
            centers.append(x[cand[best]])
        return torch.stack(centers)

    def fit(self, x: np.ndarray, k: int, seed: int = 0, max_iter: int = 20, tol: float = 0.0) -> KMeansResult:
        torch = self.torch
        gen = torch.Generator(device="cpu").manual_seed(seed)
        xt = self._t(x)
        x2 = (xt * xt).sum(1)
        c = self._kmeanspp(xt, x2, k, gen)
        it = 0
        for it in range(1, max_iter + 1):
            labels = self._nearest(xt, c)
            sums = torch.zeros_like(c).index_add_(0, labels, xt)
            counts = torch.bincount(labels, minlength=k).to(xt.dtype)
            empty = counts == 0
            new = sums / counts.clamp_min(1.0)[:, None]
            new[empty] = c[empty]  # an empty cluster keeps its centroid
            shift = float(((new - c) ** 2).sum())
            c = new
            if shift <= tol:
                break
        d = self._sqdist(xt, c, x2)
        dist, labels = d.min(1)
        return KMeansResult(c.float().cpu().numpy(), labels.cpu().numpy().astype(np.int64),
                            float(dist.double().sum()), it)

    def assign(self, x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt, ct = self._t(x), self._t(centroids)
        dist, labels = self._sqdist(xt, ct, (xt * xt).sum(1)).min(1)
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
