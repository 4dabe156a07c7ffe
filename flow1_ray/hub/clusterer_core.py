"""ClustererCore: one RLModule's state clusterer without Ray -- its window of sampled
states, its streaming KMeans, and a snapshot: the window's states assigned, the clusters
judged, the trends read, and what the Recorder takes (:class:`SnapshotOut`: cluster rows,
events, a heatmap job named by :func:`heatmap_name`). Used by clusterer.py (StatesService
keeps one per module, in the hub or in the StateClusterer actor); tests drive it directly.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks.states.state_action import (Snapshot, StateActionThresholds, cluster_means, decided_share,
    trend_findings, verdicts, warn_codes)
from ..checks.thresholds import DEFAULT
from ..clustering.backends import resolve_backend
from ..clustering.crossover import CrossoverKMeans, choose_engine
from ..clustering.describe import Feature
from ..clustering.frames import FRAME_BANK, FrameBank, nearest
from ..clustering.reservoir import Reservoir
from ..clustering.state_action_map import StateActionMap, cluster_thumbnails
from ..clustering.streaming import StreamingKMeans
from ..common.schema import DEFAULT_MODULE_ID as DEFAULT_MODULE

WINDOW_ROWS = 20_000       # states judged per snapshot: a uniform sample of those that arrived
RESERVOIR_ROWS = 50_000    # history a refit sees
HISTORY = 8                # snapshots kept for the trend rules


def heatmap_name(iteration: int, module: str = DEFAULT_MODULE) -> str:
    """``heatmaps/iter_000010.png``; a module other than the default one gets its own
    ``heatmaps/iter_000010-<module>.png`` (multi-agent: one heatmap per RLModule)."""
    if module == DEFAULT_MODULE:
        return f"heatmaps/iter_{iteration:06d}.png"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(module))[:60]
    return f"heatmaps/iter_{iteration:06d}-{slug}.png"


@dataclass
class SnapshotOut:
    """One snapshot as the Recorder takes it: rows for clusters/, events, a heatmap job."""

    index: int
    iteration: int
    rows: Any                       # pyarrow.Table
    events: list[dict]
    heatmap: dict

    def payload(self) -> dict:
        return {"index": self.index, "iteration": self.iteration, "rows": self.rows, "events": self.events,
                "heatmap": self.heatmap}


class ClustererCore:
    """The clusterer without Ray (the actor wraps it; tests drive it directly)."""

    def __init__(self, n_clusters: int = 30, backend: str = "auto", thresholds: dict | None = None,
                 seed: int = 0, window_rows: int = WINDOW_ROWS, device: str | None = None,
                 module: str = DEFAULT_MODULE) -> None:
        """``device`` places the torch backend ("cuda", "cpu"; default: cuda when present);
        ``module`` is the RLModule whose states this core clusters."""
        if n_clusters < 1:
            raise ValueError(f"n_clusters must be >= 1, got {n_clusters}")
        self.module = module
        self.n_clusters = n_clusters
        self.requested = backend
        self.backend = resolve_backend(backend)
        self.device = device
        self.th = DEFAULT.with_overrides(thresholds).family(StateActionThresholds)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.window = Reservoir(window_rows, self.rng)
        self.km: StreamingKMeans | None = None
        self.dim: int | None = None
        self.labels: list[str] | None = None
        self.features: list[Feature] | None = None   # the columns' names (the runners send them)
        self.frames = FrameBank(FRAME_BANK, self.rng)  # image envs: (features, thumbnail) of real states
        self.history: deque[Snapshot] = deque(maxlen=HISTORY)
        self.policy_kind: str | None = None
        self.received = 0          # rows accepted
        self.rejected = 0          # batches whose shape did not match the run's
        self.nonfinite = 0         # rows left out for a NaN or infinite feature
        self.snapshots = 0
        self.last_compute_s = 0.0
        self._lock = threading.Lock()      # the window
        self._km_lock = threading.Lock()   # the model: one snapshot at a time

    # -- intake (the request path: append only) -------------------------------------------
    def ingest_rows(self, x: np.ndarray, actions: np.ndarray, failed: np.ndarray, labels: list[str],
                    policy: np.ndarray | None = None, policy_kind: str | None = None,
                    features: list | None = None, frames: dict | None = None) -> bool:
        """Add one batch to the window; False (and counted) when its shape is not the run's.
        ``policy`` (N x 2: normalised entropy and top probability of the policy, NaN where
        unknown) is optional; ``policy_kind`` is "stochastic" (its probabilities are learnt)
        or "epsilon_greedy" (its confidence follows a schedule, not learning). ``features``
        ((name, kind) per column) names the columns for the descriptions; ``frames``
        ({"x": features, "img": uint8 thumbnails} of a few of the rows, image envs) go to
        the bank the thumbnails are picked from."""
        if policy_kind:
            self.policy_kind = policy_kind
        x = np.asarray(x, np.float32)
        policy = np.full((len(x), 2), np.nan, np.float32) if policy is None else np.asarray(policy, np.float32)
        if x.ndim != 2 or len(actions) != len(x) or len(failed) != len(x) or policy.shape != (len(x), 2):
            self.rejected += 1
            return False
        with self._lock:
            if self.dim is None:
                self.dim, self.labels = x.shape[1], list(labels)
            if x.shape[1] != self.dim or len(labels) != len(self.labels):
                self.rejected += 1
                return False
            # one float32 matrix: features, policy stats, action index, failure flag (exact < 2**24)
            rows = np.concatenate([x, policy, np.asarray(actions, np.float32)[:, None],
                                   np.asarray(failed, np.float32)[:, None]], axis=1)
            finite = np.isfinite(x).all(1)  # a NaN state (OBS_NAN_INF says so) would poison every refit
            if not finite.all():
                self.nonfinite += int((~finite).sum())
                rows = rows[finite]
            self.window.add(rows)
            self.received += len(rows)
            self._take_names_and_frames(features, frames)
        return True

    def _take_names_and_frames(self, features: list | None, frames: dict | None) -> None:
        """The columns' names and a batch's frames, when they fit the run's columns (else
        left out: a description falls back to ``obs[i]``, a cluster to no thumbnail)."""
        if isinstance(features, (list, tuple)) and len(features) == self.dim and self.features is None:
            try:
                self.features = [Feature(str(n), str(kind)) for n, kind in features]
            except (TypeError, ValueError):
                pass
        if isinstance(frames, dict) and frames.get("x") is not None and frames.get("img") is not None:
            fx, img = np.asarray(frames["x"], np.float32), np.asarray(frames["img"])
            if fx.ndim == 2 and fx.shape[1] == self.dim and img.dtype == np.uint8 and np.isfinite(fx).all():
                self.frames.put(fx, img)

    # -- snapshots (the worker thread) --------------------------------------------------
    def take_window(self) -> tuple[np.ndarray | None, int]:
        """The states that arrived since the last snapshot (a uniform sample of at most
        ``window_rows``) and how many arrived; the next window starts empty."""
        with self._lock:
            return self.window.take()

    def compute_snapshot(self, iteration: int, return_mean: float | None = None,
                         window: tuple[np.ndarray | None, int] | None = None, **where: Any) -> SnapshotOut | None:
        """Cluster a window (by default, take it now), judge, read trends; None when no
        state arrived in it."""
        rows, seen = window if window is not None else self.take_window()
        if rows is None or len(rows) == 0:
            return None
        t0 = time.perf_counter()
        with self._km_lock:
            x, policy, a, failed = rows[:, :-4], rows[:, -4:-2], rows[:, -2].astype(np.int64), rows[:, -1]
            if self.km is None or (self.km.k < self.n_clusters and len(x) >= self.n_clusters):
                # the first window had fewer states than clusters: start again at full size
                engine = choose_engine(self.requested, self.backend, self.device)
                self.km = StreamingKMeans(min(self.n_clusters, len(x)), backend=engine, seed=self.seed,
                                          reservoir=RESERVOIR_ROWS, standardize=True)
            km = self.km
            labels, per_point = km.partial_fit(x)
            counts = np.zeros((km.k, len(self.labels)), dtype=np.int64)
            np.add.at(counts, (labels, a), 1)
            fails = np.bincount(labels, weights=failed, minlength=km.k).astype(np.int64)
            pol = cluster_means(labels, policy, km.k)
            # RARE_STATE is rare over the whole run (every state the streaming layer has
            # assigned), not over this window: a state the policy has learnt to avoid is not rare
            share = km.counts / max(km.counts.sum(), 1.0)
            m = StateActionMap(km.centroids.copy(), counts, list(self.labels),
                               verdicts(counts, fails, self.th, share=share, policy=pol),
                               fails, self.backend, per_point * len(x), self.th, pol)
            m.describe(km.mean, km.scale, self.features)
            m.thumbnails = self._thumbnails(km)
            index = self.snapshots
            self.snapshots += 1
            path = heatmap_name(iteration, self.module)
            self.history.append(Snapshot(index, iteration, km.raw_centroids, m.visits, m.verdicts, return_mean,
                                         decided_share(counts, pol, self.th),
                                         [d.label for d in m.descriptions]))
            events = [e.to_dict() for e in m.snapshot_events(snapshot=index, iteration=iteration, heatmap=path,
                                                             states=seen, warn=warn_codes(list(self.history), self.th),
                                                             module=self.module, **where)]
            events += [f.to_event(iteration=iteration, **where).to_dict()
                       for f in trend_findings(list(self.history), self.th, scale=km.scale,
                                               learnt_confidence=self.policy_kind != "epsilon_greedy")]
        self.last_compute_s = time.perf_counter() - t0
        of = "" if self.module == DEFAULT_MODULE else f"module {self.module}, "
        job = {"path": path, "counts": counts, "labels": list(self.labels), "verdicts": m.verdicts,
               "failures": fails, "backend": self.backend, "descriptions": [d.label for d in m.descriptions],
               "thumbnails": m.thumbnails,
               "title": f"iteration {iteration}: state cluster x action ({of}{self.backend}, {len(x)} of {seen} "
                        f"states sampled since the last snapshot)"}
        return SnapshotOut(index, iteration, m.to_arrow(index, iteration, self.module), events, job)

    def _thumbnails(self, km: StreamingKMeans) -> list[bytes | None] | None:
        """Per cluster, the kept frame nearest its centroid among those assigned to it (None
        for a module without frames)."""
        with self._lock:
            fx, img = (self.frames.x, self.frames.img) if len(self.frames) else (None, None)
        if fx is None:
            return None
        labels, d2 = km.backend.assign(km.transform(fx), km.centroids)
        from gymnasium import spaces

        return cluster_thumbnails(nearest(labels, d2, km.k), img, spaces.Box(0, 255, img.shape[1:], np.uint8))

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"received": self.received, "window": len(self.window), "snapshots": self.snapshots,
                    "rejected": self.rejected, "nonfinite": self.nonfinite, "backend": self.backend, "last_compute_s": self.last_compute_s,
                    "refits": self.km.refits if self.km is not None else 0,
                    **({"routing": self.km.backend.status()} if isinstance(getattr(self.km, "backend", None),
                                                                           CrossoverKMeans) else {})}
