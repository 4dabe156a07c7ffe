"""Samples RLlib throws away: RUNNER_SAMPLES_DISCARDED; iterations that train on nothing: NO_SAMPLES.

A synchronous algorithm (PPO, DQN, ...) waits ``sample_timeout_s`` for its runners' ``sample()``
calls and leaves out the late ones: their call keeps running and its result is discarded, and
the only trace is ``fault_tolerance/num_env_runners_dropped_lifetime`` (no runner named; ray-project/ray#63302: up to 90 % of the compute wasted). Each runner times its own ``sample()`` calls
(:class:`SampleTimes`, in the EnvRunner); the driver puts those beside RLlib's counter
(:class:`DiscardedSamples`) and names the runners whose calls outlast the timeout.

When every runner's ``sample()`` is late (``sample_timeout_s``) or dead, RLlib logs "No
samples returned from remote workers" and the iteration has 0 env steps: ``train()``
returns, the curves stand still, and nothing says why. One such iteration can be an
asynchronous algorithm's gap; several in a row is a run that is not learning. Pure: fed
with result dicts (live in ``on_train_result``), no Ray.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

from ...common import codes as C
from ...common.events import Event
from ..rule import Rule
from .incidents import WAIT_HOLD_FACTOR

#: iterations on which RLlib's drop counter rose before RUNNER_SAMPLES_DISCARDED
DISCARD_MIN_ITERS = 2

RULES = (
    Rule("NO_SAMPLES", C.WORKER, C.WARN,
         "training iterations sampled 0 env steps several times in a row (runners dropped or late), the "
         "streak lasting sample_timeout_s (an asynchronous algorithm's short iterations may return empty a few "
         "times); before a run's first steps, only once its iterations outlast sample_timeout_s (a runner's start), "
         f"and {WAIT_HOLD_FACTOR}x stall_timeout_s while no runner has returned from a sample() call"),
    Rule("RUNNER_SAMPLES_DISCARDED", C.WORKER, C.WARN,
         "RLlib left out late sample() calls (fault_tolerance/num_env_runners_dropped_lifetime rose) on "
         f"{DISCARD_MIN_ITERS} iterations and EnvRunners' own timing shows calls longer than sample_timeout_s: "
         "each such runner named with its durations, its steps thrown away and the share of the sampling wasted",
         evidence=("runners", "sample_timeout_s", "wasted_share", "dropped_lifetime", "knobs"),
         knobs=("sample_timeout_s", "rollout_fragment_length")),
)


class SampleTimes:
    """One EnvRunner's ``sample()`` calls, timed where they run: how many, how long, and
    which outlasted ``sample_timeout_s`` (a synchronous algorithm has discarded those).
    Bounded: counters and the last 32 durations."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = float(timeout_s) if timeout_s else None
        self.calls = self.late = 0
        self.steps = self.late_steps = 0
        self.recent: deque[float] = deque(maxlen=32)
        self.max_s = 0.0

    def add(self, seconds: float, steps: int) -> bool:
        """One call; True when it was late."""
        self.calls += 1
        self.steps += steps
        self.recent.append(seconds)
        self.max_s = max(self.max_s, seconds)
        late = self.timeout_s is not None and seconds > self.timeout_s
        if late:
            self.late += 1
            self.late_steps += steps
        return late

    def as_dict(self) -> dict:
        return {"calls": self.calls, "late": self.late, "steps": self.steps, "late_steps": self.late_steps,
                "median_s": float(statistics.median(self.recent)) if self.recent else None,
                "max_s": self.max_s, "timeout_s": self.timeout_s}


class DiscardedSamples:
    """RUNNER_SAMPLES_DISCARDED on the driver, from RLlib's drop counter and the runners' own
    :class:`SampleTimes` (``{worker_index: SampleTimes.as_dict()}`` as the hub last heard it).
    One finding, once the counter rose on ``DISCARD_MIN_ITERS`` iterations with a runner to
    name; its numbers are the run's so far."""

    def __init__(self, config: Any = None, min_iters: int = DISCARD_MIN_ITERS) -> None:
        self.min_iters = min_iters
        self.fragment = _config_number(config, "rollout_fragment_length")
        self.prev: float | None = None
        self.rises = 0
        self.reported = False

    def add(self, result: dict, runners: dict, iteration: int) -> list[Event]:
        dropped = _number((result.get("fault_tolerance") or {}).get("num_env_runners_dropped_lifetime"))
        if dropped is None:
            return []
        if self.prev is not None and dropped > self.prev:
            self.rises += 1
        self.prev = dropped
        late = {int(k): v for k, v in (runners or {}).items() if isinstance(v, dict) and v.get("late")}
        if self.reported or self.rises < self.min_iters or not late:
            return []
        self.reported = True
        return [self._finding(result, runners, late, dropped, iteration)]

    def _finding(self, result: dict, runners: dict, late: dict, dropped: float, iteration: int) -> Event:
        timeout = next((v["timeout_s"] for v in late.values() if v.get("timeout_s")), None)
        sampled = sum(int(v.get("steps") or 0) for v in runners.values() if isinstance(v, dict))
        thrown = sum(int(v.get("late_steps") or 0) for v in late.values())
        trained = _number(result.get("num_env_steps_sampled_lifetime"))
        # the steps that reached training (RLlib's count) beside those thrown away (the runners')
        whole = thrown + trained if trained is not None else sampled
        share = thrown / whole if whole else None
        parts = []
        for idx, v in sorted(late.items()):
            med = v.get("median_s")
            parts.append(f"EnvRunner {idx}: {v['late']} of {v['calls']} sample() calls took longer than "
                         f"sample_timeout_s={timeout:g} s (median {med:.2f} s, max {v['max_s']:.2f} s), "
                         f"{v['late_steps']:,} of its {v['steps']:,} steps thrown away")
        worst = max(float(v.get("max_s") or 0.0) for v in late.values())
        knobs = [{"knob": "sample_timeout_s", "current": timeout, "value": round(2 * worst, 1),
                  "why": "twice the slowest sample() call: a late runner's steps reach training"}]
        med = max(float(v.get("median_s") or 0.0) for v in late.values())
        steps_per_call = max(int(v.get("steps") or 0) / max(1, int(v.get("calls") or 1)) for v in late.values())
        if timeout and med > 0 and steps_per_call >= 2:
            fit = max(1, int(steps_per_call * timeout / med * 0.8))
            knobs.append({"knob": "rollout_fragment_length", "current": self.fragment or int(steps_per_call),
                          "value": fit, "why": "a fragment the slow runner finishes within the timeout"})
        reached = (f"; {int(trained):,} steps reached training in all" if trained is not None else "")
        # which runners the learner trains on: the others' (those on time), or, when every runner
        # it heard of was late, the few late calls that did make it (none at all where none did)
        on_time = [k for k, v in (runners or {}).items() if isinstance(v, dict) and not v.get("late")]
        trains_on = ("the learner trains on the runners that keep the timeout alone" if on_time else
                     "no runner keeps the timeout: nothing reached training" if trained == 0 else
                     "no runner keeps the timeout: the learner trains on the calls that happened to finish in time")
        return Event(C.RUNNER_SAMPLES_DISCARDED, (
            "RLlib discarded late sample() results (fault_tolerance/num_env_runners_dropped_lifetime "
            f"{int(dropped)}, up to iteration {iteration}): " + "; ".join(parts)
            + (f": {share:.0%} of the {int(whole):,} steps sampled never reached training" if share is not None
               else "") + reached + f"; {trains_on}; try "
            + " or ".join(f"config.env_runners({k['knob']}={k['value']})" for k in knobs)),
            {"runners": {str(k): v for k, v in late.items()}, "sample_timeout_s": timeout, "wasted_share": share,
             "steps_sampled": sampled, "steps_thrown_away": thrown, "steps_trained_lifetime": trained,
             "dropped_lifetime": dropped, "knobs": knobs}, iteration=iteration)


def _number(v: Any) -> float | None:
    try:
        return None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None


def _config_number(config: Any, name: str) -> int | None:
    v = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    try:
        return int(v) if v not in (None, "auto") else None
    except (TypeError, ValueError):
        return None

#: iterations in a row with no new env step before NO_SAMPLES
NO_SAMPLES_ITERS = 3
#: RLlib's default ``sample_timeout_s``: how long it waits for one sample() call
RLLIB_SAMPLE_TIMEOUT_S = 60.0


def _lifetime(result: dict) -> int | None:
    for v in (result.get("num_env_steps_sampled_lifetime"),
              (result.get("env_runners") or {}).get("num_env_steps_sampled_lifetime")):
        try:
            if v is not None:
                return int(v)
        except (TypeError, ValueError):
            continue
    return None


def _sampled_now(result: dict) -> bool:
    """This iteration's own env steps (the first iteration's lifetime count may be a restored
    checkpoint's)."""
    try:
        return int((result.get("env_runners") or {}).get("num_env_steps_sampled") or 0) > 0
    except (TypeError, ValueError):
        return False


def _sample_timeout(config: Any) -> float:
    v = config.get("sample_timeout_s", RLLIB_SAMPLE_TIMEOUT_S) if isinstance(config, dict) else \
        getattr(config, "sample_timeout_s", RLLIB_SAMPLE_TIMEOUT_S)
    try:
        return float(v) if v is not None else RLLIB_SAMPLE_TIMEOUT_S
    except (TypeError, ValueError):
        return RLLIB_SAMPLE_TIMEOUT_S


class NoSamples:
    """Counts iterations in a row whose lifetime env-step count did not move; one finding
    per streak, re-armed when steps arrive again.

    A run's start is not a streak: until its runners' first steps arrive, an empty iteration
    counts only once this run's iterations have lasted ``sample_timeout_s`` (RLlib's own
    patience with one ``sample()`` call; its default 60 s when unset). An asynchronous
    algorithm with short iterations (APPO's ``min_time_s_per_iteration=2``) returns several
    empty ones while its first runner builds its env and module on a busy machine; a runner
    that never samples is still named, once RLlib itself would call its call late. A
    restored run (lifetime steps > 0 from its checkpoint) starts the same way. A streak, too,
    is named once its iterations have lasted ``sample_timeout_s``: a synchronous algorithm's
    empty iteration waits that long by itself, while an asynchronous one's 2 s iterations may
    return empty a few times in a row while its runner syncs weights on a busy machine
    (measured: IMPALA, 3 empty iterations of 2 s, sampling again at the next)."""

    def __init__(self, config: Any = None, iters: int = NO_SAMPLES_ITERS, first_call_s: float = 0.0) -> None:
        self.iters = iters
        self.timeout_s = _sample_timeout(config)
        self.first_call_s = first_call_s   # the start's grace while no runner has returned a sample()
        self.dropped_first: Any = None     # RLlib's drop counter at the first result
        self.started = False      # steps arrived in this run
        self.elapsed_s = 0.0      # this run's iterations' time so far
        self.last: int | None = None
        self.streak = 0
        self.streak_s: float | None = 0.0   # the streak's iterations' time (None: a result without it)
        self.dropped_at_start: float | None = None
        self.prev_dropped: float | None = None    # the count before this iteration
        self.reported = False

    def add(self, result: dict, iteration: int, runners: dict | None = None) -> list[Event]:
        """``runners``: each runner's own sample() timing (:class:`SampleTimes`), to name the
        late ones when nothing arrives."""
        steps = _lifetime(result)
        ft = result.get("fault_tolerance") or {}
        dropped = ft.get("num_env_runners_dropped_lifetime")
        try:
            took: float | None = max(0.0, float(result["time_this_iter_s"]))
        except (KeyError, TypeError, ValueError):
            took = None      # a result without its time: the streak is judged by its length alone
        self.elapsed_s += took or 0.0
        if steps is None:
            return []
        # the first result counts too when it holds no step at all (a runner hung from its start:
        # RLlib's first three empty iterations were not a streak of three)
        empty = steps <= self.last if self.last is not None else (steps == 0 and not _sampled_now(result))
        if (self.last is not None and not empty) or _sampled_now(result):
            self.started = True
        if self.dropped_first is None:   # a fresh run's counter starts at 0, a restored one's where it was
            self.dropped_first = 0 if steps == 0 else dropped
        if empty and (self.started or self.elapsed_s > self._start_grace(runners, dropped)):
            if self.streak == 0:   # the drops of this iteration count: from the count before it
                # a run that never sampled: its whole time so far is the streak's
                self.dropped_at_start = self.prev_dropped
                self.streak_s = 0.0 if self.started else self.elapsed_s - (took or 0.0)
            self.streak += 1
            self.streak_s = self.streak_s + took if took is not None and self.streak_s is not None else None
        elif not empty:
            self.streak, self.reported = 0, False
        self.last, self.prev_dropped = steps, dropped
        if self.streak < self.iters or (self.streak_s is not None and self.streak_s < self.timeout_s) \
                or self.reported:
            return []
        self.reported = True
        return [self._finding(iteration, dropped, ft, runners or {})]

    def _start_grace(self, runners: dict | None, dropped: Any) -> float:
        """Before a run's first steps: ``sample_timeout_s``; ``first_call_s`` when longer, no
        runner has returned from a sample() call yet and RLlib has left none out -- each
        runner is still inside its first call, where the liveness watch names a hang
        (WORKER_STALLED) or an actor's slow start (SLOW_START: IMPALA's runners wait for
        RLlib's EnvRunnerStateServer, 108 s measured on a loaded 2-core machine). A call RLlib
        left out (a synchronous algorithm's sample_timeout_s) is the empty iterations' cause:
        the short grace then."""
        returned = any(isinstance(v, dict) and (v.get("calls") or 0) > 0 for v in (runners or {}).values())
        try:
            left_out = float(dropped) > float(self.dropped_first)
        except (TypeError, ValueError):
            left_out = False
        return self.timeout_s if returned or left_out else max(self.timeout_s, self.first_call_s)

    def _finding(self, iteration: int, dropped: Any, ft: dict, runners: dict) -> Event:
        why = []
        if not self.started and not any(isinstance(v, dict) and (v.get("calls") or 0) > 0 for v in runners.values()):
            why.append("no EnvRunner has returned from a sample() call yet")
        late = sorted((int(k), v) for k, v in runners.items() if isinstance(v, dict) and v.get("late"))
        if late:
            why.append("every late runner's sample() outlasts sample_timeout_s: " + ", ".join(
                f"EnvRunner {k} (median {v.get('median_s') or 0:.2f} s against {v.get('timeout_s')} s)"
                for k, v in late))
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
