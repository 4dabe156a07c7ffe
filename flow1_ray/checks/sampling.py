"""Iterations that train on nothing: NO_SAMPLES.

When every runner's ``sample()`` is late (``sample_timeout_s``) or dead, RLlib logs "No
samples returned from remote workers" and the iteration has 0 env steps: ``train()``
returns, the curves stand still, and nothing says why. One such iteration can be an
asynchronous algorithm's gap; several in a row is a run that is not learning. Pure: fed
with result dicts (live in ``on_train_result``), no Ray.
"""

from __future__ import annotations

from typing import Any

from .. import codes as C
from ..events import Event
from .rule import Rule

RULES = (
    Rule("NO_SAMPLES", C.WORKER, C.WARN,
         "training iterations sampled 0 env steps several times in a row (runners dropped or late)"),
)

#: iterations in a row with no new env step before NO_SAMPLES
NO_SAMPLES_ITERS = 3


def _lifetime(result: dict) -> int | None:
    for v in (result.get("num_env_steps_sampled_lifetime"),
              (result.get("env_runners") or {}).get("num_env_steps_sampled_lifetime")):
        try:
            if v is not None:
                return int(v)
        except (TypeError, ValueError):
            continue
    return None


class NoSamples:
    """Counts iterations in a row whose lifetime env-step count did not move; one finding
    per streak, re-armed when steps arrive again."""

    def __init__(self, iters: int = NO_SAMPLES_ITERS) -> None:
        self.iters = iters
        self.last: int | None = None
        self.streak = 0
        self.dropped_at_start: float | None = None
        self.prev_dropped: float | None = None    # the count before this iteration
        self.reported = False

    def add(self, result: dict, iteration: int) -> list[Event]:
        steps = _lifetime(result)
        ft = result.get("fault_tolerance") or {}
        dropped = ft.get("num_env_runners_dropped_lifetime")
        if steps is None:
            return []
        if self.last is not None and steps <= self.last:
            if self.streak == 0:   # the drops of this iteration count: from the count before it
                self.dropped_at_start = self.prev_dropped
            self.streak += 1
        else:
            self.streak, self.reported = 0, False
        self.last, self.prev_dropped = steps, dropped
        if self.streak < self.iters or self.reported:
            return []
        self.reported = True
        return [self._finding(iteration, dropped, ft)]

    def _finding(self, iteration: int, dropped: Any, ft: dict) -> Event:
        why = []
        try:
            d = int(dropped) - int(self.dropped_at_start or 0)
            if d > 0:
                why.append(f"RLlib left out {d} late sample() call(s) meanwhile (sample_timeout_s; "
                           f"fault_tolerance/num_env_runners_dropped_lifetime)")
        except (TypeError, ValueError):
            pass
        healthy = ft.get("num_healthy_workers")
        if healthy is not None:
            why.append(f"{healthy} healthy EnvRunner(s)")
        return Event(C.NO_SAMPLES, (
            f"{self.streak} iterations in a row sampled 0 env steps (up to iteration {iteration}): the learner "
            f"trains on nothing new" + (f"; {'; '.join(why)}" if why else "")
            + "; look for hung or slow runners (WORKER_STALLED, STEP_DURATION_OUTLIER) or raise "
              "config.env_runners(sample_timeout_s=...)"),
            {"iterations": self.streak, "env_steps_lifetime": self.last, "dropped_lifetime": dropped,
             "healthy_workers": healthy}, iteration=iteration)
