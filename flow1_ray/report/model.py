"""The :class:`Report` of a check or a run: events plus the verdict that gates CI."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import codes as C
from ..events import Event, jsonable
from ..store import REPORT_JSON, REPORT_MD, Location, write_events


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

    @property
    def status(self) -> str:
        return C.worst(e.status for e in self.events)

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

    def exit_code(self, fail_on: str = C.FAIL) -> int:
        """0 when nothing at or above ``fail_on``, else 1 (the CLI's contract)."""
        return 1 if C.STATUS_RANK[self.status] >= C.STATUS_RANK[fail_on] else 0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "counts": self.by_status(),
                "advisories": sorted({e.code for e in self.advisories()}),
                "summary": jsonable(self.summary), "events": [e.to_dict() for e in self.events]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def write(self, run_dir: "str | os.PathLike | Location") -> "Location":
        """Write events (Parquet + log) and the report files into a run directory (a path
        or a filesystem URI)."""
        d = Location(run_dir)
        d.mkdir()
        write_events(self.events, d)
        return self.write_summary(d)

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
