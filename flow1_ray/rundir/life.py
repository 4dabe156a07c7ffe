"""A run directory's life as a reader tells it: what the start, heartbeat and stop records
say about a run (still running, ended without a clean stop, parts of its events missing),
and why a directory leaves no verdict to give at all."""

from __future__ import annotations

from typing import Any

from ..common.events import one_line
from .runrecord import RUN_JSON
from .store import EVENTS_DIR


def life_gaps(completeness: dict[str, Any] | None) -> list[str]:
    """The run's life as gaps: a run that ended without a clean stop, or is still running."""
    c = completeness or {}
    at = c.get("last_data_at") or "unknown"
    if c.get("state") == "ended":
        how = (c.get("stop") or {}).get("how")
        return [f"ended without a clean stop{_after(c.get('last_iteration'))}, last data at {at}"
                + (f" ({one_line(how)})" if how else "")]
    if c.get("state") == "running":
        it = c.get("last_iteration")
        return [f"still running ({'iteration ' + str(it) + ', ' if it is not None else ''}last data at {at}): "
                f"the verdict may change"]
    return []


def _after(iteration: Any) -> str:
    return f" after iteration {iteration}" if iteration is not None else " (no iteration written)"


def no_verdict(completeness: dict[str, Any], events_problem: str | None) -> str | None:
    """Why there is no verdict to give, or None: no start record (the directory may be
    anything), no readable events (nothing to judge)."""
    reasons = []
    if not completeness.get("started"):
        bad = any(str(p).startswith(RUN_JSON) for p in completeness.get("problems") or [])
        reasons.append(f"no start record ({RUN_JSON} {'unreadable' if bad else 'missing'})")
    if events_problem:
        reasons.append(f"no readable events ({events_problem})")
    return "; ".join(reasons) or None


def events_problem(exists: bool, skipped: int) -> str:
    """Why a run directory has no readable events, for :func:`no_verdict`."""
    if not exists:
        return f"{EVENTS_DIR}/ missing"
    return f"{skipped} item(s) of {EVENTS_DIR}/ skipped" if skipped else f"{EVENTS_DIR}/ unreadable"


def missing_events(life: dict[str, Any], found: int, skipped: list[str]) -> str | None:
    """Parts removed from ``events/`` (nothing damaged, nothing named, just fewer rows): the
    Recorder says in its heartbeat and stop records how many events it wrote. Read the
    records before the events (a live run only adds to both)."""
    counts = [r.get("events_written") for r in (life.get("stop") or {}, life.get("heartbeat") or {})]
    written = max((n for n in counts if isinstance(n, int) and not isinstance(n, bool)), default=None)
    if written is None or found >= written or skipped:
        return None
    return f"{EVENTS_DIR}: the Recorder wrote {written} event(s), {found} are here: parts are missing"


def life_line(completeness: dict[str, Any] | None) -> str | None:
    """The run's life in one line (None for a report that is not of a run directory)."""
    if completeness is None:
        return None
    c = completeness
    start = (c.get("start") or {}).get("started_at")
    head = f"started {start}" if start else f"no start record ({RUN_JSON})"
    stop = c.get("stop") or {}
    if c.get("state") == "stopped":
        after = f" after iteration {stop['iteration']}" if stop.get("iteration") is not None else ""
        return f"{head}; stopped cleanly{after} ({stop.get('how')}) at {stop.get('stopped_at')}"
    more = life_gaps(c)
    return f"{head}; " + (more[0] if more else f"last data at {c.get('last_data_at') or 'unknown'}")


def learning_of(life: dict, metrics_rows: list[dict], learner_rows: list[dict]) -> dict | None:
    """Which trend rules had enough data to judge (:mod:`flow1_ray.checks.learner.sufficiency`),
    from the run's metrics and learner rows; None for a run that never finished an iteration's
    row and is still running (its learning is not yet a question) or whose start record is
    missing."""
    from ..checks.learner.sufficiency import count_from_tables, sufficiency

    if not life.get("started") or (life.get("state") == "running" and not metrics_rows):
        return None
    return sufficiency(count_from_tables(metrics_rows, learner_rows)).to_dict()
