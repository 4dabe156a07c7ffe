"""The :class:`Report` of a check or a run: events plus the verdict that gates CI."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import codes as C
from ..events import Event, jsonable
from ..store import REPORT_JSON, REPORT_MD, Location, write_events

#: the verdict of a report that has none: no start record, no readable events, nothing assessable
NOT_JUDGED = "NOT JUDGED"


@dataclass
class Report:
    """What ``check_env`` returns and ``flow1 report`` reads back.

    ``status`` is the worst event status; ``codes(min_status)`` the codes at or above a
    status; ``summary`` the run's numbers (steps, episodes, timings...). Advisories are
    PASS events (:attr:`Event.advisory`): shown, never counted as WARN.
    """

    target: str
    events: list[Event] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    #: what a reader could not read and left out, each "what: why" (a damaged part, a file
    #: outside the run directory...): never silently
    skipped: list[str] = field(default_factory=list)
    #: signals a rule needs that were absent or all NaN ("KL: absent"), so not judged
    not_assessable: list[str] = field(default_factory=list)
    #: why there is no verdict at all (no start record, no readable events, nothing
    #: assessable); None when there is one
    not_judged: str | None = None
    #: the run's life from its run directory (:func:`flow1_ray.runrecord.completeness`);
    #: None for a report that is not of a run directory (``check_env``)
    completeness: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        """The worst status of the events read (PASS for none): a fact about those events.
        What a gate acts on is :attr:`verdict` and :meth:`exit_code`."""
        return C.worst(e.status for e in self.events)

    @property
    def blind(self) -> list[str]:
        """What flow1 did not watch in this run (one line per WATCHER_OFF event)."""
        return [str(e.evidence.get("what") or e.message) for e in self.events if e.code == C.WATCHER_OFF]

    def gaps(self) -> list[str]:
        """What flow1 did not see whole, besides the events themselves: watchers off, a run
        that ended without a clean stop, parts that were skipped."""
        out = [f"not watched: {b}" for b in self.blind]
        c = self.completeness or {}
        if c.get("state") == "ended":
            out.append(f"ended without a clean stop after iteration {c.get('last_iteration')}, last data at "
                       f"{c.get('last_data_at') or 'unknown'}")
        out += [f"skipped: {s}" for s in self.skipped]
        return out

    @property
    def verdict(self) -> str:
        """``NOT JUDGED`` when there is no verdict to give (see :attr:`not_judged`), else
        the worst status; a PASS with gaps is never shown as a plain PASS (renderers add
        :meth:`gaps`)."""
        if self.not_judged and self.status != C.FAIL:
            return NOT_JUDGED
        return self.status

    def codes(self, min_status: str = C.WARN) -> set[str]:
        floor = C.STATUS_RANK[min_status]
        return {e.code for e in self.events if C.STATUS_RANK[e.status] >= floor}

    def advisories(self) -> list[Event]:
        """The advisory events: PASS, but worth reading (listed in every rendering)."""
        return [e for e in self.events if e.advisory]

    def by_status(self) -> dict[str, int]:
        counts = {s: 0 for s in C.STATUSES}
        for e in self.events:
            counts[e.status] += 1
        return counts

    def exit_code(self, fail_on: str = C.FAIL, allow_blind: bool = False) -> int:
        """The CLI's contract: 1 when an event at or above ``fail_on`` was read; else 2 when
        there is no verdict (:attr:`not_judged`); else 1 when flow1 did not watch the run
        whole (a watcher off, no clean stop) unless ``allow_blind``; else 0."""
        if C.STATUS_RANK[self.status] >= C.STATUS_RANK[fail_on]:
            return 1
        if self.not_judged:
            return 2
        if not allow_blind and (self.blind or (self.completeness or {}).get("state") == "ended"):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "verdict": self.verdict, "counts": self.by_status(),
                "not_judged": self.not_judged, "gaps": self.gaps(), "skipped": list(self.skipped),
                "not_assessable": list(self.not_assessable), "completeness": jsonable(self.completeness),
                "advisories": sorted({e.code for e in self.advisories()}),
                "summary": jsonable(self.summary), "events": [e.to_dict() for e in self.events]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def write(self, run_dir: "str | os.PathLike | Location") -> "Location":
        """Write events (Parquet + log) and the report files into a run directory (a path
        or a filesystem URI)."""
        from ..runrecord import write_start, write_stop

        d = Location(run_dir)
        d.mkdir()
        run_id = next((e.run_id for e in self.events if e.run_id), self.target)
        write_start(d, run_id, "check", {"target": self.target}, summary=self.summary)
        write_events(self.events, d)
        out = self.write_summary(d)
        write_stop(d, None, "check finished" if not self.summary.get("interrupted") else "check interrupted")
        return out

    def write_summary(self, run_dir: "str | os.PathLike | Location") -> "Location":
        """report.json and report.md only (the events are already in the directory)."""
        d = Location(run_dir)
        (d / REPORT_JSON).write_text(self.to_json())
        (d / REPORT_MD).write_text(self.to_markdown())
        return d

    def to_markdown(self) -> str:
        n = self.by_status()
        lines = [f"# flow1 report: {self.target}", "",
                 f"**{self.status}**: {n[C.FAIL]} FAIL, {n[C.WARN]} WARN, {n[C.PASS]} PASS "
                 f"({len(self.advisories())} advisory)", "",
                 "| time (UTC) | module | status | code | evidence |", "|---|---|---|---|---|"]
        for e in self.events:
            if e.status != C.PASS or e.advisory:
                msg = e.message.replace("|", "\\|").replace("\n", " ")
                lines.append(f"| {e.ts:%Y-%m-%d %H:%M:%S} | {e.module} | {e.status} | {e.code} | {msg} |")
        sa = self.summary.get("state_actions")
        if sa:
            lines += ["", "## State clusters x actions", ""]
            for module, snap in (sa.get("modules") or {"": sa}).items():
                if snap.get("verdicts"):
                    lines.append(f"{'Module ' + module + ': l' if module else 'L'}ast snapshot (iteration "
                                 f"{snap.get('last_iteration')}, {snap.get('clusters')} clusters, {snap.get('states')} "
                                 f"states): " + ", ".join(f"{n} {v}" for v, n in sorted(snap["verdicts"].items())) + ".")
            if sa.get("heatmaps"):
                lines += ["", f"![P(action | cluster)]({sa['heatmaps'][-1]})", "",
                          f"{len(sa['heatmaps'])} heatmap(s) in `heatmaps/`."]
        return "\n".join(lines) + "\n"
