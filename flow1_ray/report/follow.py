"""A run directory followed as it grows: what the live panel reads.

The Recorder writes each flush as a new Parquet part (through a temporary name and a
rename, never rewritten), so following a run is listing its folders and reading only the
parts not read before: a poll of a long run costs a few ``listdir`` calls, not a reread
of the run. Works on a local path or a filesystem URI (:class:`~flow1_ray.store.Location`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pyarrow as pa

from .. import codes as C
from ..errors import Flow1InputError
from ..events import EVENT_SCHEMA, Event, table_to_events
from ..store import (EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, LOG_FILE, METRICS_DIR, SNAPSHOTS_DIR, Location,
                     read_parts)
from .views import TIMELINE

#: findings kept in memory per run (WARN, FAIL and advisories; the counts stay exact beyond)
MAX_FINDINGS = 5000
#: a poll closer than this to the previous one returns what is already read
MIN_POLL_INTERVAL_S = 0.3


def is_run_dir(d: Location) -> bool:
    """A flow1 run directory holds ``events/`` or the ``flow1.log`` the Recorder writes."""
    return (d / EVENTS_DIR).is_dir() or (d / LOG_FILE).exists()


def find_runs(path: "str | os.PathLike | Location") -> list[Location]:
    """The run directories at ``path``: itself when it is one, else the runs directly under
    it, newest first (run ids start with their UTC start time). Raises Flow1InputError
    when there is none."""
    d = Location(path)
    if not d.is_dir():
        raise Flow1InputError(f"run directory not found: {d}")
    if is_run_dir(d):
        return [d]
    runs = [d / n for n in sorted(d.listdir(), reverse=True) if not n.startswith(".") and is_run_dir(d / n)]
    if not runs:
        raise Flow1InputError(f"{d} is not a flow1 run directory (no events/ and no {LOG_FILE}), "
                              f"nor a directory of runs")
    return runs


class RunFollower:
    """One run directory, read incrementally; thread-safe (a web server polls from several
    threads). ``stamps[source]`` grows whenever a poll found something new in that source
    (events, metrics, learner, heatmaps, snapshots): what a page redraws."""

    def __init__(self, run_dir: "str | os.PathLike | Location") -> None:
        self.dir = Location(run_dir)
        self._seen: dict[str, set[str]] = {EVENTS_DIR: set(), METRICS_DIR: set(), LEARNER_DIR: set()}
        self._lock = threading.Lock()
        self._polled_at = 0.0
        self.stamps: dict[str, int] = {}          # per source (events, metrics, ...): its changes so far
        self.counts: Counter = Counter()          # events by status
        self.code_counts: Counter = Counter()     # WARN/FAIL events by code
        self.findings: list[Event] = []           # WARN, FAIL, advisories; in time order
        self.timeline: list[Event] = []           # workers' state changes, whatever their status
        self.first_ts = None
        self.metrics: dict[int, dict] = {}        # iteration -> row (the latest row of an iteration wins)
        self.learner: list[dict] = []             # kind == "module" rows: the curves
        self.heatmaps: list[str] = []
        self.snapshots: list[str] = []
        self.last_change = 0.0                    # wall time of the last poll that found something
        self.errors: list[str] = []

    def poll(self) -> bool:
        """Read the parts that landed since the last poll; True when something was new."""
        with self._lock:
            now = time.monotonic()
            if now - self._polled_at < MIN_POLL_INTERVAL_S:
                return False
            self._polled_at = now
            changed: set[str] = set()
            for sub, schema, read in ((EVENTS_DIR, EVENT_SCHEMA, self._add_events),
                                      (METRICS_DIR, None, self._add_metrics), (LEARNER_DIR, None, self._add_learner)):
                names = self._new_parts(sub)
                if not names:
                    continue
                try:   # all new parts in one read; should one be unreadable, each apart
                    read(read_parts([self.dir / sub / n for n in names], schema))
                except Flow1InputError:
                    for n in names:
                        try:
                            read(read_parts([self.dir / sub / n], schema))
                        except Flow1InputError as e:   # said once, skipped
                            self.errors.append(f"{sub}/{n}: {e}"[:300])
                self._seen[sub].update(names)
                changed.add(sub)
            heatmaps = sorted(n for n in (self.dir / HEATMAPS_DIR).listdir() if n.startswith("iter_")
                              and n.endswith(".png"))
            if heatmaps != self.heatmaps:
                self.heatmaps = heatmaps
                changed.add(HEATMAPS_DIR)
            snapshots = sorted(n for n in (self.dir / SNAPSHOTS_DIR).listdir() if not n.startswith("."))
            if snapshots != self.snapshots:
                self.snapshots = snapshots
                changed.add(SNAPSHOTS_DIR)
            for sub in changed:
                self.stamps[sub] = self.stamps.get(sub, 0) + 1
            if changed:
                self.last_change = time.time()
            return bool(changed)

    def _new_parts(self, sub: str) -> list[str]:
        return sorted(n for n in (self.dir / sub).listdir()
                      if n.startswith("part-") and n.endswith(".parquet") and n not in self._seen[sub])

    def _add_events(self, table: pa.Table) -> None:
        for e in table_to_events(table):
            self.counts[e.status] += 1
            self.first_ts = e.ts if self.first_ts is None else min(self.first_ts, e.ts)
            if e.status != C.PASS:
                self.code_counts[e.code] += 1
            if e.status != C.PASS or e.advisory:
                self.findings.append(e)
            if e.code in TIMELINE and len(self.timeline) < MAX_FINDINGS:
                # a death after a reported crash, a restart: PASS, but the worker's story
                self.timeline.append(e)
        self.findings.sort(key=lambda e: e.ts)
        self.timeline.sort(key=lambda e: e.ts)
        if len(self.findings) > MAX_FINDINGS:   # keep every FAIL first, then the newest
            fails = [e for e in self.findings if e.status == C.FAIL][-MAX_FINDINGS // 2:]
            rest = [e for e in self.findings if e.status != C.FAIL][-(MAX_FINDINGS - len(fails)):]
            self.findings = sorted(fails + rest, key=lambda e: e.ts)

    def _add_metrics(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            it = row.get("iteration")
            if it is not None:
                self.metrics[int(it)] = {k: v for k, v in row.items() if v is not None}

    def _add_learner(self, table: pa.Table) -> None:
        self.learner += [r for r in table.to_pylist() if r.get("kind") == "module"]

    # -- what the panel asks ---------------------------------------------------------------
    @property
    def version(self) -> int:
        """How many source changes the polls found so far."""
        return sum(self.stamps.values())

    @property
    def status(self) -> str:
        return C.worst(s for s, n in self.counts.items() if n)

    def metric_rows(self) -> list[dict]:
        return [self.metrics[i] for i in sorted(self.metrics)]

    def last_metrics(self) -> dict:
        return self.metrics[max(self.metrics)] if self.metrics else {}
