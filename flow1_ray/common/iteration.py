"""One training iteration as flow1 reports it: the counts of ``result["flow1"]`` and the
metrics table's row, both read off the hub's view (``HubCore.driver_view``).

Why here and not in the hook: the driver's hook asks the hub once per iteration, and that one
call also carries the driver's part of the iteration's row (its result numbers, the learner
rules' numbers, the hook's time). The hub adds the columns its own view gives and keeps the
row before it answers, so the row is in the hub when ``train()`` returns (a driver SIGKILLed
next loses nothing of it) at the cost of one round trip, not two. The driver builds
``result["flow1"]`` from the same view. Both sides take the counts from these functions.
No Ray here: the hub and the driver import it.
"""

from __future__ import annotations

from typing import Any

from . import schema as S
from .codes import FAIL, WARN

#: the keys of the driver's part of a row sent with the view question: ``head`` (the result's
#: numbers) goes before the hub's columns, ``tail`` (the hook's time, the learner's numbers) after
ROW_HEAD, ROW_TAIL, ROW_DROPPED = "head", "tail", "dropped"


def counts(status: dict, rec: dict, states: dict) -> dict[str, dict]:
    """``result["flow1"]``'s workers, learners, findings and state counts from the monitor's
    status, the Recorder's and the clusterer's."""
    events = rec.get("events", {})
    return {
        "worker": {**{k: status.get(k, 0) for k in S.WORKER_STATES}, "restarts": status.get("restarts", 0)},
        "learners": {k: int((status.get("learners") or {}).get(k, 0)) for k in S.WORKER_STATES},
        "events": {s: int(events.get(s, 0)) for s in (FAIL, WARN)},
        "states": {"received": int(states.get("received", 0)), "snapshots": int(states.get("snapshots", 0)),
                   "heatmaps": int(rec.get("heatmaps", {}).get("written", 0))},
    }


def samples_dropped(rec: dict, dropped_in_driver: int) -> int:
    """What flow1 lost: the runners' batches the hub counted, and the driver's lost rows."""
    return int(rec.get("samples_dropped", 0)) + int(dropped_in_driver)


def view_columns(status: dict, rec: dict, states: dict, dropped_in_driver: int) -> dict[str, Any]:
    """The metrics row's ``flow1/...`` columns that the hub's view gives (``counts`` flattened,
    the node's memory, what was dropped, how many watchers are off)."""
    return {**{S.metric(section, k): v for section, part in counts(status, rec, states).items()
               for k, v in part.items()},
            **{S.metric("memory", k): v for k, v in (status.get("memory") or {}).items()},
            S.SAMPLES_DROPPED: samples_dropped(rec, dropped_in_driver),
            S.WATCHERS_OFF: len(rec.get("watchers_off", []))}


def row(driver_part: dict, status: dict, rec: dict, states: dict) -> dict[str, Any]:
    """The iteration's metrics row: the driver's ``head``, the view's columns, its ``tail``."""
    return {**(driver_part.get(ROW_HEAD) or {}),
            **view_columns(status, rec, states, int(driver_part.get(ROW_DROPPED) or 0)),
            **(driver_part.get(ROW_TAIL) or {})}
