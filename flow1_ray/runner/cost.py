"""flow1's own CPU inside one EnvRunner, per feature, set against the runner's CPU per env step
without flow1: the account that says whether a live check pays its way.

Thread CPU time (``time.thread_time``), not wall time: on a machine whose cores the EnvRunners
fill, wall time counts the waits for a core, which are the machine's, not flow1's. Reading the
thread clock is a system call (~0.6 us, measured), dearer than the few attribute writes some
features do per step, so the per-step features are measured on a sample of their calls and
scaled (:class:`Sampled`); the per-``sample()`` ones on every call. What the measuring itself
costs is taken out: each measured interval holds one clock read, whose own time
(:func:`clock_cost`, the least of many back-to-back reads) is subtracted.

The features (each its own line in the account):

- ``liveness``: the vector step's wrapper (stall clock, progress stamp, step count and time);
  measured on one vector step in LIVENESS_EVERY;
- ``watchdog``: the lock file's watchdog thread (heartbeat writes, stall checks), its own
  thread's CPU;
- ``checks``: the live contract checks of the checked episodes (per step and reset) and their
  judgements; per-step measured on one checked step in CHECKS_EVERY;
- ``scan``: the scan of every sampled step after ``sample()`` (NaN, bounds);
- ``states``: the state sampling for the clusterer;
- ``sends``: the fire-and-forget calls to the hub;
- ``hooks``: the rest of flow1's work after each ``sample()`` (holding small samples, timing);
- ``alloc_sites``: the allocation-site windows of a runner whose RSS grows (runner/alloc_sites.py):
  their snapshots and grouping, and the runner's extra CPU while tracemalloc traces (4-5x its
  CPU a step for the window's ~5 s: ~4 s of the runner's sampling a window, at most one every
  30 minutes, none while the RSS stays flat; its 1 % budget is met by a run of ~7 minutes or more);
- ``flight``: the flight recorder's row per vector step (runner/flight.py) and its reset
  records; the row measured on one vector step in FLIGHT_EVERY;
- ``pipeline``: the PIPELINE windows (runner/pipe_watch.py): the tap's recording inside
  ``sample()`` (measured on every recorded call) and the judging after it.

The runner's own CPU is the sampling thread's CPU inside ``sample()``, less flow1's part of it;
the account's figure for a feature is its CPU per env step as a share of that.
"""

from __future__ import annotations

import resource
import time
from typing import Any

FEATURES = ("liveness", "watchdog", "checks", "scan", "states", "sends", "hooks", "alloc_sites", "flight", "pipeline")
#: each feature's budget: its CPU per env step as a share of the runner's own CPU per step (on
#: CartPole, the cheapest env there is: any heavier env makes every share smaller). Measured
#: (scripts/bench_runner_overhead.py, docs/benchmarks): the liveness wrapper ~3.9 us a step in
#: place (cold caches after the env's step: 1.2 us in a tight loop), 0.5 % of PPO CartPole's
#: 720 us; the checks are held near check_budget (1 % of sample()'s wall time) by the adaptive
#: rate, a little more of the runner's CPU on a vectorised env (1.08 % with 16 sub-envs)
BUDGETS = {"liveness": 0.015, "watchdog": 0.005, "checks": 0.015, "scan": 0.005, "states": 0.005,
           "sends": 0.002, "hooks": 0.005, "alloc_sites": 0.01, "flight": 0.01, "pipeline": 0.005}
#: the account opens after a runner's first this many env steps: what a run pays once (the
#: first episodes always checked, the state sampler's first batch building its encoders, the
#: first sends) is not a cost per step (measured: the state sampling's first calls were 18 us
#: a step over a 4,000-step account, 0.2 us after)
WARMUP_STEPS = 2000
#: one vector step in this many has its liveness wrapper measured
LIVENESS_EVERY = 64
#: one checked step in this many has its checks measured
CHECKS_EVERY = 8
#: one vector step in this many has its flight-recorder row measured
FLIGHT_EVERY = 64

thread_time = time.thread_time


def clock_cost(n: int = 200) -> float:
    """The least time between two back-to-back thread-clock reads: what one read adds to a
    measured interval."""
    best = float("inf")
    for _ in range(n):
        a = thread_time()
        best = min(best, thread_time() - a)
    return best


class Sampled:
    """A per-call feature measured on one call in ``every``: ``due()`` says whether this call
    is measured; ``add(cpu_s)`` books a measured call. Its total is the mean measured call
    times the calls made; a measured call a garbage collection ran inside is left out by the
    caller (the collection is the process's heap, not the feature's: one of ~100 us in a
    1 us wrapper, scaled by ``every``, was most of the first figures)."""

    __slots__ = ("every", "n", "sum", "k")

    def __init__(self, every: int) -> None:
        self.every = max(1, int(every))
        self.n = 0
        self.sum = 0.0
        self.k = 0

    def due(self) -> bool:
        self.n += 1
        return self.n % self.every == 0

    def reset(self) -> None:
        """Empty, in place (the step wrappers hold this object's ``due``)."""
        self.n, self.sum, self.k = 0, 0.0, 0

    def add(self, cpu_s: float) -> None:
        self.sum += max(0.0, cpu_s)
        self.k += 1

    def total(self) -> float:
        return self.sum / self.k * self.n if self.k else 0.0


class CostAccount:
    """One runner's account: CPU seconds per feature, the sampling thread's CPU inside
    ``sample()`` and the env steps it took."""

    def __init__(self, warmup_steps: int = WARMUP_STEPS) -> None:
        self.read_s = clock_cost()
        self.warmup_steps = warmup_steps
        self.warm = 0              # env steps before the account opened
        self.open = warmup_steps <= 0
        self._reset()

    def _reset(self) -> None:
        self.cpu = dict.fromkeys(FEATURES, 0.0)
        self.runner_s = 0.0        # the sampling thread's CPU inside sample(), flow1's part included
        self.steps = 0
        if not hasattr(self, "liveness"):
            self.liveness = Sampled(LIVENESS_EVERY)
            self.checks = Sampled(CHECKS_EVERY)
            self.flight = Sampled(FLIGHT_EVERY)
        self.liveness.reset()
        self.checks.reset()
        self.flight.reset()
        self.watchdog_from = None  # the watchdog's CPU when the account opened

    def add(self, feature: str, cpu_s: float) -> None:
        """Book ``cpu_s`` measured with one clock read inside it (taken out)."""
        self.cpu[feature] += max(0.0, cpu_s - self.read_s)

    def sampled(self, cpu_s: float, steps: int) -> None:
        """One sample() call: its thread CPU (flow1's after-sample work included) and steps.
        Before the account opens, only its steps count towards the warm-up."""
        if not self.open:
            self.warm += max(0, int(steps))
            if self.warm >= self.warmup_steps:
                self.open = True
                self._reset()
            return
        self.runner_s += max(0.0, cpu_s)
        self.steps += max(0, int(steps))

    def watchdog(self, total_s: float) -> None:
        """The watchdog thread's CPU so far: its part since the account opened is booked."""
        if not self.open:
            return
        if self.watchdog_from is None:
            self.watchdog_from = total_s
        self.cpu["watchdog"] = max(0.0, total_s - self.watchdog_from)

    def as_dict(self) -> dict[str, Any]:
        cpu = {**self.cpu, "liveness": self.cpu["liveness"] + self.liveness.total(),
               "checks": self.cpu["checks"] + self.checks.total(), "flight": self.cpu["flight"] + self.flight.total()}
        return {"runner_cpu_s": round(self.runner_s, 4), "steps": self.steps, "warmup_steps": self.warm,
                "features_cpu_s": {k: round(v, 6) for k, v in cpu.items()}}


def account(runners: list[dict]) -> dict[str, Any] | None:
    """The run's account from its runners' :meth:`CostAccount.as_dict` (as the hub last heard
    them): flow1's CPU per env step per feature, each as a share of the runners' own CPU per
    step without flow1 (the watchdog, a thread of its own, is not in the sampling thread's
    CPU; every other feature is, and is taken out of it), and the total; None before any step."""
    steps = sum(int(r.get("steps") or 0) for r in runners)
    if steps <= 0:
        return None
    cpu = dict.fromkeys(FEATURES, 0.0)
    runner_s = 0.0
    for r in runners:
        runner_s += float(r.get("runner_cpu_s") or 0.0)
        for k, v in (r.get("features_cpu_s") or {}).items():
            if k in cpu:
                cpu[k] += float(v)
    own = runner_s - sum(v for k, v in cpu.items() if k != "watchdog")
    if own <= 0:
        return None
    features = {k: {"us_per_step": round(v / steps * 1e6, 3), "share": round(v / own, 5), "budget": BUDGETS[k]}
                for k, v in cpu.items()}
    return {"steps": steps, "runner_us_per_step": round(own / steps * 1e6, 2),
            "flow1_share": round(sum(cpu.values()) / own, 5), "features": features,
            "over_budget": sorted(k for k, f in features.items() if f["share"] > f["budget"])}


class ProcessCpu:
    """The CPU of the process it lives in, all its threads, per 1,000 env steps of the run: in
    the hub, flow1's actors' share of a run (the Recorder, the monitor, its node's probe, the
    clusterer and the heatmaps when they run on CPU there). Counted from the run's first
    metrics row (:meth:`mark` with the run's env steps), so that the process's start (imports,
    Arrow's warm-up) is stated apart, paid once. Not in it: the node probes of other nodes and a
    clusterer on a GPU (actors of their own)."""

    def __init__(self) -> None:
        self.start_cpu_s = self._cpu()
        self.first: tuple[float, float] | None = None
        self.last: tuple[float, float] | None = None

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def mark(self, env_steps: Any) -> None:
        if not isinstance(env_steps, (int, float)) or env_steps != env_steps:
            return
        point = (self._cpu(), float(env_steps))
        if self.first is None:
            self.first = point
        self.last = point

    def as_dict(self) -> dict | None:
        if self.first is None or self.last is None or self.last[1] <= self.first[1]:
            return None
        cpu, steps = self.last[0] - self.first[0], self.last[1] - self.first[1]
        return {"cpu_s": round(cpu, 3), "steps": int(steps), "cpu_s_per_1000_steps": round(cpu / steps * 1e3, 4),
                "at_start_cpu_s": round(self.first[0], 2)}
