"""Flow1Hub: the run's Recorder, heartbeat monitor, its own node's probe and (on CPU) the
state clusterer, as threads of one Ray actor process.

Why one process: an idle Ray actor process costs ~1.1 % of a core by itself (measured: four
bare actors at 1.10-1.17 % each), and a run had four (Recorder, HeartbeatMonitor,
NodeProbe, StateClusterer) on the node that also runs the learner. Isolation is kept where
it matters: each part keeps its own request queue (a Ray concurrency group), so a slow
snapshot never delays a runner's events or the probes' reports; the Recorder's group
serves one request at a time, so the calls of one caller are written in the order sent;
the clustering and heatmap threads run at nice +10. Probes on other nodes stay actors
pinned there (lock files are node-local), and a clusterer given a GPU share stays its own
actor (it may have to live on another node than the hub).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from . import lastword
from ..common import codes as C
from ..common import schema as S
from ..common.events import Event
from ..common.iteration import row as iteration_row
from .prometheus import METRICS_INTERVAL_S, make_run_metrics
from .clusterer import StatesService, limit_threads
from .monitor import MonitorService
from .repro_store import ReproStore
from .recorder import MIN_FLUSH_GAP_S, RecorderService

#: Each part's request queue: the Recorder and the clusterer serve one call at a time (in
#: the order sent), the monitor a few (``wait_probes`` blocks while probes start).
CONCURRENCY = {"recorder": 1, "monitor": 4, "states": 1}


class HubCore:
    """The hub's parts and its life, without Ray: what :func:`make_hub_actor` wraps."""

    def __init__(self, run_dir: str, run_id: str, job_id: str, opts: dict, states: bool,
                 owner_pid: int | None = None, restarted: bool = False, algorithm: str | None = None,
                 config: dict | None = None) -> None:
        """``opts``: the Flow1Options as a dict; ``states``: whether the state clusterer
        lives here (False: none, or its own GPU actor); ``owner_pid``: the Algorithm's
        process (on this node: the hub's node affinity), watched so that its death is
        written down before Ray ends the hub with it; ``restarted``: Ray rebuilt this actor;
        ``algorithm``: the Algorithm's class name and ``config`` its settings
        (:func:`~flow1_ray.checks.advice.config_settings`), for ``run.json``."""
        self.started_at = time.time()  # a restart (Ray's) is a new incarnation
        self.closed = False
        self.recorder = RecorderService(run_dir, run_id, opts["flush_interval_s"], opts, job_id=job_id,
                                        **({"algorithm": algorithm} if algorithm else {}),
                                        **({"config": config} if config else {}))
        self.monitor = MonitorService(run_id, job_id, opts["stall_timeout_s"], opts["stall_action"],
                                      opts["probe_interval_s"], opts["heartbeat_interval_s"],
                                      opts["thresholds"], send=self._record, crash_recorded=self.recorder.crash_recorded,
                                      findings_of=self.recorder.findings_of)
        self.recorder.alloc_sink = self._alloc_sites
        self.repro = ReproStore(run_dir, opts.get("repro_max", 20))
        if restarted:
            self._rebuild(run_id)
        if opts["state_actions"]:  # heatmaps will come (from here or a GPU clusterer)
            self.recorder.heatmaps.warm_up()
        self.states = None
        if states:  # on CPU: scikit-learn unless the user chose torch's CPU path
            backend = "sklearn" if opts["clusterer_backend"] == "auto" else opts["clusterer_backend"]
            limit_threads(backend)
            heatmaps = self.recorder.heatmaps
            self.states = StatesService(self.recorder.add_snapshot, opts["n_clusters"], backend,
                                        opts["thresholds"], 0, report=self.recorder.add_events,
                                        heatmap_budget=opts.get("heatmap_budget", 0.0),
                                        render_cpu_s=lambda: heatmaps.last_render_cpu_s,
                                        heatmap_every=opts.get("heatmap_every"))
        if owner_pid:
            threading.Thread(target=self._watch_owner, args=(int(owner_pid),), name="flow1-owner",
                             daemon=True).start()
            # and, in case Ray ends this process before that thread runs, a process outside it
            launcher = lastword.start(run_dir, int(owner_pid))
            if launcher is not None:
                threading.Thread(target=launcher.wait, name="flow1-lastword", daemon=True).start()
        # the run's live numbers as Ray metrics (Prometheus), refreshed on a thread
        self.metrics = make_run_metrics(run_id)
        if self.metrics is not None:
            threading.Thread(target=self._metrics_loop, name="flow1-metrics", daemon=True).start()

    def _alloc_sites(self, key: str, summary: dict) -> None:
        """A runner's allocation-site window, for the leak judge (checks/run/leak.py)."""
        core = self.monitor.contention
        if core is not None:
            core.add_sites(key, summary)

    def _rebuild(self, run_id: str) -> None:
        """Ray restarted this hub (it died: a SIGKILL, the OOM killer): the Recorder's
        counts and the monitor's workers and open incidents from the run directory, the
        run's keys from Ray's KV (watching again without waiting for the driver), and a
        HUB_RESTARTED event that says how long flow1 was down and what it rebuilt."""
        from ..common.names import run_keys
        from ..rundir.runrecord import HEARTBEAT_JSON, read_json

        beat, _ = read_json(self.recorder.run_dir, HEARTBEAT_JSON)
        events = self.recorder.rebuild()
        table = self.monitor.rebuild(events)
        keys, local = [], []
        try:
            keys, local = run_keys(run_id)
            self.monitor.set_keys(keys, local)
            self.monitor.ensure_probes()
        except Exception as e:
            self.monitor.off("probe", "every node (after the hub restarted)", e, "deaths and hangs")
        down = _down_s(beat, self.started_at)
        open_ = [k for k, w in table.items() if w.get("status") in S.UNHEALTHY]
        self._record([Event(C.HUB_RESTARTED, (
            f"flow1's hub restarted (pid {(beat or {}).get('pid', '?')} -> {os.getpid()})"
            + (f", down about {down:.1f} s" if down is not None else "")
            + f": rebuilt {len(table)} worker(s) with incidents ({len(open_)} open), "
              f"{sum(self.recorder.counts.values())} recorded finding(s) and {len(keys)} key(s) to watch from the "
              f"run directory; rows that had not reached it (at most {MIN_FLUSH_GAP_S:g} s of them) are lost"),
            {"previous_pid": (beat or {}).get("pid"), "pid": os.getpid(), "down_s": down,
             "workers_rebuilt": len(table), "open_incidents": open_, "keys": len(keys),
             "findings_rebuilt": sum(self.recorder.counts.values())}, run_id=run_id)])

    def _watch_owner(self, pid: int) -> None:
        """The Algorithm's process died without ``algo.stop()`` (SIGKILL, the OOM killer, a
        crash): Ray ends this hub a moment later (measured: its heartbeat went on ~1.4 s),
        time enough to flush and write an unclean stop record, so that the run directory
        says at once how the run ended instead of a silence a reader must interpret."""
        lastword.first_to_end([pid])
        if self.closed:
            return
        try:
            self.recorder.close(f"the Algorithm's process (pid {pid}) died without stopping the run (a SIGKILL, "
                                f"the OOM killer, a crash); flow1's hub wrote this as it went down", clean=False)
        except Exception:
            pass

    def _metrics_loop(self) -> None:
        while self.metrics is not None and self.metrics.enabled:
            try:
                self.metrics.update(self.monitor.status(), self.recorder.status())
            except Exception:
                pass
            time.sleep(METRICS_INTERVAL_S)

    def _record(self, events: list[Event]) -> None:
        self.recorder.add_events([e.to_dict() for e in events])

    # -- calls that are more than a forward to one part ---------------------------------------
    def status(self) -> dict[str, Any]:
        return {**self.recorder.status(), "started_at": self.started_at, "pid": os.getpid(),
                "node_id": self.monitor.node_id}

    def close(self) -> dict:
        self.closed = True
        return self.recorder.close()

    def ping(self) -> bool:
        return True

    def driver_view(self, cursor: int, turn: dict | None = None) -> dict[str, Any]:
        """The driver's one call per iteration. It brings ``turn``: the learner's events and
        rows, and the driver's part of the iteration's metrics row (``flow1_ray.common.iteration``),
        which is completed from this view and kept before the answer (once ``train()``
        returns, the row is in the hub, which flushes it even if the driver is SIGKILLed
        next). It answers the monitor's full status, the Recorder's status and its log lines
        after ``cursor`` (the events just brought included), the clusterer's counts when it
        lives here. One round trip: each was 0.6-2 ms of each iteration's hook on a 2-core
        machine, and a row sent on the Recorder's queue waited behind the runners' batches.
        Each part is read under its own lock, none waits for the others' queues."""
        turn = turn or {}
        if turn.get("events"):
            self.recorder.add_events(turn["events"])
        if turn.get("learner_rows"):
            self.recorder.add_learner_rows(turn["learner_rows"])
        lines, cursor = self.recorder.lines_since(cursor)
        out: dict[str, Any] = {"status": self.full_status(), "rec": self.status(), "lines": (lines, cursor)}
        if self.states is not None:
            out["states"] = self.states.status()
        if turn.get("row") is not None:
            # the clusterer's counts: this hub's, else (a clusterer of its own) the driver's last of it
            states = out.get("states", turn.get("states") or {})
            self.recorder.add_metrics(iteration_row(turn["row"], out["status"], out["rec"], states))
        return out

    def full_status(self) -> dict:
        return {**self.monitor.full_status(), "started_at": self.started_at}

    def add_repro(self, name: str, arrays: dict, manifest: dict, kind: str) -> str | None:
        """A runner's flight-recorder dump: ``repro/<name>/`` (rundir/repro.py), bounded."""
        return self.repro.add(name, arrays, manifest, kind)

    def ingest_states(self, batch: dict) -> None:
        if self.states is None:
            return
        rose = self.states.ingest(batch)
        if rose is not None:
            self.recorder.note_dropped(*rose, batch.get("worker_index"))

    def snapshot(self, iteration: int, return_mean: float | None = None) -> bool:
        return self.states is not None and self.states.snapshot(iteration, return_mean)

    def finish_states(self, iteration: int | None, return_mean: float | None, wait_s: float) -> bool:
        return self.states is None or self.states.finish(iteration, return_mean, wait_s)

    def states_status(self) -> dict[str, Any]:
        return self.states.status() if self.states is not None else {}


def _down_s(beat: dict | None, now: float) -> float | None:
    """Seconds between the previous incarnation's last heartbeat and this one's start."""
    from datetime import datetime

    try:
        return round(now - datetime.fromisoformat(str((beat or {}).get("ts"))).timestamp(), 2)
    except (TypeError, ValueError):
        return None


#: The actor's methods, by request queue: ``"part.method"`` forwards to that part of the
#: core (``recorder``: RecorderService, ``monitor``: MonitorService), a bare name is the
#: core's own method.
METHODS = {
    "recorder": ("recorder.ingest", "recorder.add_events", "recorder.add_metrics", "recorder.add_learner_rows",
                 "recorder.add_learner_snapshot", "recorder.add_snapshot", "recorder.note_dropped", "recorder.flush",
                 "recorder.lines_since", "recorder.crash_recorded", "add_repro", "status", "close", "ping"),
    "monitor": ("monitor.report", "monitor.probe_error", "monitor.probe_off", "monitor.set_keys",
                "monitor.ensure_probes", "monitor.wait_probes", "monitor.probe_pids", "monitor.stop_probes",
                "monitor.set_stopping",
                "full_status", "driver_view"),
    "states": ("ingest_states", "snapshot", "finish_states", "states_status"),
}


def _forward(path: str):
    part, _, name = path.rpartition(".")

    def call(self, *args, **kwargs):
        target = getattr(self.core, part) if part else self.core
        return getattr(target, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def make_hub_actor():
    """The Flow1Hub Ray actor class (built lazily so this module imports without Ray): a
    :class:`HubCore` behind the methods of :data:`METHODS`, each on its part's queue."""
    import ray

    class Flow1Hub:
        def __init__(self, run_dir: str, run_id: str, job_id: str, opts: dict, states: bool,
                     owner_pid: int | None = None, algorithm: str | None = None, config: dict | None = None) -> None:
            self.core = HubCore(run_dir, run_id, job_id, opts, states, owner_pid,
                                restarted=ray.get_runtime_context().was_current_actor_reconstructed,
                                algorithm=algorithm, config=config)

    for group, paths in METHODS.items():
        for path in paths:
            fn = _forward(path)
            setattr(Flow1Hub, fn.__name__, ray.method(concurrency_group=group)(fn))
    return ray.remote(num_cpus=0, max_restarts=-1, concurrency_groups=CONCURRENCY)(Flow1Hub)
