"""The live panel's data side (``flow1 serve``): :class:`Runs`, the runs it can show with
a follower each, and the two Dash callbacks as plain functions (:func:`panel_callbacks`):
the run picker's list and the refresh that polls the run and redraws, once a second, only
what changed (:data:`REFRESH_OUTPUTS`). Neither callback raises. Used by panel.py (make_app
registers them) and panel_layout.py (the page lists the runs); tests call them directly.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import threading
import time
from typing import Any, Callable

from ..common import schema as S
from ..common.errors import Flow1InputError
from ..common.events import one_line
from ..rundir.store import CLUSTERS_DIR, EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, METRICS_DIR, SNAPSHOTS_DIR, Location
from .diagnosis_view import anomaly_marks
from .follow import RunFollower, find_runs, is_run_dir
from .model import life_line, verdict_kind
from .panel_blocks import (cause_block, clusters_block, heatmap_block, hypothesis_block, result_numbers, risk_block,
                           verdict_block)
from .panel_figures import policy_figure, return_figure, timeline_figure

log = logging.getLogger("flow1_ray.report.panel")   # the panel's one logger, whichever of its modules logs

RUNS_REFRESH_S = 5.0


class Runs:
    """The runs the panel can show (one run directory, or those under an output directory),
    each with its follower; the list is refreshed every few seconds for new runs."""

    def __init__(self, path: "str | os.PathLike | Location") -> None:
        self.path = Location(path)
        self._lock = threading.Lock()
        self._followers: dict[str, RunFollower] = {}
        self._listed_at = 0.0
        self.names: list[str] = []
        self.refresh(force=True)   # raises Flow1InputError when the path holds no run
        self.single = is_run_dir(self.path)

    def refresh(self, force: bool = False) -> list[str]:
        with self._lock:
            if force or time.monotonic() - self._listed_at >= RUNS_REFRESH_S:
                try:
                    runs = find_runs(self.path)
                except Flow1InputError:
                    if force:
                        raise
                    runs = [self._followers[n].dir for n in self.names]
                for r in runs:
                    self._followers.setdefault(r.name, RunFollower(r))
                self.names = [r.name for r in runs]
                self._listed_at = time.monotonic()
            return list(self.names)

    def get(self, name: str | None) -> RunFollower | None:
        """The follower of a listed run (anything else the browser sends is ignored)."""
        with self._lock:
            return self._followers.get(name) if name in self.names else None


#: what the refresh callback returns, in order: name -> (component id, property) it sets
REFRESH_TARGETS: dict[str, tuple[str, str]] = {
    "run-name": ("run-name", "children"), "verdict": ("verdict", "children"),
    "verdict-class": ("verdict", "className"), "updated": ("updated", "children"),
    "result-numbers": ("result-numbers", "children"), "return-graph": ("return-graph", "figure"),
    "policy-graph": ("policy-graph", "figure"), "policy-wrap": ("policy-wrap", "style"),
    "heatmap": ("heatmap", "children"), "clusters": ("clusters", "children"), "cause": ("cause", "children"), "hypothesis": ("hypothesis", "children"),
    "risk": ("risk", "children"), "timeline-graph": ("timeline-graph", "figure"),
    "timeline-wrap": ("timeline-wrap", "style"), "seen": ("seen", "data"), "result-head": ("result-head", "children")}
#: the names of the refresh callback's values, in order (make_app's Outputs)
REFRESH_OUTPUTS = tuple(REFRESH_TARGETS)


def _quadrants(f: RunFollower, changed: Callable[..., bool], marks: list[dict]) -> dict[str, Any]:
    """What the sources that changed (``changed(*subs)``) redraw; the rest stays as shown. The
    curves are redrawn too when the diagnosis's ``marks`` on them changed."""
    from dash import no_update as keep

    ev, mt, ln, hm = changed(EVENTS_DIR), changed(METRICS_DIR), changed(LEARNER_DIR), changed(HEATMAPS_DIR)
    mk = changed("marks")
    return {"result-numbers": result_numbers(f) if ev or mt else keep,
            "return-graph": return_figure(f, marks) if mt or mk else keep,
            "policy-graph": (policy_figure(f, marks) if f.learner else keep) if ln or mk else keep,
            "policy-wrap": ({} if f.learner else {"display": "none"}) if ln else keep,
            "heatmap": heatmap_block(f) if hm else keep,
            "clusters": clusters_block(f) if changed(CLUSTERS_DIR) else keep,
            "cause": cause_block(f) if ev else keep,
            "hypothesis": hypothesis_block(f) if ev or changed(SNAPSHOTS_DIR, S.WHATIF_DIR) else keep,
            "risk": risk_block(f) if ev or mt else keep,
            "timeline-graph": (timeline_figure(f) if f.timeline else keep) if ev else keep,
            "timeline-wrap": ({} if f.timeline else {"display": "none"}) if ev else keep}


def _draw(runs: Runs, name: str | None, seen: dict | None) -> tuple:
    """One tick: poll the run, then each output by :data:`REFRESH_OUTPUTS` (redrawn only
    where its sources changed since this page last drew them: ``seen``)."""
    from dash import no_update

    f = runs.get(name)
    if f is None:
        return (no_update,) * len(REFRESH_OUTPUTS)
    f.poll()
    report = f.report()
    ago = f"last new data {time.time() - f.last_change:.0f} s ago" if f.last_change else "no data yet"
    state = (report.completeness or {}).get("state")   # "live" only while the run is running
    label = {"running": "live", "stopped": "stopped cleanly", "ended": "ended without a clean stop"}.get(state, "read")
    updated = f"{label} · {ago} · read {dt.datetime.now():%H:%M:%S}"
    if f.skipped:
        updated += f" · {len(f.skipped)} item(s) skipped"
    marks = anomaly_marks(f.diagnosis())
    stamps = {"run": name, **f.stamps, "marks": hashlib.blake2b(repr(marks).encode(), digest_size=8).hexdigest()}
    seen = seen if isinstance(seen, dict) and seen.get("run") == name else {}

    def changed(*subs: str) -> bool:
        return any(stamps.get(k) != seen.get(k) for k in subs) or not seen

    verdict = report.verdict   # with the run's life and what was skipped: judged at each tick
    # ... and redrawn only when its text changed (a redraw replaces the elements a reader holds)
    head = repr((verdict, report.not_judged, life_line(report.completeness), report.gaps()))
    stamps["head"] = hashlib.blake2b(head.encode(), digest_size=8).hexdigest()
    out = {"run-name": name if not seen else no_update, "verdict": verdict,
           "verdict-class": f"verdict {verdict_kind(verdict)}", "updated": updated,
           **_quadrants(f, changed, marks), "seen": stamps,
           "result-head": verdict_block(report) if changed("head") else no_update}
    return tuple(out[k] for k in REFRESH_OUTPUTS)


def panel_callbacks(runs: Runs) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The panel's two callbacks, as plain functions (make_app registers them; tests call
    them): ``list_runs(n, shown)`` -> the picker's options, ``refresh(n, name, seen)`` ->
    one value per :data:`REFRESH_OUTPUTS`. Neither raises."""
    from dash import no_update

    def _list_runs(_n: int | None, shown: list | None) -> Any:
        try:
            listed = runs.refresh()
        except Exception:   # a callback never raises: the page keeps what it shows
            log.exception("flow1 serve: listing the runs failed")
            return no_update
        return listed if listed != shown else no_update

    def _refresh(_n: int | None, name: str | None, seen: dict | None) -> tuple:
        """Never raises: a figure that cannot be drawn from what the run holds leaves the
        page as it was and says so."""
        try:
            return _draw(runs, name, seen)
        except Exception as e:
            log.exception("flow1 serve: drawing %s failed", name)
            out = [no_update] * len(REFRESH_OUTPUTS)
            out[REFRESH_OUTPUTS.index("updated")] = f"not redrawn: {type(e).__name__}: {one_line(e)[:200]}"
            return tuple(out)

    return _list_runs, _refresh
