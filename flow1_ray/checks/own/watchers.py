"""How a part of flow1 says that it stopped watching.

A diagnostics tool that goes blind and still says PASS is worse than none. Every part that
watches something -- a runner's liveness, a node's probe, the contention judgement, the
state clusterer and a runner's state sampling, the Recorder, a Learner's tracing, the driver watchdog -- turns a failure
that switches it off into one WATCHER_OFF event: which watcher, what is no longer seen (a
worker, a node, a module), and the error in one line. The traceback travels in the
evidence as ``traceback`` and the Recorder moves it into a file under ``internal/`` of the
run directory (``traceback_file``), so the log and the report stay one line per finding.
The run's verdict then names what was not watched (:attr:`flow1_ray.report.Report.blind`).
"""

from __future__ import annotations

import traceback
from typing import Any

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from ...common.events import Event

RULES = (
    Rule("FLOW1_INTERNAL", C.FLOW1, C.WARN, "flow1's own error, caught so that training goes on"),
    Rule("SAMPLES_DROPPED", C.FLOW1, C.WARN, "diagnostic batches dropped under back-pressure"),
    Rule("WATCHER_OFF", C.FLOW1, C.WARN,
         "a part of flow1 stopped watching (liveness, a probe, contention, a runner's state sampling, the "
         "clusterer, the Recorder, learner tracing, the driver watchdog): what is no longer seen is named; a run with a watcher off is never a "
         "plain PASS"),
    Rule("HUB_RESTARTED", C.FLOW1, C.PASS,
         "Ray restarted flow1's hub; it rebuilt its workers and open incidents from the run directory (how long "
         "it was down, what it may have lost)"),
)

LIVENESS = "liveness"
PROBE = "probe"
CONTENTION = "contention"
CLUSTERER = "clusterer"
STATE_SAMPLING = "state sampling"
RECORDER = "recorder"
LEARNER_TRACING = "learner tracing"
LEARNER_LIVENESS = "learner liveness"
DRIVER_WATCH = "driver watchdog"
#: evidence key of a traceback that the Recorder moves into internal/ (and the key it leaves)
TRACEBACK, TRACEBACK_FILE = "traceback", "traceback_file"


def error_line(error: BaseException | str, limit: int = 300) -> str:
    """``Type: first line of the message`` (or the text's first line), at most ``limit`` chars."""
    if isinstance(error, BaseException):
        first = (str(error).strip().splitlines() or [""])[0]
        text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    else:
        text = (str(error).strip().splitlines() or [""])[0]
    return text[:limit]


def traceback_text(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:]
    return str(error)[-8000:]


def watcher_off_finding(watcher: str, what: str, error: BaseException | str, unseen: str,
                        consequence: str = "") -> Finding:
    """WATCHER_OFF as a Finding (an EnvRunner sends Findings): ``watcher`` is off for
    ``what``; ``unseen`` says what the user will not be told (e.g. "its death or hang"), or
    ``consequence`` says what happens instead, in full."""
    tail = consequence or f"{unseen} will not be named"
    return Finding(C.WATCHER_OFF, f"{watcher} is off for {what}: {error_line(error)}; {tail}",
                   {"watcher": watcher, "what": f"{watcher}: {what}", "error": error_line(error),
                    TRACEBACK: traceback_text(error)})


def watcher_off(watcher: str, what: str, error: BaseException | str, unseen: str, consequence: str = "",
                **where: Any) -> Event:
    """WATCHER_OFF as an Event, with ``where`` (worker_index, pid, node_id, iteration...)."""
    return watcher_off_finding(watcher, what, error, unseen, consequence).to_event(**where)


def internal_event(where: str, error: BaseException, **at: Any) -> Event:
    """FLOW1_INTERNAL: a flow1 hook or check failed once and goes on (not a watcher off)."""
    return Event(C.FLOW1_INTERNAL, f"flow1 {where} failed: {error_line(error)}; training goes on",
                 {"hook": where, "exception": type(error).__name__, "error": error_line(error),
                  TRACEBACK: traceback_text(error)}, **at)
