"""A run directory read back as a :class:`Report`, with no Ray and no training code."""

from __future__ import annotations

import os

from ..errors import Flow1InputError
from ..events import table_to_events
from ..store import (CLUSTERS_DIR, HEATMAPS_DIR, LEARNER_DIR, LOG_FILE, SNAPSHOTS_DIR, Location, load_clusters,
                     load_events, load_learner, load_metrics)
from .follow import is_run_dir
from .model import Report


def load_run_report(run_dir: "str | os.PathLike | Location") -> Report:
    """Events and the last metric row of a run directory (a path or a filesystem URI), as a Report."""
    d = Location(run_dir)
    if not d.is_dir():
        raise Flow1InputError(f"run directory not found: {d}")
    if not is_run_dir(d):
        raise Flow1InputError(f"{d} is not a flow1 run directory (no events/ and no {LOG_FILE})")
    events = table_to_events(load_events(d))
    summary: dict = {"run_dir": str(d)}
    if (d / "metrics").is_dir():
        try:
            rows = load_metrics(d).to_pylist()
        except Flow1InputError:
            rows = []
        if rows:
            last = max(rows, key=lambda r: r.get("iteration") or 0)
            summary.update({"iterations": last.get("iteration"), "env_steps": last.get("env_steps"),
                            "episode_return_mean": last.get("episode_return_mean"),
                            "workers": {k.split("/")[-1]: v for k, v in last.items() if k.startswith("flow1/worker/")},
                            "samples_dropped": last.get("flow1/samples_dropped")})
    states = _state_actions(d)
    if states:
        summary["state_actions"] = states
    learner = _learner(d)
    if learner:
        summary["learner"] = learner
    return Report(target=d.name, events=events, summary=summary)


def _last_snapshot(rows: list[dict]) -> dict:
    # by iteration first: a restarted clusterer numbers its snapshots from 0 again
    key = max((r.get("iteration") if r.get("iteration") is not None else -1, r["snapshot"]) for r in rows)
    mine = [r for r in rows if (r.get("iteration") if r.get("iteration") is not None else -1, r["snapshot"]) == key]
    verdicts: dict[str, int] = {}
    for r in mine:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    return {"snapshots": len({(r.get("iteration"), r["snapshot"]) for r in rows}),
            "last_iteration": mine[0].get("iteration"), "clusters": len(mine),
            "states": sum(r["size"] for r in mine), "verdicts": verdicts}


def _state_actions(d: Location) -> dict:
    """The last state-cluster snapshot (verdict counts) and the heatmaps, if the run has
    them; a multi-agent run's RLModules each under ``modules`` (the first at the top too)."""
    out: dict = {}
    if (d / CLUSTERS_DIR).is_dir():
        try:
            rows = load_clusters(d).to_pylist()
        except Flow1InputError:
            rows = []
        by_module: dict[str, list[dict]] = {}
        for r in rows:
            by_module.setdefault(r.get("module") or "default_policy", []).append(r)
        per = {m: _last_snapshot(rs) for m, rs in sorted(by_module.items())}
        if per:
            out.update(next(iter(per.values())))
            if len(per) > 1:
                out["modules"] = per
    if (d / HEATMAPS_DIR).is_dir():
        pngs = sorted(n for n in (d / HEATMAPS_DIR).listdir() if n.startswith("iter_") and n.endswith(".png"))
        if pngs:
            out["heatmaps"] = [f"{HEATMAPS_DIR}/{p}" for p in pngs]
    return out


def _learner(d: Location) -> dict:
    """Each module's last curve row of the ``learner/`` table, and the snapshots taken."""
    out: dict = {}
    if (d / LEARNER_DIR).is_dir():
        try:
            rows = [r for r in load_learner(d).to_pylist() if r.get("kind") == "module"]
        except Flow1InputError:
            rows = []
        last: dict[str, dict] = {}
        for r in rows:
            if r["module_id"] not in last or (r["iteration"] or 0) >= (last[r["module_id"]]["iteration"] or 0):
                last[r["module_id"]] = r
        out["modules"] = {m: {k: v for k, v in r.items() if v is not None and k not in ("module_id", "kind", "layer")}
                          for m, r in sorted(last.items())}
    if (d / SNAPSHOTS_DIR).is_dir():
        out["snapshots"] = sorted(f"{SNAPSHOTS_DIR}/{n}" for n in (d / SNAPSHOTS_DIR).listdir()
                                  if not n.startswith("."))
    return out
