"""StateClusterer: KMeans over the states the EnvRunners visit; P(action | cluster) per snapshot.

Runners send thin batches (flattened state features, action indices, termination flags)
fire-and-forget; ``ingest`` only adds them to a bounded uniform reservoir, the snapshot
window. A snapshot (every ``heatmap_every`` iterations, spaced further when its CPU time
would exceed ``heatmap_budget`` of a core: :mod:`flow1_ray.checks.own.budgets`) is queued to
a worker thread: the streaming KMeans assigns the window's states and takes one mini-batch
step (a refit only when the states moved), the clusters are judged, trends are read against
the previous snapshots, and the cluster rows, events and a heatmap job go to the Recorder,
which writes them off its own request path. Nothing here is ever on the path of a runner's sample().

Size (~400 lines): the per-module core, the service and its thread, and the GPU actor
factory; the rules are in checks/states/state_action.py, the drawing in clustering/heatmap.py.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..checks.states.state_action import (Snapshot, StateActionThresholds, cluster_means, decided_share,
    trend_findings, verdicts, warn_codes)
from ..checks.thresholds import DEFAULT
from ..clustering.backends import TorchKMeans, resolve_backend
from ..clustering.crossover import CrossoverKMeans, choose_engine
from ..checks.own.budgets import SnapshotBudget
from ..clustering.describe import Feature
from ..clustering.frames import FRAME_BANK, FrameBank, nearest
from ..clustering.reservoir import Reservoir
from ..clustering.state_action_map import StateActionMap, cluster_thumbnails
from ..clustering.streaming import StreamingKMeans
from ..common.schema import DEFAULT_MODULE_ID as DEFAULT_MODULE
from .priority import lower_this_thread

WINDOW_ROWS = 20_000       # states judged per snapshot: a uniform sample of those that arrived
RESERVOIR_ROWS = 50_000    # history a refit sees
HISTORY = 8                # snapshots kept for the trend rules
PENDING_SNAPSHOTS = 4      # snapshot requests queued while one is computed; more are skipped




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


class StatesService:
    """The StateClusterer's service: one :class:`ClustererCore` per RLModule (a single-agent
    run has one, ``default_policy``), a bounded queue of snapshot rounds and the thread that
    computes them at nice +10 and hands each module's snapshot to ``deliver`` (the Recorder).
    It runs inside the run's hub on CPU, or in its own StateClusterer actor when it is
    given a GPU share (placed on a GPU node, away from the hub's node if need be)."""

    def __init__(self, deliver: Callable[[dict], Any], n_clusters: int = 30, backend: str = "auto",
                 thresholds: dict | None = None, seed: int = 0, placement: str = "cpu",
                 report: Callable[[list[dict]], Any] | None = None, heatmap_budget: float = 0.0,
                 render_cpu_s: Callable[[], float] | None = None, heatmap_every: int | None = None) -> None:
        """``report(events)`` hands WATCHER_OFF and HEATMAPS_SPACED events to the Recorder (a
        module whose states cannot be taken or clustered is said once, not counted in
        silence); ``heatmap_budget``: the share of one core the snapshots may take
        (:mod:`flow1_ray.checks.own.budgets`; 0: every request runs), their cost the
        clustering thread's CPU time plus ``render_cpu_s()``, the last heatmap's drawing
        where it is drawn in this process (the hub's Recorder)."""
        self.deliver = deliver
        self.report = report
        self.cadence = SnapshotBudget(heatmap_budget)
        self.render_cpu_s = render_cpu_s
        self.heatmap_every = heatmap_every
        self._off_said: set[str] = set()
        self.args = dict(n_clusters=n_clusters, backend=backend, thresholds=thresholds, seed=seed)
        self.backend = resolve_backend(backend)
        self.cores: dict[str, ClustererCore] = {}
        self._cores_lock = threading.Lock()
        self.placement = placement
        self.drop_counts: dict[str, int] = {}   # per sender: its running count of dropped batches
        self.rounds = 0                 # snapshot rounds computed
        self.dropped_snapshots = 0      # requests skipped (queue full) or not delivered
        self.errors = 0
        self.last_error = ""
        self.priority = ""
        self._round_cpu_s = 0.0   # the last round's CPU time on the clustering thread
        self.queued_iteration: int | None = None   # the iteration of the last round queued
        self._queue: queue.Queue = queue.Queue(maxsize=PENDING_SNAPSHOTS)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="flow1-clusterer")
        self._thread.start()

    def _core(self, module: str) -> ClustererCore:
        with self._cores_lock:
            core = self.cores.get(module)
            if core is None:
                core = self.cores[module] = ClustererCore(**self.args, module=module)
            return core

    def ingest(self, batch: dict) -> tuple[str, int] | None:
        """One batch from an EnvRunner: rows per module. Returns (source, dropped) when the
        sender's running drop count rose (the caller tells the Recorder), else None."""
        modules = batch.get("modules")
        if modules is None and "x" in batch:  # one module's rows at the top level
            modules = {DEFAULT_MODULE: batch}
        for mid, rows in (modules or {}).items():
            try:
                self._core(str(mid)).ingest_rows(rows["x"], rows["a"], rows["fail"], rows["labels"],
                                                 rows.get("policy"), rows.get("policy_kind"),
                                                 rows.get("features"), rows.get("frames"))
            except Exception as e:  # this module's batch is lost; the others go on
                self.errors += 1
                self._off(str(mid), "could not take its sampled states", e)
        src, dropped = str(batch.get("source")), int(batch.get("dropped", 0))
        if dropped > self.drop_counts.get(src, 0):
            self.drop_counts[src] = dropped
            return src, dropped
        return None

    def _windows(self) -> dict[str, tuple]:
        with self._cores_lock:
            cores = list(self.cores.items())
        out = {}
        for mid, core in cores:
            window = core.take_window()
            if window[0] is not None:
                out[mid] = window
        return out

    def snapshot(self, iteration: int, return_mean: float | None = None) -> bool:
        """Close every module's window now (so that a snapshot holds the states up to its
        iteration, however late the thread computes it) and queue them; False when no state
        arrived, or when earlier snapshots still wait (then skipped and counted), or when the
        last one's cost puts this one over ``heatmap_budget`` (skipped, its states left in the
        window for the next; said once)."""
        self._update_cost()
        now = time.monotonic()
        if not self.cadence.due(now, computing=bool(self._queue.unfinished_tasks)):
            self._say_spaced()
            return False
        windows = self._windows()
        if not windows:
            return False
        try:
            self._queue.put_nowait((iteration, return_mean, windows))
        except queue.Full:
            self.dropped_snapshots += 1
            return False
        self.cadence.started(now)
        self.queued_iteration = iteration
        return True

    def finish(self, iteration: int | None, return_mean: float | None, wait_s: float) -> bool:
        """The run's close: queue a last snapshot of ``iteration``, the run's last, unless
        a snapshot of it was already queued (or ``iteration`` is None), and wait, at most
        ``wait_s``, until every queued one is computed and delivered. A request that was
        spaced (HEATMAPS_SPACED) left its states in the window: this one judges them."""
        deadline = time.monotonic() + wait_s
        self._update_cost()
        self._say_spaced()
        if iteration is not None and self.queued_iteration is not None and iteration <= self.queued_iteration:
            iteration = None
        windows = self._windows() if iteration is not None else {}
        if iteration is not None and windows:
            try:
                self._queue.put((iteration, return_mean, windows), timeout=wait_s)
            except queue.Full:
                self.dropped_snapshots += 1
        q = self._queue
        with q.all_tasks_done:
            return q.all_tasks_done.wait_for(lambda: q.unfinished_tasks == 0,
                                             timeout=max(0.0, deadline - time.monotonic()))

    def _update_cost(self) -> None:
        """The last round's cost: its clustering thread's CPU time plus, where the heatmap is
        drawn in this process, the last drawing's."""
        drawing = 0.0
        if self.render_cpu_s is not None:
            try:
                drawing = float(self.render_cpu_s())
            except Exception:
                drawing = 0.0
        self.cadence.cost_s = self._round_cpu_s + drawing

    def _say_spaced(self) -> None:
        """HEATMAPS_SPACED once, when a request was skipped and a round's cost is known."""
        if self.cadence.cost_s <= 0:
            return
        f = self.cadence.spaced_finding(self.heatmap_every)
        if f is not None and self.report is not None:
            try:
                self.report([f.to_event().to_dict()])
            except Exception:
                pass

    def _loop(self) -> None:
        self.priority = lower_this_thread()
        _warm_up(self.backend)
        while True:
            iteration, return_mean, windows = self._queue.get()
            c0 = time.thread_time()
            try:
                for mid, window in windows.items():
                    try:
                        out = self._core(mid).compute_snapshot(iteration, return_mean, window)
                        if out is not None:
                            self.deliver(out.payload())
                    except Exception as e:  # a failed snapshot must not stop the next ones
                        self.errors += 1
                        self.dropped_snapshots += 1
                        self._off(mid, f"the snapshot of iteration {iteration} failed", e)
                self.rounds += 1
            finally:
                self._round_cpu_s = time.thread_time() - c0
                self._queue.task_done()

    def _off(self, module: str, what: str, e: BaseException) -> None:
        """The first failure of a module's state maps, said as WATCHER_OFF (once per module)."""
        self.last_error = f"{module}: {type(e).__name__}: {e}"[:300]
        if module in self._off_said or self.report is None:
            return
        self._off_said.add(module)
        from ..checks.own.watchers import CLUSTERER, watcher_off

        try:
            self.report([watcher_off(CLUSTERER, f"module {module} ({what})", e,
                                     "its CHAOS / BLIND_SPOT / ERROR_FIXATION findings and heatmaps").to_dict()])
        except Exception:
            pass

    def status(self) -> dict[str, Any]:
        with self._cores_lock:
            per = {mid: core.status() for mid, core in self.cores.items()}
        total = {k: sum(st[k] for st in per.values()) for k in ("received", "window", "rejected", "nonfinite")}
        return {**total, "snapshots": self.rounds, "modules": per, "backend": self.backend,
                "placement": self.placement, "priority": self.priority,
                "snapshot_cost_s": round(self.cadence.cost_s, 4), "snapshots_spaced": self.cadence.skipped,
                "dropped_snapshots": self.dropped_snapshots, "errors": self.errors, "last_error": self.last_error,
                "last_compute_s": max((st["last_compute_s"] for st in per.values()), default=0.0)}


def _warm_up(backend: str) -> None:
    """Import the KMeans library now, in the background class, while the run starts: its
    import (~0.4 s of CPU for scikit-learn) would otherwise land on the first snapshot."""
    try:
        import scipy.stats  # noqa: F401  (the verdicts' binomial test, imported where it is used)

        if backend == "sklearn":
            import sklearn.cluster  # noqa: F401
            import sklearn.metrics  # noqa: F401
        elif backend in ("torch", "cuml"):  # the device's context and kernels, and the CPU engine
            import sklearn.cluster  # noqa: F401
            import sklearn.metrics  # noqa: F401

            TorchKMeans().fit(np.random.default_rng(0).random((256, 4), np.float32), 2, max_iter=1)
    except Exception:  # the first snapshot will say what is wrong
        pass


def limit_threads(backend: str) -> None:
    """A diagnostic process without a CPU reservation must not take every core for
    BLAS/OpenMP (scikit-learn, torch)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    if backend == "torch":
        import torch
        torch.set_num_threads(1)


def make_clusterer_actor():
    """The StateClusterer Ray actor class, for a run that gives the clusterer a GPU share:
    a :class:`StatesService` in its own process, delivering to the hub (built lazily so
    this module imports without Ray). On CPU the service runs inside the hub instead."""
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1)
    class StateClusterer:
        def __init__(self, hub_name: str, namespace: str, n_clusters: int = 30, backend: str = "auto",
                     thresholds: dict | None = None, seed: int = 0, heatmap_budget: float = 0.0,
                     heatmap_every: int | None = None) -> None:
            gpus = ray.get_gpu_ids()
            if backend == "auto" and not gpus:  # no GPU given to this actor: do not use one
                backend = "sklearn"
            limit_threads(resolve_backend(backend))
            self._hub_name, self._namespace = hub_name, namespace
            self._hub = None
            self.service = StatesService(self._deliver, n_clusters, backend, thresholds, seed,
                                         placement=f"gpu {gpus}" if gpus else "cpu", report=self._report,
                                         heatmap_budget=heatmap_budget, heatmap_every=heatmap_every)

        def _report(self, events: list[dict]) -> None:
            self._hub_handle().add_events.remote(events)

        def _hub_handle(self) -> Any:
            if self._hub is None:
                self._hub = ray.get_actor(self._hub_name, namespace=self._namespace)
            return self._hub

        def _deliver(self, payload: dict) -> None:
            try:  # waited for: back-pressure, and finish() means delivered
                ray.get(self._hub_handle().add_snapshot.remote(payload), timeout=30)
            except Exception:
                self._hub = None
                raise

        def ingest_states(self, batch: dict) -> None:
            rose = self.service.ingest(batch)
            if rose is not None:
                try:
                    self._hub_handle().note_dropped.remote(*rose, batch.get("worker_index"))
                except Exception:
                    self._hub = None

        def snapshot(self, iteration: int, return_mean: float | None = None) -> bool:
            return self.service.snapshot(iteration, return_mean)

        def finish_states(self, iteration: int | None, return_mean: float | None, wait_s: float) -> bool:
            return self.service.finish(iteration, return_mean, wait_s)

        def states_status(self) -> dict[str, Any]:
            return self.service.status()

    return StateClusterer
