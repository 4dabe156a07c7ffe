"""A run directory read back as a :class:`Report`, with no Ray and no training code.

A run directory is input: a part may be damaged or foreign, a heatmap a link to a file
elsewhere, a record missing. What cannot be read is left out and named
(:attr:`Report.skipped`); what leaves no verdict to give -- no start record, no readable
events -- makes the report NOT JUDGED (:attr:`Report.not_judged`), never a PASS. Only a
path that is not a run directory at all, or cannot be read at all, is an error.
"""

from __future__ import annotations

import os
from typing import Any

from ..common import schema as S
from ..common.errors import Flow1InputError
from ..common.events import Event, events_from_table, one_line
from ..rundir.repro import entry_heads
from ..rundir.reading import PART_COLUMN, heatmap_names, name_bad_rows, read_table, snapshot_names
from ..rundir.runrecord import RUN_JSON, completeness
from ..rundir.store import CLUSTERS_DIR, EVENTS_DIR, LEARNER_DIR, LOG_FILE, METRICS_DIR, Location
from .clusters import (by_module, flagged, latest, snapshot_key, summary_row, usable, views,
                       warned)
from .follow import is_run_dir
from ..rundir.life import events_problem, learning_of, missing_events, no_verdict
from .model import Report


def open_run_dir(run_dir: "str | os.PathLike | Location") -> Location:
    """The run directory, or one Flow1InputError: not there, not readable at all (no
    permission, an object store that does not answer), not a run directory."""
    d = Location(run_dir)
    if not d.is_dir():
        raise Flow1InputError(f"run directory not found: {d}")
    if d.local and not os.access(d.path, os.R_OK | os.X_OK):
        raise Flow1InputError(f"run directory not readable: {d} (permission denied)")
    if not is_run_dir(d):
        raise Flow1InputError(f"{d} is not a flow1 run directory (no events/, no {RUN_JSON} and no {LOG_FILE})")
    return d


def load_run_report(run_dir: "str | os.PathLike | Location", now: float | None = None) -> Report:
    """Events, the last metric row, the state clusters, the learner curves and the run's
    life (run.json, heartbeat.json, stop.json) of a run directory (a path or a filesystem
    URI), as a Report; ``now`` (a Unix time) judges the heartbeat's age."""
    d = open_run_dir(run_dir)
    life = completeness(d, now=now)
    skipped: list[str] = list(life["problems"])
    events, events_skipped, readable = read_events(d)
    missing = missing_events(life, len(events), events_skipped) if _exists(d / EVENTS_DIR) else None
    if missing:
        events_skipped.append(missing)
        readable = bool(events)
    skipped += events_skipped
    not_judged = no_verdict(life, None if readable else events_problem(_exists(d / EVENTS_DIR), len(events_skipped)))
    summary: dict = {"run_dir": str(d)}
    metrics = read_table(d, METRICS_DIR)
    skipped += metrics.skipped
    rows = metrics.table.to_pylist() if metrics.table.num_rows else []
    if rows:
        last = max(rows, key=lambda r: r.get("iteration") if isinstance(r.get("iteration"), int) else -1)
        summary.update({"iterations": _int(last.get("iteration")), "env_steps": _number(last.get("env_steps")),
                        "episode_return_mean": _number(last.get("episode_return_mean")),
                        "workers": {k.split("/")[-1]: _number(v) for k, v in last.items()
                                    if isinstance(k, str) and k.startswith(S.WORKER_METRIC_PREFIX)},
                        "samples_dropped": _number(last.get(S.SAMPLES_DROPPED))})
    states, more = _state_actions(d, events)
    skipped += more
    if states:
        summary["state_actions"] = states
    learner, learner_rows, more = _learner(d)
    skipped += more
    if learner:
        summary["learner"] = learner
    learning = learning_of(life, rows, learner_rows)
    from .whatif import read_whatifs

    whatifs, more = read_whatifs(d)
    skipped += more
    if whatifs:
        summary["whatif"] = whatifs
    repro = entry_heads(d)
    if repro:
        summary["repro"] = repro
    start = life.get("start") if isinstance(life.get("start"), dict) else {}
    settings = start.get("config") if isinstance(start.get("config"), dict) else None
    return Report(target=one_line(d.name), events=events, summary=summary, skipped=skipped, not_judged=not_judged,
                  completeness=life, learning=learning, settings=settings)


def read_events(d: Location) -> tuple[list[Event], list[str], bool]:
    """(events, skipped, readable): the rows of ``events/`` that are Events, each part or
    row left out named (a bad row is skipped, not its part: the Recorder writes a flush's
    rows as one part, and one foreign row must not hide the FAILs flushed with it), and
    whether the events folder could be read at all (False: missing, not a folder, not
    readable, or every part and row skipped)."""
    folder = d / EVENTS_DIR
    try:
        there = folder.is_dir()
    except Flow1InputError as e:
        return [], [f"{EVENTS_DIR}: {e}"], False
    loaded = read_table(d, EVENTS_DIR, part_column=True)
    table = loaded.table
    skipped = list(loaded.skipped)
    if not there:
        return [], skipped, False
    parts = table.column(PART_COLUMN).to_pylist() if table.num_rows else []
    events, bad = events_from_table(table.drop_columns([PART_COLUMN]) if PART_COLUMN in table.column_names
                                    else table)
    if bad:
        skipped += name_bad_rows(folder, parts, bad)
    return events, skipped, bool(events) or not skipped


def _exists(f: Location) -> bool:
    try:
        return f.exists()
    except Flow1InputError:
        return True   # there, but it cannot be looked at: named among the skipped items


def _number(v: Any) -> int | float | None:
    """A number of a metrics row, or None (a foreign part may hold anything)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _last_snapshot(rows: list[dict]) -> dict:
    mine = latest(rows)
    verdicts: dict[str, int] = {}
    for r in mine:
        v = str(r.get("verdict") or "?")
        verdicts[v] = verdicts.get(v, 0) + 1
    return {"snapshots": len({snapshot_key(r) for r in rows}), "last_iteration": _int(mine[0].get("iteration")),
            "clusters": len(mine), "states": sum(_int(r.get("size")) or 0 for r in mine), "verdicts": verdicts}


def _state_actions(d: Location, events: list[Event]) -> tuple[dict, list[str]]:
    """The last state-cluster snapshot (verdict counts) and the heatmaps, if the run has
    them; a multi-agent run's RLModules each under ``modules`` (the first at the top too)."""
    out: dict = {}
    loaded = read_table(d, CLUSTERS_DIR)
    table, skipped = usable(loaded.table)
    skipped = list(loaded.skipped) + skipped
    per = {}
    for m, rs in by_module(table.to_pylist() if table.num_rows else []).items():
        per[m] = _last_snapshot(rs)
        vs, more = views(rs)
        skipped += [x for x in more if x not in skipped]
        described = [summary_row(v) for v in flagged(vs, warned(events, m, rs))
                     if v["description"] is not None]
        if described:   # what the flagged clusters hold (a run written before descriptions has none)
            per[m]["described"] = described
    if per:
        out.update(next(iter(per.values())))
        if len(per) > 1:
            out["modules"] = per
    pngs, more = heatmap_names(d)
    skipped += more
    if pngs:
        out["heatmaps"] = pngs
    return out, skipped


def _learner(d: Location) -> tuple[dict, list[dict], list[str]]:
    """Each module's last curve row of the ``learner/`` table and the snapshots taken; the
    table's module rows; what was skipped."""
    out: dict = {}
    loaded = read_table(d, LEARNER_DIR)
    skipped = list(loaded.skipped)
    rows = [r for r in (loaded.table.to_pylist() if loaded.table.num_rows else [])
            if r.get("kind") == "module" and isinstance(r.get("module_id"), str)]
    last: dict[str, dict] = {}
    for r in rows:
        mid, it = r["module_id"], _int(r.get("iteration")) or 0
        if mid not in last or it >= (_int(last[mid].get("iteration")) or 0):
            last[mid] = r
    if last:
        out["modules"] = {m: {k: v for k, v in r.items() if v is not None and k not in ("module_id", "kind", "layer")}
                          for m, r in sorted(last.items())}
    snaps, more = snapshot_names(d)
    skipped += more
    if snaps:
        out["snapshots"] = snaps
    return out, rows, skipped
