"""flow1's live numbers as Ray metrics, so a cluster's Prometheus scrapes them where it
scrapes Ray (Ray's metrics export port; with ``ray[default]`` installed).

One module, fed from the hub (the monitor's worker table and the Recorder's counts) every
``METRICS_INTERVAL_S``. Ray prefixes every series with ``ray_`` and adds ``_total`` to a
counter, so the names a dashboard or an alert uses are the ``SERIES`` below. With only
``ray[rllib]`` nothing serves the export port; the gauges are then set into the void at
no cost, and a failure to create them turns this module off, never the hub.
"""

from __future__ import annotations

import logging
from typing import Any

from ..common.schema import WORKER_STATES

logger = logging.getLogger("flow1_ray")

METRICS_INTERVAL_S = 5.0

#: metric name -> (kind, tag keys, description); defined once
WORKERS = "flow1_workers"
LEARNERS = "flow1_learners"
RESTARTS = "flow1_worker_restarts"
EVENTS = "flow1_events"
SAMPLES_DROPPED = "flow1_samples_dropped"
STATE_SNAPSHOTS = "flow1_state_snapshots"
DEATHS = "flow1_worker_deaths"
DEFINITIONS = {
    WORKERS: ("gauge", ("run", "state"), "the run's EnvRunners by state (alive, dead, stalled)"),
    LEARNERS: ("gauge", ("run", "state"), "the run's Learner actors by state (alive, dead, stalled)"),
    RESTARTS: ("gauge", ("run",), "restarts of the run's workers seen so far"),
    EVENTS: ("counter", ("run", "status", "code"), "WARN and FAIL findings recorded, by code"),
    SAMPLES_DROPPED: ("gauge", ("run",), "diagnostic batches dropped under back-pressure so far"),
    STATE_SNAPSHOTS: ("gauge", ("run",), "state-cluster snapshots taken so far"),
    DEATHS: ("gauge", ("run", "component"), "deaths of the run's workers so far, by what each is charged to "
             "(env, a connector, RLModule forward, action sampling, callback, RLlib, fatal signal, not seen...)"),
}
#: the series as Prometheus sees them
SERIES = {name: "ray_" + name + ("_total" if kind == "counter" else "") for name, (kind, _, _) in DEFINITIONS.items()}


class RunMetrics:
    """The Ray metrics of one run (``run`` tag = its run id)."""

    def __init__(self, run_id: str) -> None:
        from ray.util.metrics import Counter, Gauge

        self.run_id = run_id
        self.enabled = True
        self._m: dict[str, Any] = {}
        for name, (kind, tags, text) in DEFINITIONS.items():
            cls = Counter if kind == "counter" else Gauge
            self._m[name] = cls(name, description=text, tag_keys=tags)
        self._counted: dict[tuple[str, str], int] = {}

    def update(self, monitor: dict, recorder: dict) -> None:
        """Set the gauges from the monitor's status and the Recorder's; add the new findings
        (``recorder["by_status_code"]``: running totals) to the counter."""
        if not self.enabled:
            return
        try:
            run = {"run": self.run_id}
            learners = monitor.get("learners") or {}
            for state in WORKER_STATES:
                self._m[WORKERS].set(int(monitor.get(state, 0)), tags={**run, "state": state})
                self._m[LEARNERS].set(int(learners.get(state, 0)), tags={**run, "state": state})
            self._m[RESTARTS].set(int(monitor.get("restarts", 0)), tags=run)
            self._m[SAMPLES_DROPPED].set(int(recorder.get("samples_dropped", 0)), tags=run)
            self._m[STATE_SNAPSHOTS].set(int(recorder.get("snapshots", 0)), tags=run)
            for component, n in (monitor.get("deaths_by_component") or {}).items():
                self._m[DEATHS].set(int(n), tags={**run, "component": str(component)})
            for key, total in (recorder.get("by_status_code") or {}).items():
                status, code = key.split(":", 1)
                new = int(total) - self._counted.get((status, code), 0)
                if new > 0:
                    self._m[EVENTS].inc(new, tags={**run, "status": status, "code": code})
                    self._counted[(status, code)] = int(total)
        except Exception as e:  # never the hub's problem
            self.enabled = False
            logger.warning("flow1: Ray metrics turned off: %s: %s", type(e).__name__, e)


def make_run_metrics(run_id: str) -> RunMetrics | None:
    try:
        return RunMetrics(run_id)
    except Exception as e:
        logger.warning("flow1: no Ray metrics (%s: %s)", type(e).__name__, e)
        return None
