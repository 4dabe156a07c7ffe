"""The :class:`Report` of a check or a run: events plus the verdict that gates CI."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..rundir.cost_record import cost_table
from ..common import codes as C
from ..common.events import Event, jsonable, one_line
from ..common.schema import DIAGNOSIS_JSON, EVIDENCE_DIR
from ..rundir.store import EVENTS_DIR, REPORT_JSON, REPORT_MD, Location, write_events
from ..checks.run.death_cause import consequences, led_to
from ..rundir.life import _after, life_gaps, life_line
from ..checks.learner.sufficiency import iterations
from ..diagnosis.diagnose import diagnose
from .diagnosis_view import markdown_lines, replay_for

#: the verdict of a report that has none: no start record, no readable events, nothing assessable
NOT_JUDGED = "NOT JUDGED"
#: events that say what flow1 did not see rather than what the run did: gaps, not findings
#: (below FAIL they change no status; a run with one is "PASS, but not watched: ...")
GAP_CODES = (C.WATCHER_OFF,)


def blind_line(e: Event) -> str:
    """What a WATCHER_OFF event says was not watched, and by which part."""
    what = e.evidence.get("what") or e.message
    watcher = e.evidence.get("watcher")
    return f"{what} ({watcher})" if watcher else str(what)


def hub_line(e: Event) -> str:
    """A HUB_RESTARTED event as part of the run's life: how long the hub was down."""
    ev = e.evidence
    down = ev.get("down_s")
    down = f"{down:.1f} s" if isinstance(down, (int, float)) and not isinstance(down, bool) else "for an unknown time"
    pids = f", pid {ev.get('previous_pid')} -> {ev.get('pid')}" if ev.get("pid") is not None else ""
    return f"hub restarted at {e.ts:%Y-%m-%d %H:%M:%S} UTC after {down} down{pids}: rows it held then may be lost"


def verdict_of(status: str, not_judged: str | None, gaps: list[str]) -> str:
    """The one verdict every rendering shows: ``NOT JUDGED``, ``FAIL``, ``WARN``, ``PASS``,
    or ``PASS, but <gaps, in short>``: a PASS flow1 did not see whole is never a plain PASS."""
    if not_judged and status != C.FAIL:
        return NOT_JUDGED
    if status != C.PASS:
        return status
    return f"PASS, but {'; '.join(gaps)}" if gaps else C.PASS


def verdict_kind(verdict: str) -> str:
    """The verdict as a CSS class: PASS, WARN, FAIL, GAPS (a PASS with gaps) or NOT_JUDGED."""
    if verdict in C.STATUSES:
        return verdict
    return "NOT_JUDGED" if verdict == NOT_JUDGED else "GAPS"


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
    #: what a reader could not read and left out, each "what: why" beginning with the
    #: folder or file it came from (``events/part-....parquet: not Parquet``, ``heatmaps/x.png:
    #: a link to a file outside the run directory``): never silently
    skipped: list[str] = field(default_factory=list)
    #: signals a rule needs that were absent or all NaN ("KL: absent"), so not judged
    not_assessable: list[str] = field(default_factory=list)
    #: why there is no verdict at all (no start record, no readable events, nothing
    #: assessable); None when there is one
    not_judged: str | None = None
    #: the run's life from its run directory (:func:`flow1_ray.rundir.runrecord.completeness`);
    #: None for a report that is not of a run directory (``check_env``)
    completeness: dict[str, Any] | None = None
    #: which trend rules had enough data to judge (``Sufficiency.to_dict()`` of
    #: :mod:`flow1_ray.checks.learner.sufficiency`); None for a report that judges no learning
    #: (``check_env``)
    learning: dict[str, Any] | None = None
    #: the run's config settings (``run.json``'s ``config``, or a result file's config), for the
    #: diagnosis; None when the run did not record them
    settings: dict[str, Any] | None = None

    @property
    def short(self) -> str | None:
        """"not enough data to judge learning: ..." when no rule that says whether the run
        learns had its data; None when one had, or the report judges no learning."""
        lr = self.learning or {}
        return None if not lr or lr.get("enough") else str(lr.get("line") or "not enough data to judge learning")

    def _judged(self) -> list[Event]:
        """The events a status is made of: all but the gap events below FAIL."""
        return [e for e in self.events if e.code not in GAP_CODES or e.status == C.FAIL]

    @property
    def status(self) -> str:
        """The worst status of the events read (PASS for none), WATCHER_OFF aside (a gap,
        not a finding): a fact about those events. What a gate acts on is :attr:`verdict`
        and :meth:`exit_code`."""
        return C.worst(e.status for e in self._judged())

    @property
    def blind(self) -> list[str]:
        """What flow1 did not watch in this run (one line per WATCHER_OFF event)."""
        return [blind_line(e) for e in self.events if e.code == C.WATCHER_OFF]

    @property
    def partial(self) -> bool:
        """Some of the events could not be read: a FAIL may be among them."""
        return any(s.startswith(EVENTS_DIR) for s in self.skipped)

    def gaps(self) -> list[str]:
        """What flow1 did not see whole, besides the events themselves: watchers off, a run
        that ended without a clean stop (or is still running), hub restarts, signals not
        assessable, items skipped."""
        return ([f"not watched: {b}" for b in self.blind] + ([self.short] if self.short else [])
                + life_gaps(self.completeness)
                + [hub_line(e) for e in self.events if e.code == C.HUB_RESTARTED]
                + [f"not assessable: {n}" for n in self.not_assessable]
                + [f"skipped: {s}" for s in self.skipped])

    @property
    def verdict(self) -> str:
        """``NOT JUDGED`` when there is no verdict to give (see :attr:`not_judged`), else
        the worst status; a PASS with gaps is never a plain PASS: ``PASS, but not watched:
        ...`` (:func:`verdict_of`). Every rendering shows this string and :meth:`gaps`."""
        c = self.completeness or {}
        life = {"ended": f"ended without a clean stop{_after(c.get('last_iteration'))}",
                "running": "still running"}.get(c.get("state"))
        hubs = sum(e.code == C.HUB_RESTARTED for e in self.events)
        counts = (self.learning or {}).get("counts") or {}
        short = ([f"not watched: {b}" for b in self.blind]
                 + ([f"learning not judged: not enough data ({iterations(counts.get('iterations') or 0)})"]
                    if self.short else [])
                 + ([life] if life else [])
                 + ([f"hub restarted {hubs} time(s)"] if hubs else [])
                 + ([f"{len(self.not_assessable)} signal(s) not assessable"] if self.not_assessable else [])
                 + ([f"{len(self.skipped)} item(s) skipped"] if self.skipped else []))
        return verdict_of(self.status, self.not_judged, short)

    def codes(self, min_status: str = C.WARN) -> set[str]:
        """The codes at or above ``min_status`` (WATCHER_OFF aside, as in :attr:`status`).

        Args:
            min_status: the lowest status counted: "PASS", "WARN" (the default) or "FAIL".

        Raises:
            KeyError: ``min_status`` is not one of those.
        """
        floor = C.STATUS_RANK[min_status]
        return {e.code for e in self._judged() if C.STATUS_RANK[e.status] >= floor}

    def advisories(self) -> list[Event]:
        """The advisory events: PASS, but worth reading (listed in every rendering)."""
        return [e for e in self.events if e.advisory]

    def by_status(self) -> dict[str, int]:
        """Events by status, WATCHER_OFF aside (listed in :meth:`gaps`)."""
        counts = {s: 0 for s in C.STATUSES}
        for e in self._judged():
            counts[e.status] += 1
        return counts

    def exit_code(self, fail_on: str = C.FAIL, allow_blind: bool = False, allow_short: bool = False) -> int:
        """The CLI's contract: 1 when an event at or above ``fail_on`` was read; else 2 when
        there is no verdict (:attr:`not_judged`); else 1 when flow1 did not watch the run
        whole (a watcher off, no clean stop, events parts skipped) unless ``allow_blind``;
        else 2 when the run was too short to judge learning (:attr:`short`) unless
        ``allow_short``; else 0.

        Args:
            fail_on: the lowest event status that fails: "FAIL" (the default), "WARN" or "PASS".
            allow_blind: True: a run flow1 did not watch whole is not failed for that alone.
            allow_short: True: a run too short to judge learning exits as its events say.

        Returns:
            The exit code: 0, 1 or 2.

        Raises:
            KeyError: ``fail_on`` is not a status.
        """
        if C.STATUS_RANK[self.status] >= C.STATUS_RANK[fail_on]:
            return 1
        if self.not_judged:
            return 2
        if not allow_blind and (self.blind or self.partial or (self.completeness or {}).get("state") == "ended"):
            return 1
        return 2 if self.short and not allow_short else 0

    def diagnosis(self) -> dict[str, Any]:
        """The run's diagnosis (:func:`flow1_ray.diagnosis.diagnose`) as ``diagnosis.json`` holds
        it: read from the events, the learning data, the config in ``run.json`` and the what-ifs."""
        rows = [v for w in self.summary.get("whatif") or [] for v in w.get("verdicts") or []]
        rows += [e.evidence for e in self.events if e.code == C.WHATIF_VERDICT and e.evidence.get("verdict")]
        run = str(self.summary.get("run_dir") or self.target)
        d = diagnose(self.events, self.learning, self.settings, rows, self.not_judged, self.short, run=run).to_dict()
        d["reproduce"] = replay_for(d.get("primary"), self.summary.get("repro"), run)
        return d

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "verdict": self.verdict, "counts": self.by_status(),
                "diagnosis": self.diagnosis(),
                "not_judged": self.not_judged, "gaps": self.gaps(), "skipped": list(self.skipped),
                "not_assessable": list(self.not_assessable), "completeness": jsonable(self.completeness),
                "learning": jsonable(self.learning),
                "life": life_line(self.completeness),
                "advisories": sorted({e.code for e in self.advisories()}),
                "summary": jsonable(self.summary), "events": [e.to_dict() for e in self.events]}

    def to_json(self, indent: int | None = 2) -> str:
        """The report (:meth:`to_dict`, its events included) as a JSON string.

        Args:
            indent: spaces per nesting level, as :func:`json.dumps`; None: all on one line.
        """
        return json.dumps(self.to_dict(), indent=indent)

    def write(self, run_dir: "str | os.PathLike | Location") -> "Location":
        """Write events (Parquet + log) and the report files into a run directory (a path
        or a filesystem URI).

        Args:
            run_dir: a local path or a filesystem URI (e.g. ``s3://...``); created if missing.
                Its start record (``run.json``), when one exists, is kept; events are appended.

        Returns:
            The run directory's :class:`~flow1_ray.rundir.store.Location`.
        """
        from ..rundir.runrecord import write_start, write_stop

        d = Location(run_dir)
        d.mkdir()
        run_id = next((e.run_id for e in self.events if e.run_id), self.target)
        write_start(d, run_id, "check", {"target": self.target}, summary=self.summary)
        self._write_diffs(d)
        write_events(self.events, d)
        out = self.write_summary(d)
        write_stop(d, None, "check finished" if not self.summary.get("interrupted") else "check interrupted")
        return out

    def _write_diffs(self, d: "Location") -> None:
        """Each finding that carries a diff of the env's state (REWARD_UNEARNED) as a file a
        user can open: ``evidence/<code>-<attribute>.diff``."""
        for e in self.events:
            diff = e.evidence.get("diff") if isinstance(e.evidence, dict) else None
            if not isinstance(diff, str) or not diff:
                continue
            what = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(e.evidence.get("attribute", "")))
            name = f"{e.code}-{what[:80]}.diff"
            (d / EVIDENCE_DIR).mkdir()
            (d / EVIDENCE_DIR / name).write_text(f"# {e.code}: step {e.evidence.get('diff_step')}\n{diff}\n")
            e.evidence["diff_file"] = f"{EVIDENCE_DIR}/{name}"

    def write_summary(self, run_dir: "str | os.PathLike | Location") -> "Location":
        """report.json, diagnosis.json and report.md only (the events are already in the directory).

        Args:
            run_dir: the run directory, a local path or a filesystem URI; both files are
                overwritten.

        Returns:
            The run directory's :class:`~flow1_ray.rundir.store.Location`.
        """
        d = Location(run_dir)
        doc = self.to_dict()
        (d / REPORT_JSON).write_text(json.dumps(doc, indent=2))
        (d / DIAGNOSIS_JSON).write_text(json.dumps(doc["diagnosis"], indent=2))
        (d / REPORT_MD).write_text(self.to_markdown())
        return d

    def to_markdown(self) -> str:
        """The report as Markdown; every string from the run goes through :func:`md` (no
        raw HTML, no table cell broken by a ``|``, no line of its own)."""
        n = self.by_status()
        lines = [f"# flow1 report: {md(self.target)}", "",
                 f"**{md(self.verdict)}**: {n[C.FAIL]} FAIL, {n[C.WARN]} WARN, {n[C.PASS]} PASS "
                 f"({len(self.advisories())} advisory)", ""]
        if self.not_judged:
            lines += [f"Not judged: {md(self.not_judged)}", ""]
        life = life_line(self.completeness)
        if life:
            lines += [f"Run: {md(life)}", ""]
        gaps = self.gaps()
        if gaps:
            lines += ["Gaps (what flow1 did not see whole):", ""] + [f"- {md(g)}" for g in gaps] + [""]
        diagnosis = self.diagnosis()
        lines += markdown_lines(diagnosis, md) + ["## Findings", ""]
        follows = {(c["code"], c.get("ts")) for c in diagnosis.get("chain") or []}
        primary = (diagnosis.get("primary") or {}).get("code")
        lines += ["| time (UTC) | module | status | code | evidence |", "|---|---|---|---|---|"]
        by_origin = consequences(self.events)
        for e in self.events:
            if e.status != C.PASS or e.advisory:
                after = "".join(f" (led to: {c})" for c in led_to(e, by_origin))
                if (e.code, e.ts.isoformat()) in follows:
                    after += f" (follows from {primary}: see the diagnosis)"
                lines.append(f"| {e.ts:%Y-%m-%d %H:%M:%S} | {md(e.module)} | {md(e.status)} | {md(e.code)} | "
                             f"{md(e.message + after)} |")
        codes = dict.fromkeys(e.code for e in self.events if e.status != C.PASS or e.advisory)
        if codes:
            lines += ["", "What the codes mean, in flow1's docs: "
                      + ", ".join(f"`{C.reference(c)}`" for c in codes) + "."]
        sa = self.summary.get("state_actions")
        if sa:
            lines += ["", "## State clusters x actions", ""]
            for module, snap in (sa.get("modules") or {"": sa}).items():
                if snap.get("verdicts"):
                    lines.append(f"{'Module ' + md(module) + ': l' if module else 'L'}ast snapshot (iteration "
                                 f"{md(snap.get('last_iteration'))}, {md(snap.get('clusters'))} clusters, "
                                 f"{md(snap.get('states'))} states): "
                                 + ", ".join(f"{n} {md(v)}" for v, n in sorted(snap["verdicts"].items())) + ".")
                for c in snap.get("described") or []:
                    lines.append(f"- {cluster_line(c)}")
            if sa.get("heatmaps"):
                from urllib.parse import quote

                lines += ["", f"![P(action | cluster)]({quote(sa['heatmaps'][-1])})", "",
                          f"{len(sa['heatmaps'])} heatmap(s) in `heatmaps/`."]
        cost = cost_lines(((self.completeness or {}).get("stop") or {}).get("cost"))
        if cost:
            lines += ["", "## flow1's own cost", ""] + cost
        for w in self.summary.get("whatif") or []:
            lines += ["", f"## What-if {md(w['id'])}: the advice tested", "",
                      f"From {md(w.get('checkpoint'))}, {md(w.get('seeds'))} seeds x {md(w.get('iterations'))} "
                      f"iterations a branch.", "", "| branch | finding | verdict | why |", "|---|---|---|---|"]
            for v in w["verdicts"]:
                lines.append(f"| {md(v['branch'])} | {md(v.get('finding') or '(the return)')} | {md(v['verdict'])} | "
                             f"{md(v.get('why'))} |")
            lines += [f"- failed: {md(f)}" for f in w.get("failed", [])]
        return "\n".join(lines) + "\n"


def cost_lines(cost: Any) -> list[str]:
    """:func:`cost_table` as Markdown; [] without one."""
    table = cost_table(cost)
    if table is None:
        return []
    head, rows = table
    return [md(head), "", "| feature | CPU per env step | share of the runner's | budget |", "|---|---|---|---|"] + [
        "| " + " | ".join(md(x) for x in r) + " |" for r in rows]


def cluster_line(c: dict[str, Any]) -> str:
    """A flagged cluster of the summary in one Markdown line: its verdict, share and top
    action, then what its states hold (every run string through :func:`md`)."""
    top = (f", action {md(c.get('top_action'))} at {c['p_top']:.2f}"
           if isinstance(c.get("p_top"), (int, float)) and c.get("top_action") is not None else "")
    share = c.get("share") if isinstance(c.get("share"), (int, float)) else 0.0
    return (f"cluster {md(c.get('cluster'))} **{md(c.get('verdict'))}** ({share:.1%} of states{top}): "
            f"{md(c.get('description'))}")


#: Markdown's characters that a run string may not carry raw: HTML (``<`` ``>`` ``&``),
#: a table cell's end (``|``), code spans (backtick), links (``[`` ``]``) and the escape
#: itself
_MD = {"\\": "\\\\", "`": "\\`", "|": "\\|", "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;", "&": "&amp;"}


def md(text: Any) -> str:
    """A string from a run, safe inside a Markdown line or table cell: one line
    (:func:`~flow1_ray.common.events.one_line`), no raw HTML, no ``|``, backtick or link."""
    return "".join(_MD.get(ch, ch) for ch in one_line("" if text is None else text))
