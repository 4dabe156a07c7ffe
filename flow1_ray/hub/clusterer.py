"""StateClusterer: KMeans over the states the EnvRunners visit; P(action | cluster) per snapshot.

Runners send thin batches (flattened state features, action indices, termination flags)
fire-and-forget; ``ingest`` only adds them to a bounded uniform reservoir, the snapshot
window. A snapshot (every ``heatmap_every`` iterations, spaced further when its CPU time
would exceed ``heatmap_budget`` of a core: :mod:`flow1_ray.checks.own.budgets`) is queued to
a worker thread: the streaming KMeans assigns the window's states and takes one mini-batch
step (a refit only when the states moved), the clusters are judged, trends are read against
the previous snapshots, and the cluster rows, events and a heatmap job go to the Recorder,
which writes them off its own request path. Nothing here is ever on the path of a runner's sample().

This module holds the service and its thread, and the GPU actor factory; the per-module
core (one module's window, model and snapshot) is in clusterer_core.py, the rules in
checks/states/state_action.py, the drawing in clustering/heatmap.py.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

import numpy as np

from ..checks.own.budgets import SnapshotBudget
from ..clustering.backends import TorchKMeans, resolve_backend
from ..common.schema import DEFAULT_MODULE_ID as DEFAULT_MODULE
from .clusterer_core import ClustererCore
from .priority import lower_this_thread

PENDING_SNAPSHOTS = 4      # snapshot requests queued while one is computed; more are skipped


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
            done = q.all_tasks_done.wait_for(lambda: q.unfinished_tasks == 0,
                                             timeout=max(0.0, deadline - time.monotonic()))
        # requests skipped while the first round was still computing (a busy machine): its
        # cost is known now, and they are said
        self._update_cost()
        self._say_spaced()
        return done

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
