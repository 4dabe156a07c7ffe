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


def summary_table(report: Report) -> Table:
    table = Table(title=f"flow1 check: {report.target}", title_justify="left")
    table.add_column("module")
    table.add_column("status")
    table.add_column("codes")
    modules: dict[str, list[Event]] = {}
    for e in report.events:
        modules.setdefault(e.module, []).append(e)
    for m, evs in modules.items():
        st = C.worst(e.status for e in evs)
        codes = ", ".join(sorted({e.code for e in evs if e.status != C.PASS})) or "-"
        table.add_row(m, Text(st, style=STYLE[st]), codes)
    return table


def verdict_line(report: Report) -> Text:
    n = report.by_status()
    s = report.summary
    t = Text("flow1 check: ")
    t.append(report.status, style=STYLE[report.status])
    t.append(f" ({n[C.FAIL]} FAIL, {n[C.WARN]} WARN) {report.target}: {s.get('steps', 0)} steps, "
             f"{s.get('episodes', 0)} episodes, {s.get('seconds', 0):.2f} s")
    if s.get("stopped_early"):
        t.append(f"; stopped early: {s['stopped_early']}")
    return t


def print_report(con: Console, report: Report) -> None:
    print_events(con, report.events)
    con.print(summary_table(report))
    con.print(verdict_line(report))
