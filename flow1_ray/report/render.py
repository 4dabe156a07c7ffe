"""Console rendering: coloured log lines, a summary table, the verdict line.

rich decides colour: none when the output is not a terminal or NO_COLOR is set. Every
string from a run is printed as a :class:`~rich.text.Text` of :func:`one_line` (never as
rich markup, never with a control character of its own): a module id ``[red]`` or a
message holding an escape sequence shows as what it is.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..common import codes as C
from ..common.events import Event, one_line
from .diagnosis_view import console_lines
from .model import GAP_CODES, Report, life_line, verdict_kind

STYLE = {C.PASS: "green", C.WARN: "yellow", C.FAIL: "bold red", "GAPS": "yellow", "NOT_JUDGED": "bold magenta"}


def console(file: TextIO | None = None) -> Console:
    return Console(file=file, highlight=False, soft_wrap=True, emoji=False)   # ":name:" in a run's text stays text


def log_text(e: Event) -> Text:
    line = e.log_line()
    head = f" | {one_line(e.module)} | "
    i = line.find(head) + len(head)
    t = Text(line)
    t.stylize(STYLE[e.status], i, i + len(e.status))
    return t


def plain(text: object) -> Text:
    """A line from a run's strings, as text (no markup, no control characters)."""
    return Text(one_line(text))


def print_events(con: Console, events: list[Event]) -> None:
    for e in events:
        con.print(log_text(e))


def summary_table(report: Report, title: str = "flow1 check") -> Table:
    table = Table(title=plain(f"{title}: {report.target}"), title_justify="left")
    table.add_column("module")
    table.add_column("status")
    table.add_column("codes")
    modules: dict[str, list[Event]] = {}
    for e in report.events:
        modules.setdefault(e.module, []).append(e)
    for m, evs in modules.items():
        gap = [e.code in GAP_CODES and e.status != C.FAIL for e in evs]
        st = C.worst(e.status for e, g in zip(evs, gap) if not g)
        counts: dict[str, int] = {}
        for e, g in zip(evs, gap):
            if e.status != C.PASS or e.advisory:
                name = f"{e.code} (advisory)" if e.advisory else f"{e.code} (gap)" if g else e.code
                counts[name] = counts.get(name, 0) + 1
        codes = ", ".join(f"{c} x{n}" if n > 1 else c for c, n in sorted(counts.items())) or "-"
        table.add_row(plain(m), Text(st, style=STYLE[st]), plain(codes))
    return table


def verdict_text(head: str, report: Report) -> Text:
    """``head: VERDICT (n FAIL, n WARN, n advisory)`` with the verdict coloured."""
    n = report.by_status()
    t = Text(f"{head}: ")
    verdict = report.verdict
    t.append(one_line(verdict), style=STYLE[verdict_kind(verdict)])
    t.append(f" ({n[C.FAIL]} FAIL, {n[C.WARN]} WARN, {len(report.advisories())} advisory)")
    return t


def print_gaps(con: Console, report: Report) -> None:
    """Why there is no verdict, the run's life, and what flow1 did not see whole."""
    if report.not_judged:
        con.print(plain(f"not judged: {report.not_judged}"))
    life = life_line(report.completeness)
    if life:
        con.print(plain(f"run: {life}"))
    for g in report.gaps():
        con.print(plain(f"gap: {g}"))


def print_references(con: Console, report: Report) -> None:
    """One line naming the docs entry of each code the findings raised (WARN, FAIL, advisory),
    in the order first raised: ``what the codes mean (flow1's docs): reference/codes.md#kl_spike, ...``."""
    codes = dict.fromkeys(e.code for e in report.events if e.status != C.PASS or e.advisory)
    if codes:
        con.print(plain("what the codes mean (flow1's docs): " + ", ".join(C.reference(c) for c in codes)))


def verdict_line(report: Report) -> Text:
    s = report.summary
    t = verdict_text("flow1 check", report)
    t.append(one_line(f" {report.target}: "
             f"{s.get('steps', 0)} steps, "
             f"{s.get('episodes', 0)} episodes, {s.get('seconds', 0):.2f} s"))
    if s.get("stopped_early"):
        t.append(one_line(f"; stopped early: {s['stopped_early']}"))
    return t


def print_report(con: Console, report: Report) -> None:
    print_events(con, report.events)
    con.print(summary_table(report))
    con.print(verdict_line(report))
    print_gaps(con, report)   # the rules a stopped check could not run are its "not assessable" gaps
    print_references(con, report)
    as_of = report.summary.get("findings_as_of_step")
    if report.summary.get("not_run") and as_of is not None:
        con.print(plain(f"findings and their counts as last reported by the env's process, at step {as_of}"))


def print_run_report(con: Console, report: Report) -> None:
    """The end screen of a training run or of ``flow1 report``."""
    con.print(summary_table(report, "flow1 run"))
    s = report.summary
    t = verdict_text("flow1 run", report)
    if s.get("iterations") is not None:
        w = s.get("workers") or {}
        ret = s.get("episode_return_mean")
        t.append(one_line(f"; {s['iterations']} iterations, {s.get('env_steps')} env steps, return mean "
                          f"{ret if isinstance(ret, (int, float)) else float('nan'):.1f}; workers alive "
                          f"{w.get('alive', '?')}, dead {w.get('dead', '?')}, stalled {w.get('stalled', '?')}, "
                          f"restarts {w.get('restarts', '?')}"))
    con.print(t)
    for line in console_lines(report.diagnosis()):
        con.print(plain(line))
    print_gaps(con, report)
    print_references(con, report)
    sa = s.get("state_actions") or {}
    for module, snap in (sa.get("modules") or {"": sa}).items():
        if snap.get("verdicts"):
            con.print(plain(f"state clusters{' of ' + module if module else ''} (snapshot at iteration "
                            f"{snap.get('last_iteration')}): "
                            + ", ".join(f"{n} {v}" for v, n in sorted(snap["verdicts"].items()))
                            + (f"; {len(sa['heatmaps'])} heatmap(s), last {sa['heatmaps'][-1]}"
                               if sa.get("heatmaps") and not module else "")))
    if sa.get("modules") and sa.get("heatmaps"):
        con.print(plain(f"{len(sa['heatmaps'])} heatmap(s), last {sa['heatmaps'][-1]}"))
    ln = s.get("learner") or {}
    for module, r in (ln.get("modules") or {}).items():
        parts = [f"{label} {r[key]:.3g}" for key, label in (
            ("entropy_ratio", "entropy/max"), ("mean_kl_loss", "KL"), ("policy_loss", "policy loss"),
            ("vf_loss", "vf loss"), ("default_optimizer_learning_rate", "lr"), ("grad_norm", "grad norm"))
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        con.print(plain(f"learner {module} (iteration {r.get('iteration')}): " + (", ".join(parts) or "no curves")))
    if ln.get("snapshots"):
        con.print(plain(f"{len(ln['snapshots'])} learner snapshot(s), last {ln['snapshots'][-1]}"))
    con.print(plain(f"run directory: {s.get('run_dir')}"))
