"""Recorder: the run's single writer of events, metric rows, cluster rows, heatmaps and the log.

Everything arrives here as plain dicts (fire-and-forget calls); a background thread
writes Parquet parts and log lines every ``flush_interval_s``, and the heatmap writer's
thread renders PNGs: no request waits for a disk. A part, once written, is
never rewritten, so killing the Recorder (the run's hub process) loses at most the rows of
one interval; Ray restarts the hub (``max_restarts=-1``) with the same arguments and it goes
on writing new parts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict, deque
from typing import Any

import pyarrow as pa

from ..common import codes as C
from ..common.events import Event, events_to_table
from ..rundir.runrecord import INTERNAL_DIR, write_heartbeat, write_start, write_stop
from ..rundir.store import (CLUSTERS_DIR, EVENTS_DIR, LEARNER_DIR, LOG_FILE, METRICS_DIR, Location, warm_up,
    write_learner_snapshot, write_part)
from ..checks.own.watchers import RECORDER, TRACEBACK, TRACEBACK_FILE, error_line, watcher_off
from .heatmaps import HeatmapWriter
from ..runner.cost import ProcessCpu, account

MAX_PENDING_ROWS = 100_000   # beyond this (a stuck disk) new rows are dropped and counted
LINES_KEPT = 10_000
DROP_EVENT_EVERY_S = 30.0
#: the WARN/FAIL findings kept per process for its death's likely origin (the last few of the
#: most recent processes: a long run's restarts do not grow it)
FINDINGS_PER_PID = 4
PIDS_KEPT = 2048
HEATMAP_DRAIN_S = 20.0       # close() waits at most this long for queued heatmaps
MIN_FLUSH_GAP_S = 0.5        # a WARN/FAIL or a metric row is written within this, not flush_interval_s
#: a death or a lost node is written at once: at most one such flush per this gap (a node's
#: runners dying together are one flush, not one file part each)
URGENT_FLUSH_GAP_S = 0.02
URGENT_CODES = frozenset({C.WORKER_DIED, C.LEARNER_DIED, C.NODE_LOST})


class RecorderCore:
    """The writer, without Ray (the actor wraps it; tests and tools use it directly)."""

    def __init__(self, run_dir: str, run_id: str, flush_interval_s: float = 2.0, options: dict | None = None,
                 **start: Any) -> None:
        """``options`` and ``start`` go into the run's start record (run.json), written
        here once: a restarted Recorder keeps the first one."""
        self.run_dir = Location(run_dir)   # a local path or a filesystem URI (store.Location)
        # events/ at once: the directory is a run directory (flow1 serve, flow1 report) from
        # the start, not from the first flush that has an event
        (self.run_dir / EVENTS_DIR).mkdir()
        write_start(self.run_dir, run_id, "run", options or {"flush_interval_s": flush_interval_s}, **start)
        self.last_iteration: int | None = None
        self.run_id = run_id
        self.flush_interval = flush_interval_s
        self._events: list[Event] = []
        self._metrics: list[dict] = []
        self._clusters: list[pa.Table] = []
        self._learner: list[dict] = []
        self.learner_snapshots: list[str] = []
        self.heatmaps = HeatmapWriter(self.run_dir)
        self.snapshots = 0
        self._lines: deque[tuple[int, str]] = deque(maxlen=LINES_KEPT)
        self._seq = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.counts: Counter = Counter()
        self.codes: Counter = Counter()
        self.by_status_code: Counter = Counter()   # "FAIL:WORKER_DIED" -> count (WARN and FAIL only)
        self.dropped_rows = 0
        self.samples_dropped: dict[str, int] = {}
        self._drop_event_at: dict[str, float] = {}
        self.flushes = 0
        self.crashed_pids: set[int] = set()   # processes whose env raised (ENV_CRASHED recorded)
        self.findings_by_pid: OrderedDict[int, deque] = OrderedDict()   # a death's likely origin
        self.watchers_off: list[str] = []     # what flow1 does not watch (WATCHER_OFF events' "what")
        self.write_failures = 0               # flushes that could not write everything (rows kept)
        self._writing_off = False             # a WATCHER_OFF for the Recorder is out (until a write works)
        self._soon = threading.Event()        # a WARN/FAIL or a metric row: flush without waiting the interval
        self._urgent = False                  # ... a death among them: without the gap either
        self._internal_n = 0
        self.sampling: dict[int, dict] = {}     # worker index -> its sample() timing (SampleTimes.as_dict)
        self.hub_cpu = ProcessCpu()             # this process's CPU per 1,000 env steps (runner/cost.py)
        self.events_written = 0               # rows in events/ (the heartbeat says it: a reader can tell parts missing)

    # -- intake --------------------------------------------------------------------------
    def add_events(self, events: list[dict]) -> int:
        with self._lock:
            for d in events:
                if len(self._events) >= MAX_PENDING_ROWS:
                    self.dropped_rows += 1
                    continue
                e = d if isinstance(d, Event) else Event.from_dict(d)
                e.run_id = e.run_id or self.run_id
                self._events.append(e)
                self._count(e)
                if e.status != C.PASS:
                    self._urgent = self._urgent or e.code in URGENT_CODES
                    self._soon.set()
                self._seq += 1
                self._lines.append((self._seq, e.log_line()))
        return self._seq

    def _count(self, e: Event) -> None:
        """What the run's numbers keep of one event (also when rebuilt from the run directory)."""
        self.counts[e.status] += 1
        if e.status != C.PASS:
            self.codes[e.code] += 1
            self.by_status_code[f"{e.status}:{e.code}"] += 1
        if e.code == C.ENV_CRASHED and e.pid is not None:
            self.crashed_pids.add(int(e.pid))
        if e.status in (C.WARN, C.FAIL) and e.pid is not None:
            kept = self.findings_by_pid.setdefault(int(e.pid), deque(maxlen=FINDINGS_PER_PID))
            self.findings_by_pid.move_to_end(int(e.pid))
            kept.append({"code": e.code, "status": e.status, "ts": e.ts.timestamp(), "message": e.message[:300]})
            while len(self.findings_by_pid) > PIDS_KEPT:
                self.findings_by_pid.popitem(last=False)
        if e.code == C.WATCHER_OFF:
            what = str(e.evidence.get("what") or e.message)[:200]
            if what not in self.watchers_off and len(self.watchers_off) < 100:
                self.watchers_off.append(what)

    def add_metrics(self, row: dict) -> None:
        self.hub_cpu.mark(row.get("env_steps"))
        with self._lock:
            if isinstance(row.get("iteration"), int):
                self.last_iteration = max(row["iteration"], self.last_iteration or 0)
            if len(self._metrics) < MAX_PENDING_ROWS:
                self._metrics.append(dict(row))
            else:
                self.dropped_rows += 1
        self._soon.set()   # an iteration's row: on disk within MIN_FLUSH_GAP_S, whatever flush_interval_s

    def add_learner_rows(self, rows: list[dict]) -> None:
        """Per-iteration, per-module, per-layer learner numbers (the ``learner/`` table)."""
        with self._lock:
            room = MAX_PENDING_ROWS - len(self._learner)
            self._learner.extend(dict(r) for r in rows[:max(0, room)])
            self.dropped_rows += max(0, len(rows) - max(0, room))

    def add_learner_snapshot(self, name: str, snap: dict, max_count: int, max_bytes: int) -> str | None:
        """Write one learner snapshot (numpy arrays, no pickle) under ``snapshots/name``;
        None when ``max_count`` snapshots exist already or it would pass ``max_bytes``."""
        with self._lock:
            if len(self.learner_snapshots) >= max_count:
                return None
        path = write_learner_snapshot(self.run_dir, name, snap, max_bytes)
        if path is not None:
            with self._lock:
                self.learner_snapshots.append(str(path))
        return None if path is None else str(path)

    def add_snapshot(self, snap: dict) -> None:
        """A StateClusterer snapshot: its cluster rows wait for the next flush, its events
        go to the log, its heatmap to the writer's queue (dropped and counted if full)."""
        with self._lock:
            if sum(t.num_rows for t in self._clusters) < MAX_PENDING_ROWS:
                self._clusters.append(snap["rows"])
            else:
                self.dropped_rows += snap["rows"].num_rows
            self.snapshots += 1
        if snap.get("events"):
            self.add_events(snap["events"])
        if snap.get("heatmap"):
            self.heatmaps.submit(snap["heatmap"])

    def note_dropped(self, source: str, total: int, worker_index: int | None = None) -> None:
        """A sender's running count of batches it dropped under back-pressure; a rise
        becomes a SAMPLES_DROPPED event (at most one per source per DROP_EVENT_EVERY_S)."""
        with self._lock:
            before = self.samples_dropped.get(source, 0)
            self.samples_dropped[source] = max(total, before)
            now = time.monotonic()
            if total <= before or now - self._drop_event_at.get(source, -DROP_EVENT_EVERY_S) < DROP_EVENT_EVERY_S:
                return
            self._drop_event_at[source] = now
        self.add_events([Event(C.SAMPLES_DROPPED,
                               f"worker {worker_index} dropped {total} diagnostic batch(es) so far: the Recorder "
                               f"was behind (max_pending_calls reached) or not reachable; training was not slowed",
                               {"source": source, "dropped_total": total}, worker_index=worker_index)])

    # -- output --------------------------------------------------------------------------
    def flush(self) -> int:
        """Write what has arrived; flushes never overlap, so parts (named by write time)
        keep the order in which their rows arrived. A table that cannot be written (a full
        disk, an object store that is down) keeps its rows in memory for the next flush
        (bounded by MAX_PENDING_ROWS) and the Recorder says once that it is not writing."""
        with self._flush_lock:
            with self._lock:
                events, self._events = self._events, []
                metrics, self._metrics = self._metrics, []
                clusters, self._clusters = self._clusters, []
                learner, self._learner = self._learner, []
            failed: list[str] = []
            for name, rows, write in ((LEARNER_DIR, learner, self._write_learner), (EVENTS_DIR, events, self._write_events),
                                      (METRICS_DIR, metrics, self._write_metrics),
                                      (CLUSTERS_DIR, clusters, self._write_clusters)):
                if not rows:
                    continue
                try:
                    write(rows)
                except Exception as e:
                    failed.append(f"{name}: {error_line(e)}")
                    self._keep(name, rows)
            try:
                write_heartbeat(self.run_dir, self.last_iteration, events_written=self.events_written)
            except Exception as e:
                failed.append(f"heartbeat: {error_line(e)}")
            self.flushes += 1
            self._note_writes(failed)
            return 0 if failed else len(events) + len(metrics) + len(learner) + sum(t.num_rows for t in clusters)

    def _write_learner(self, rows: list[dict]) -> None:
        write_part(pa.Table.from_pylist(rows), self.run_dir / LEARNER_DIR)

    def _write_events(self, events: list[Event]) -> None:
        for e in events:
            self._move_traceback(e)
        write_part(events_to_table(events), self.run_dir / EVENTS_DIR)
        self.events_written += len(events)
        (self.run_dir / LOG_FILE).append_text("".join(e.log_line() + "\n" for e in events))

    def _write_metrics(self, rows: list[dict]) -> None:
        keys = list(dict.fromkeys(k for r in rows for k in r))   # rows may differ in keys: all kept
        write_part(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows]), self.run_dir / METRICS_DIR)

    def _write_clusters(self, tables: list[pa.Table]) -> None:
        write_part(pa.concat_tables(tables, promote_options="default"), self.run_dir / CLUSTERS_DIR)

    def _move_traceback(self, e: Event) -> None:
        """An event's traceback into ``internal/`` of the run directory: the event keeps one
        line and the file's name."""
        tb = e.evidence.pop(TRACEBACK, None)
        if not tb:
            return
        self._internal_n += 1
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in e.code)
        name = f"{INTERNAL_DIR}/{e.ts:%Y%m%dT%H%M%S}-{safe}-{self._internal_n:04d}.txt"
        try:
            (self.run_dir / name).write_text(f"{e.log_line()}\n{tb}")
            e.evidence[TRACEBACK_FILE] = name
        except Exception:
            e.evidence[TRACEBACK] = str(tb)[-2000:]   # kept in the row rather than lost

    def _keep(self, name: str, rows: list) -> None:
        """Rows of a failed write back in front of what arrived since (bounded)."""
        buf = {EVENTS_DIR: "_events", METRICS_DIR: "_metrics", CLUSTERS_DIR: "_clusters", LEARNER_DIR: "_learner"}[name]
        with self._lock:
            merged = list(rows) + getattr(self, buf)
            lost = max(0, len(merged) - MAX_PENDING_ROWS)
            self.dropped_rows += lost
            setattr(self, buf, merged[lost:])

    def _note_writes(self, failed: list[str]) -> None:
        """The Recorder's own watcher: the first failed flush of an outage is a WATCHER_OFF
        (kept in memory with the rows, printed by the driver, counted in the result)."""
        if not failed:
            self._writing_off = False
            return
        self.write_failures += 1
        if self._writing_off:
            return
        self._writing_off = True
        self.add_events([watcher_off(RECORDER, f"the run directory {self.run_dir}", "; ".join(failed), "",
                                     consequence=f"nothing reaches it until it can be written again (rows wait in "
                                                 f"memory, at most {MAX_PENDING_ROWS:,} per table)")])
    def rebuild(self) -> list[Event]:
        """A restarted Recorder: the run's counts (findings by status and code, processes
        whose env crashed, watchers off, the last iteration) from what the run directory
        holds, so that the run's numbers go on and no incident is counted twice. Returns
        the events read (the monitor rebuilds its workers from them)."""
        from ..common.events import table_to_events
        from ..rundir.runrecord import HEARTBEAT_JSON, read_json
        from ..rundir.reading import load_events

        try:
            events = table_to_events(load_events(self.run_dir))
        except Exception:   # a damaged part: rebuild from nothing rather than fail the hub
            events = []
        with self._lock:
            for e in events:
                self._count(e)
            self.events_written = len(events)
        beat, _ = read_json(self.run_dir, HEARTBEAT_JSON)
        if beat and isinstance(beat.get("iteration"), int):
            self.last_iteration = beat["iteration"]
        return events

    def close(self, how: str = "algo.stop()", clean: bool = True) -> dict:
        """The end: the last rows, then the stop record (a run without one ended without a
        word); ``clean=False`` when the Algorithm's process died under the hub."""
        self.flush()
        write_stop(self.run_dir, self.last_iteration, how, clean, events_written=self.events_written,
                   cost=self.cost())
        return self.status()

    def cost(self) -> dict | None:
        """flow1's CPU account over the runners last heard (flow1_ray/runner/cost.py); None
        when none has sent it or it cannot be made."""
        try:
            acc = account([v["cost"] for v in list(self.sampling.values()) if isinstance(v.get("cost"), dict)])
            return acc and {**acc, "hub_cpu": self.hub_cpu.as_dict()}
        except Exception:
            return None

    def crash_recorded(self, pid: int) -> bool:
        """Whether an ENV_CRASHED of this process has been recorded (the monitor asks before
        it reports the death that follows: one incident, one finding)."""
        with self._lock:
            return int(pid) in self.crashed_pids

    def findings_of(self, pid: int) -> list[dict[str, Any]]:
        """The last WARN/FAIL findings of this process, oldest first (``code``, ``status``,
        ``ts``, ``message``): the monitor names one as a death's likely origin."""
        with self._lock:
            return list(self.findings_by_pid.get(int(pid), ()))

    def lines_since(self, cursor: int) -> tuple[list[str], int]:
        """Log lines after ``cursor`` (a sequence number) and the new cursor."""
        with self._lock:
            if cursor > self._seq:  # the Recorder restarted: its count began again
                cursor = 0
            return [line for seq, line in self._lines if seq > cursor], self._seq

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"events": dict(self.counts), "codes": dict(self.codes),
                    "by_status_code": dict(self.by_status_code), "dropped_rows": self.dropped_rows,
                    "samples_dropped": sum(self.samples_dropped.values()), "flushes": self.flushes,
                    "snapshots": self.snapshots, "heatmaps": self.heatmaps.status(), "run_dir": str(self.run_dir),
                    "watchers_off": list(self.watchers_off), "write_failures": self.write_failures,
                    "sampling": {str(k): dict(v) for k, v in self.sampling.items()},
                    "hub_cpu": self.hub_cpu.as_dict()}


class RecorderService(RecorderCore):
    """The Recorder as it runs inside the run's hub: a thread flushes every
    ``flush_interval_s``; Parquet writing never happens on a request's path."""

    def __init__(self, run_dir: str, run_id: str, flush_interval_s: float = 2.0, options: dict | None = None,
                 **start: Any) -> None:
        super().__init__(run_dir, run_id, flush_interval_s, options, **start)
        self.alloc_sink: Any = None   # (runner key, allocation-site window) -> the leak judge (hub.py)
        try:  # Arrow's one-off cost, paid while the run starts (a failure shows at the first flush)
            warm_up()
        except Exception:
            pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="flow1-recorder")
        self._thread.start()

    def _loop(self) -> None:
        """Flush every ``flush_interval_s``, and soon after a WARN/FAIL or an iteration's
        metric row (at most one flush per MIN_FLUSH_GAP_S): what a SIGKILLed driver takes
        with it (its hub dies with it) is bounded by that gap, not by the interval. A death
        (URGENT_CODES) is written at once: the gap is then URGENT_FLUSH_GAP_S."""
        last = time.monotonic()
        while not self._stop.is_set():
            self._soon.wait(self.flush_interval)
            self._soon.clear()
            urgent, self._urgent = self._urgent, False
            gap = (URGENT_FLUSH_GAP_S if urgent else MIN_FLUSH_GAP_S) - (time.monotonic() - last)
            if gap > 0 and self._stop.wait(gap):
                return
            last = time.monotonic()
            try:
                self.flush()
            except Exception:  # flush keeps rows of failed writes; nothing here may end the loop
                pass

    def ingest(self, batch: dict) -> None:
        """One batch from an EnvRunner: events plus its drop counter."""
        if batch.get("events"):
            self.add_events(batch["events"])
        if "dropped" in batch:
            self.note_dropped(str(batch.get("source")), int(batch["dropped"]), batch.get("worker_index"))
        if isinstance(batch.get("alloc_sites"), dict) and self.alloc_sink is not None:
            self.alloc_sink(str(batch.get("source")), batch["alloc_sites"])   # where its memory grows (leak.py)
        if isinstance(batch.get("sampling"), dict) and batch.get("worker_index") is not None:
            with self._lock:   # each runner's own sample() timing, the latest (RUNNER_SAMPLES_DISCARDED)
                self.sampling[int(batch["worker_index"])] = dict(batch["sampling"])

    def close(self, how: str = "algo.stop()", clean: bool = True) -> dict:
        self._stop.set()
        self._soon.set()
        # the owner died: Ray ends this process a moment later (~1.4 s on an idle node, less on a
        # busy one), so the stop record goes first, counting the rows already on disk; the
        # flush below and the record after it bring it up to date if there is time
        if not clean:
            try:
                write_stop(self.run_dir, self.last_iteration, how, clean, events_written=self.events_written)
            except Exception:
                pass
        self.flush()
        self.heatmaps.drain(HEATMAP_DRAIN_S if clean else 0.0)
        return super().close(how, clean)
