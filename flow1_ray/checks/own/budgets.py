"""flow1 holding its own cost under a budget, and saying so when it does.

**The check rate** (:class:`CheckBudget`, one per EnvRunner). The live checks judge every
step of a checked episode in Python (dtype, shape, info, aliasing, bounds...), ~10-30 us a step; a CartPole sub-env steps in ~5 us and RLlib spends
~100 us per env step around it. At the default share (``sample_rate`` 0.1) that was 2-3 %
of a fast vectorised runner's time, and nothing on an env whose own step costs a
millisecond. So the share adapts: every second of ``sample()`` time, the checks' own time is
compared with ``check_budget`` (a share of the sampling time, default 1 %) and the rate is
scaled to meet it, never above ``sample_rate`` and never below ``min_sample_rate``. What a
lower rate costs is a rare fault found later; the always-on parts (liveness, crashes, the
whole-sample NaN scan of :mod:`flow1_ray.checks.env.sample_scan`) do not depend on it. The rate
in force and its lowest value are reported with the runner's sample timing.

**The snapshot cadence** (:class:`SnapshotBudget`, one per state clusterer): when the next
state snapshot may run, every ``heatmap_every`` iterations, held under a share of one core.
A snapshot clusters the window, judges it and draws its heatmap PNG: ~0.02-0.08 s of CPU
to cluster 1,000-5,000 states of 256 features, 0.2-0.4 s to draw (matplotlib's text, most
of it; measured on this project's 2-core machine). On Pong with 500-step batches an
iteration takes ~1 s, so a snapshot every 10 iterations took ~2.5 % of a core beside the
run. The cadence is therefore held under ``heatmap_budget`` (a share of one core, default
1 %): a request that comes sooner than the last snapshot's CPU time / ``heatmap_budget``
after it is skipped and its states stay in the window (a bounded uniform sample), so the
next snapshot judges them; none is lost, the heatmaps just come further apart. A request
that comes while the last round is still being computed is skipped too. The run's
last snapshot, at its close, is never skipped. Said once (HEATMAPS_SPACED), with the cost
and the spacing; ``heatmap_budget=0`` draws every ``heatmap_every`` iterations whatever it
costs. Pure: no Ray, no clock of its own (the caller passes ``now``).
"""

from __future__ import annotations

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule

RULES = (
    Rule("CHECK_RATE_LOWERED", C.FLOW1, C.PASS,
         "a runner's live contract checks would take more than check_budget of its sample() time at sample_rate: "
         "the share of checked episodes was lowered (said once per runner, when it first falls below half of "
         "sample_rate; the scan of every sampled step and crash detection are unaffected)",
         evidence=("check_rate", "sample_rate", "check_budget", "share_at_sample_rate")),
    Rule("HEATMAPS_SPACED", C.FLOW1, C.PASS,
         "the state snapshots (clustering and heatmap) would take more than heatmap_budget of a core at "
         "heatmap_every: later ones come further apart, their states kept for the next (said once per run)",
         evidence=("cost_s", "spacing_s", "heatmap_budget", "heatmap_every", "skipped")),
)

JUDGE_AFTER_S = 1.0   # seconds of sample() time between two adjustments of the rate
GROWTH = 2.0          # the most the rate rises at one adjustment (it falls at once)


class CheckBudget:
    def __init__(self, rate: float, budget: float = 0.01, floor: float = 0.01) -> None:
        self.max_rate = float(rate)
        self.rate = float(rate)
        self.budget = float(budget)
        self.floor = min(float(floor), self.max_rate)
        self.lowest = self.rate
        self.said: float | None = None   # the checks' share at max_rate, once the rate fell below half of it
        self.told = False
        self.spent_s = 0.0       # the checks' time since the last adjustment (added by the step path)
        self._sampled_s = 0.0
        self._spent_before_s = 0.0   # the checks' time before the last adjustment

    def sampled(self, seconds: float) -> None:
        """After each sample() call: adjust the rate once a second of sampling has passed."""
        self._sampled_s += seconds
        if self._sampled_s < JUDGE_AFTER_S or self.budget <= 0:
            return
        spent, self.spent_s = self.spent_s, 0.0
        self._spent_before_s += spent
        share, self._sampled_s = spent / self._sampled_s, 0.0
        if spent <= 0.0:
            return                 # no checked step in the window: nothing says what a step costs
        if share > self.budget:
            self.rate = max(self.floor, self.rate * self.budget / share)
        elif share < self.budget / GROWTH:
            self.rate = min(self.max_rate, self.rate * min(GROWTH, self.budget / share))
        self.lowest = min(self.lowest, self.rate)
        if self.said is None and self.rate < self.max_rate / 2:
            self.said = share * self.max_rate / self.rate    # what the checks would cost at sample_rate

    def lowered_finding(self, who: str) -> Finding | None:
        """CHECK_RATE_LOWERED, once: the first time the rate fell below half of its most."""
        if self.said is None or self.told:
            return None
        self.told = True
        return Finding(C.CHECK_RATE_LOWERED,
                       f"{who}live contract checks now on {self.rate:.1%} of episodes (sample_rate "
                       f"{self.max_rate:.0%}): at {self.max_rate:.0%} they would take {self.said:.1%} of this runner's "
                       f"sample() time, over check_budget {self.budget:.1%}; faults seen only by the checked "
                       f"episodes (dtypes, shapes, infos, bounds) are found later, the scan of every sampled step "
                       f"and crash detection are unaffected; check_budget=0 holds sample_rate",
                       {"check_rate": round(self.rate, 4), "sample_rate": self.max_rate, "check_budget": self.budget,
                        "share_at_sample_rate": round(self.said, 4)}, status=C.PASS)

    @property
    def checks_s(self) -> float:
        """The checks' own time so far (the checked steps and resets, the judgements)."""
        return self._spent_before_s + self.spent_s

    def as_dict(self) -> dict:
        return {"check_rate": round(self.rate, 4), "check_rate_lowest": round(self.lowest, 4),
                "check_rate_max": self.max_rate, "check_budget": self.budget, "checks_s": round(self.checks_s, 4)}



class SnapshotBudget:
    """The spacing of one clusterer's snapshots (all modules' snapshots of one request are one round)."""

    def __init__(self, budget: float = 0.01) -> None:
        self.budget = float(budget)
        self.last_at: float | None = None   # when the last round was queued
        self.cost_s = 0.0                   # the last round's CPU time, its heatmaps' drawing included
        self.skipped = 0
        self.told = False

    def spacing_s(self) -> float:
        """The least time between two rounds at the last round's cost (0: no limit)."""
        return self.cost_s / self.budget if self.budget > 0 else 0.0

    def due(self, now: float, computing: bool = False) -> bool:
        """Whether a round asked for at ``now`` may run (a skipped one is counted); with a
        budget, never while the last one is still ``computing`` (its cost is not known yet)."""
        if (self.budget > 0 and computing) or (self.last_at is not None and now - self.last_at < self.spacing_s()):
            self.skipped += 1
            return False
        return True

    def started(self, now: float) -> None:
        """A round was queued at ``now``: the next is spaced from here."""
        self.last_at = now

    def spaced_finding(self, heatmap_every: int | None = None) -> Finding | None:
        """HEATMAPS_SPACED, once: after the first skipped request."""
        if not self.skipped or self.told:
            return None
        self.told = True
        every = f"every {heatmap_every} iterations" if heatmap_every else "at each request"
        return Finding(C.HEATMAPS_SPACED,
                       f"state snapshots spaced: one (clustering and its heatmap) took {self.cost_s:.2f} s of CPU; "
                       f"held under heatmap_budget {self.budget:.0%} of a core, the next comes at least "
                       f"{self.spacing_s():.0f} s after the last instead of {every}; the states of a skipped "
                       f"snapshot are judged by the next, none is lost; heatmap_budget=0 draws {every}",
                       {"cost_s": round(self.cost_s, 3), "spacing_s": round(self.spacing_s(), 1),
                        "heatmap_budget": self.budget, "heatmap_every": heatmap_every, "skipped": self.skipped},
                       status=C.PASS)
