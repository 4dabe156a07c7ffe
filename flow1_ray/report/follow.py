"""A run directory followed as it grows: what the live panel reads.

The Recorder writes each flush as a new Parquet part (through a temporary name and a
rename, never rewritten), so following a run is listing its folders and reading only the
parts not read before: a poll of a long run costs a few ``listdir`` calls, not a reread
of the run. Works on a local path or a filesystem URI (:class:`~flow1_ray.rundir.store.Location`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Callable

import pyarrow as pa

from ..common import codes as C
from ..common import schema as S
from ..common.errors import Flow1InputError
from ..common.events import Event, events_from_table, one_line
from ..rundir.runrecord import RUN_JSON, completeness
from ..rundir.reading import PART_COLUMN, heatmap_names, list_parts, name_bad_rows, read_parts, snapshot_names
from ..rundir.store import (CLUSTERS_DIR, EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, LOG_FILE, METRICS_DIR,
    SNAPSHOTS_DIR, Location)
from ..rundir.life import events_problem, learning_of, missing_events, no_verdict
from .model import GAP_CODES, Report
from .views import TIMELINE

#: findings kept in memory per run (WARN, FAIL and advisories; the counts stay exact beyond)
MAX_FINDINGS = 5000
#: a poll closer than this to the previous one returns what is already read
MIN_POLL_INTERVAL_S = 0.3
#: the run's records (run.json, heartbeat.json, stop.json) are read again at most this often
#: (the Recorder rewrites the heartbeat every flush, 2 s by default)
LIFE_EVERY_S = 2.0


def is_run_dir(d: Location) -> bool:
    """A flow1 run directory holds ``events/``, its start record ``run.json`` or the
    ``flow1.log`` the Recorder writes."""
    return (d / EVENTS_DIR).is_dir() or (d / RUN_JSON).exists() or (d / LOG_FILE).exists()


def _is_run(d: Location) -> bool:
    """is_run_dir for an entry of an output directory: one that cannot be looked into is
    not listed (it may be anything; naming it is the job of a reader pointed at it)."""
    try:
        return is_run_dir(d)
    except Flow1InputError:
        return False


def find_runs(path: "str | os.PathLike | Location") -> list[Location]:
    """The run directories at ``path``: itself when it is one, else the runs directly under
    it, newest first (run ids start with their UTC start time). Raises Flow1InputError
    when there is none."""
    d = Location(path)
    if not d.is_dir():
        raise Flow1InputError(f"run directory not found: {d}")
    if d.local and not os.access(d.path, os.R_OK | os.X_OK):
        raise Flow1InputError(f"run directory not readable: {d} (permission denied)")
    if is_run_dir(d):
        return [d]
    runs = [d / n for n in sorted(d.listdir(), reverse=True) if not n.startswith(".") and _is_run(d / n)]
    if not runs:
        raise Flow1InputError(f"{d} is not a flow1 run directory (no events/ and no {LOG_FILE}), "
                              f"nor a directory of runs")
    return runs


class RunFollower:
    """One run directory, read incrementally; thread-safe (a web server polls from several
    threads). ``stamps[source]`` grows whenever a poll found something new in that source
    (events, metrics, learner, clusters, heatmaps, snapshots): what a page redraws.

    A poll never raises for what the directory holds: a part that cannot be read (not
    Parquet, a directory, a foreign schema), a row that is not an Event, a heatmap that is
    a link out of the run or not a PNG, a folder that cannot be listed -- each is named
    once in :attr:`skipped` and marked as seen, so it is never read again."""

    def __init__(self, run_dir: "str | os.PathLike | Location") -> None:
        self.dir = Location(run_dir)
        self._seen: dict[str, set[str]] = {EVENTS_DIR: set(), METRICS_DIR: set(), CLUSTERS_DIR: set(),
                                           LEARNER_DIR: set(), HEATMAPS_DIR: set()}
        self._lock = threading.Lock()
        self._polled_at = 0.0
        self.stamps: dict[str, int] = {}          # per source (events, metrics, ...): its changes so far
        self.counts: Counter = Counter()          # events by status (gap events aside)
        self.code_counts: Counter = Counter()     # WARN/FAIL events by code
        self.findings: list[Event] = []           # WARN, FAIL, advisories; in time order
        self.timeline: list[Event] = []           # workers' state changes, whatever their status
        self.gap_events: list[Event] = []         # WATCHER_OFF and HUB_RESTARTED: the run's completeness
        self.first_ts = None
        self.metrics: dict[int, dict] = {}        # iteration -> row (the latest row of an iteration wins)
        self.learner: list[dict] = []             # kind == "module" rows: the curves
        self.clusters: dict[str, list[dict]] = {}  # per module: the rows of its last state-cluster snapshot
        self.heatmaps: list[str] = []             # names under heatmaps/ that may be shown
        self.snapshots: list[str] = []
        self.whatifs: list[dict] = []             # flow1 whatif's finished what-ifs (report.whatif), newest first
        self._whatifs_done: tuple = ()
        self.last_change = 0.0                    # wall time of the last poll that found something
        self.skipped: list[str] = []              # what could not be read, each named once
        self._skipped_set: set[str] = set()
        self.events_read = 0                      # rows that became Events
        self.events_exist = True                  # events/ is there (maybe not readable)
        self.life: dict = completeness(self.dir)
        self._life_at = time.monotonic()
        self._diagnosis: tuple | None = None      # (what it was read from, the diagnosis)

    def poll(self, force: bool = False) -> bool:
        """Read the parts that landed since the last poll; True when something was new.
        Never raises for what the run directory holds. ``force``: now, past the throttles
        (:data:`MIN_POLL_INTERVAL_S`, :data:`LIFE_EVERY_S`), for a caller with its own pace."""
        with self._lock:
            now = time.monotonic()
            if now - self._polled_at < MIN_POLL_INTERVAL_S and not force:
                return False
            self._polled_at = now
            changed: set[str] = set()
            # in the order flow1 report names what it skips
            for sub, add in ((EVENTS_DIR, self._add_events), (METRICS_DIR, self._add_metrics)):
                if self._poll_table(sub, add):
                    changed.add(sub)
            if self._poll_table(CLUSTERS_DIR, self._add_clusters):
                changed.add(CLUSTERS_DIR)
            if self._poll_heatmaps():
                changed.add(HEATMAPS_DIR)
            if self._poll_table(LEARNER_DIR, self._add_learner):
                changed.add(LEARNER_DIR)
            snapshots, skipped = snapshot_names(self.dir)
            for what in skipped:
                self._skip(what)
            snapshots = [n.split("/", 1)[1] for n in snapshots]
            if snapshots != self.snapshots:
                self.snapshots = snapshots
                changed.add(SNAPSHOTS_DIR)
            if self._poll_whatifs():
                changed.add(S.WHATIF_DIR)
            if now - self._life_at >= LIFE_EVERY_S or force:   # three small files: not at every poll
                self.life = completeness(self.dir)
                self._life_at = now
            for sub in changed:
                self.stamps[sub] = self.stamps.get(sub, 0) + 1
            if changed:
                self.last_change = time.time()
            return bool(changed)

    def _skip(self, what: str) -> bool:
        """Name a skipped item once (bounded: a run of damaged parts is counted, not listed)."""
        if what in self._skipped_set:
            return False
        self._skipped_set.add(what)
        if len(self.skipped) < MAX_FINDINGS:
            self.skipped.append(what[:400])
        return True

    def _poll_table(self, sub: str, add: "Callable[[pa.Table, str], None] | None") -> bool:
        """The new parts of one folder, read at once (the bad ones named and marked seen);
        ``add`` None: read only to name what cannot be read (the panel shows no cluster rows,
        flow1 report names their damaged parts)."""
        folder, why = self.dir.inside(sub)
        if folder is None:
            return self._skip(str(why))
        try:
            kind = folder.file_type()   # one look (one request on an object store)
            if sub == EVENTS_DIR:
                self.events_exist = kind != "missing"
            if kind == "missing":
                return False
            if kind != "dir":
                return self._skip(f"{sub}: not a directory")
            parts, skipped = list_parts(folder, sub, self._seen[sub])
        except Flow1InputError as e:
            return self._skip(f"{sub}: {e}")
        new = [why for why in skipped.values() if self._skip(why)]
        self._seen[sub].update(skipped)
        if not parts:
            return bool(new)
        loaded = read_parts(parts, sub, part_column=sub == EVENTS_DIR)
        self._seen[sub].update(p.name for p in parts)   # read or not: never read again
        for s in loaded.skipped:
            self._skip(s)
        if loaded.table.num_rows and add is not None:
            add(loaded.table, sub)
        return True

    def _poll_heatmaps(self) -> bool:
        """New heatmaps that may be shown (True when there is one); the others named once."""
        shown, skipped = heatmap_names(self.dir, self._seen[HEATMAPS_DIR])
        self._seen[HEATMAPS_DIR].update(shown)
        for what in skipped:
            self._skip(what)
            self._seen[HEATMAPS_DIR].add(what.split(":", 1)[0])   # "heatmaps/<name>: why"
        if shown:
            self.heatmaps = sorted(self.heatmaps + [n.split("/", 1)[1] for n in shown])
        return bool(shown)

    def _poll_whatifs(self) -> bool:
        """The what-ifs that finished (a ``verdicts.json`` is written at a what-if's end),
        read again when that set changed; a damaged one named once."""
        from .whatif import SHOWN, VERDICTS_JSON, read_whatifs

        folder = self.dir / S.WHATIF_DIR
        try:
            names = sorted((n for n, is_file, is_link in folder.entries() if not is_file and not is_link),
                           reverse=True)[:SHOWN]
            done = tuple(n for n in names if (folder / n / VERDICTS_JSON).exists())
        except Flow1InputError as e:
            return self._skip(f"{S.WHATIF_DIR}: {e}")
        if done == self._whatifs_done:
            return False
        self._whatifs_done = done
        self.whatifs, skipped = read_whatifs(self.dir)
        for what in skipped:
            self._skip(what)
        return True

    def _add_events(self, table: pa.Table, sub: str) -> None:
        parts = table.column(PART_COLUMN).to_pylist()
        events, bad = events_from_table(table.drop_columns([PART_COLUMN]))
        for what in name_bad_rows(self.dir / EVENTS_DIR, parts, bad) if bad else []:
            self._skip(what)
        self.events_read += len(events)
        for e in events:
            self.first_ts = e.ts if self.first_ts is None else min(self.first_ts, e.ts)
            if (e.code in GAP_CODES or e.code == C.HUB_RESTARTED) and e.status != C.FAIL:
                if len(self.gap_events) < MAX_FINDINGS:   # what flow1 did not see: shown with the verdict
                    self.gap_events.append(e)
                if e.code in GAP_CODES:   # a gap, not a finding (as in Report.status)
                    continue
            self.counts[e.status] += 1
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

    def _add_metrics(self, table: pa.Table, sub: str) -> None:
        for row in table.to_pylist():
            it = row.get("iteration")
            if isinstance(it, int) and not isinstance(it, bool):
                self.metrics[it] = {k: v for k, v in row.items() if v is not None}

    def _add_clusters(self, table: pa.Table, sub: str) -> None:
        """Each module's last snapshot only (bounded: k rows a module), columns of a foreign
        type left out and named (``report/clusters.py``)."""
        from .clusters import by_module, latest, usable

        table, skipped = usable(table)
        for what in skipped:
            self._skip(what)
        for module, rows in by_module(table.to_pylist()).items():
            self.clusters[module] = latest(self.clusters.get(module, []) + rows)

    def _add_learner(self, table: pa.Table, sub: str) -> None:
        self.learner += [r for r in table.to_pylist() if r.get("kind") == "module"
                         and isinstance(r.get("module_id"), str) and isinstance(r.get("iteration"), int)]

    # -- what the panel asks ---------------------------------------------------------------
    @property
    def status(self) -> str:
        return C.worst(s for s, n in self.counts.items() if n)

    def report(self) -> Report:
        """What the run directory says so far, as the :class:`Report` whose verdict and gaps
        ``flow1 report`` would give (its events: the findings and the gap events kept)."""
        with self._lock:
            skipped = list(self.skipped)
            life = dict(self.life)
            # once stopped, the stop record's count is final: parts removed since are named
            missing = (missing_events(life, self.events_read, [s for s in skipped if s.startswith(EVENTS_DIR)])
                       if self.events_exist and life.get("state") == "stopped" else None)
            skipped += [missing] if missing else []
            bad = sum(s.startswith(EVENTS_DIR) for s in skipped)
            readable = self.events_exist and (self.events_read > 0 or not bad)
            problem = None if readable else events_problem(self.events_exist, bad)
            life["problems"] = list(life.get("problems") or [])
            start = life.get("start") if isinstance(life.get("start"), dict) else {}
            return Report(target=one_line(self.dir.name), events=list(self.findings) + list(self.gap_events),
                          skipped=life["problems"] + skipped, completeness=life,
                          not_judged=no_verdict(life, problem),
                          learning=learning_of(life, self.metric_rows(), self.learner),
                          settings=start.get("config") if isinstance(start.get("config"), dict) else None,
                          summary={"run_dir": str(self.dir), "whatif": list(self.whatifs)})

    def diagnosis(self) -> dict:
        """:meth:`report`'s diagnosis, made again only when what it reads changed since (a
        source's stamp, the run's life state): the panel asks for it at every tick."""
        key = (tuple(sorted(self.stamps.items())), self.life.get("state"), len(self.skipped))
        if self._diagnosis is None or self._diagnosis[0] != key:
            self._diagnosis = (key, self.report().diagnosis())
        return self._diagnosis[1]

    def metric_rows(self) -> list[dict]:
        return [self.metrics[i] for i in sorted(self.metrics)]

    def last_metrics(self) -> dict:
        return self.metrics[max(self.metrics)] if self.metrics else {}
