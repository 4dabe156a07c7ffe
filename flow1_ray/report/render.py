"""Console rendering: coloured log lines, a summary table, the verdict line.

rich decides colour: none when the output is not a terminal or NO_COLOR is set.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import codes as C
from ..events import Event
from .model import Report

STYLE = {C.PASS: "green", C.WARN: "yellow", C.FAIL: "bold red"}


def console(file: TextIO | None = None) -> Console:
    return Console(file=file, highlight=False, soft_wrap=True)


def log_text(e: Event) -> Text:
    line = e.log_line()
    head = f" | {e.module} | "
    i = line.find(head) + len(head)
    t = Text(line)
    t.stylize(STYLE[e.status], i, i + len(e.status))
    return t


def print_events(con: Console, events: list[Event]) -> None:
    for e in events:
        con.print(log_text(e))


def summary_table(report: Report, title: str = "flow1 check") -> Table:
    table = Table(title=f"{title}: {report.target}", title_justify="left")
    table.add_column("module")
    table.add_column("status")
    table.add_column("codes")
    modules: dict[str, list[Event]] = {}
    for e in report.events:
        modules.setdefault(e.module, []).append(e)
    for m, evs in modules.items():
        st = C.worst(e.status for e in evs)
        counts: dict[str, int] = {}
        for e in evs:
            if e.status != C.PASS or e.advisory:
                name = f"{e.code} (advisory)" if e.advisory else e.code
                counts[name] = counts.get(name, 0) + 1
        codes = ", ".join(f"{c} x{n}" if n > 1 else c for c, n in sorted(counts.items())) or "-"
        table.add_row(m, Text(st, style=STYLE[st]), codes)
    return table


def verdict_line(report: Report) -> Text:
    n = report.by_status()
    s = report.summary
    t = Text("flow1 check: ")
    t.append(report.status, style=STYLE[report.status])
    t.append(f" ({n[C.FAIL]} FAIL, {n[C.WARN]} WARN, {len(report.advisories())} advisory) {report.target}: "
             f"{s.get('steps', 0)} steps, "
             f"{s.get('episodes', 0)} episodes, {s.get('seconds', 0):.2f} s")
    if s.get("stopped_early"):
        t.append(f"; stopped early: {s['stopped_early']}")
    return t


def print_report(con: Console, report: Report) -> None:
    print_events(con, report.events)
    con.print(summary_table(report))
    con.print(verdict_line(report))
    not_run = report.summary.get("not_run")
    if not_run:
        as_of = report.summary.get("findings_as_of_step")
        con.print("not run (the check stopped before judging the rollout as a whole): " + "; ".join(not_run)
                  + (f". Findings and their counts as last reported by the env's process, at step {as_of}."
                     if as_of is not None else ""))


def print_run_report(con: Console, report: Report) -> None:
    """The end screen of a training run or of ``flow1 report``."""
    con.print(summary_table(report, "flow1 run"))
    s = report.summary
    n = report.by_status()
    t = Text("flow1 run: ")
    t.append(report.status, style=STYLE[report.status])
    t.append(f" ({n[C.FAIL]} FAIL, {n[C.WARN]} WARN, {len(report.advisories())} advisory)")
    if s.get("iterations") is not None:
        w = s.get("workers") or {}
        t.append(f"; {s['iterations']} iterations, {s.get('env_steps')} env steps, return mean "
                 f"{s.get('episode_return_mean') or float('nan'):.1f}; workers alive {w.get('alive', '?')}, "
                 f"dead {w.get('dead', '?')}, stalled {w.get('stalled', '?')}, restarts {w.get('restarts', '?')}")
    con.print(t)
    sa = s.get("state_actions") or {}
    for module, snap in (sa.get("modules") or {"": sa}).items():
        if snap.get("verdicts"):
            con.print(f"state clusters{' of ' + module if module else ''} (snapshot at iteration "
                      f"{snap.get('last_iteration')}): " + ", ".join(f"{n} {v}" for v, n in sorted(snap["verdicts"].items()))
                      + (f"; {len(sa['heatmaps'])} heatmap(s), last {sa['heatmaps'][-1]}"
                         if sa.get("heatmaps") and not module else ""))
    if sa.get("modules") and sa.get("heatmaps"):
        con.print(f"{len(sa['heatmaps'])} heatmap(s), last {sa['heatmaps'][-1]}")
    ln = s.get("learner") or {}
    for module, r in (ln.get("modules") or {}).items():
        parts = [f"{label} {r[key]:.3g}" for key, label in (
            ("entropy_ratio", "entropy/max"), ("mean_kl_loss", "KL"), ("policy_loss", "policy loss"),
            ("vf_loss", "vf loss"), ("default_optimizer_learning_rate", "lr"), ("grad_norm", "grad norm"))
            if isinstance(r.get(key), (int, float))]
        con.print(f"learner {module} (iteration {r.get('iteration')}): " + (", ".join(parts) or "no curves"))
    if ln.get("snapshots"):
        con.print(f"{len(ln['snapshots'])} learner snapshot(s), last {ln['snapshots'][-1]}")
    con.print(f"run directory: {s.get('run_dir')}")
