"""How many episodes a runner contract-checks: a share held under a budget of its time.

The live checks judge every step of a checked episode in Python (dtype, shape, info,
aliasing, bounds...), ~10-30 us a step; a CartPole sub-env steps in ~5 us and RLlib spends
~100 us per env step around it. At the default share (``sample_rate`` 0.1) that was 2-3 %
of a fast vectorised runner's time, and nothing on an env whose own step costs a
millisecond. So the share adapts: every second of ``sample()`` time, the checks' own time is
compared with ``check_budget`` (a share of the sampling time, default 1 %) and the rate is
scaled to meet it, never above ``sample_rate`` and never below ``min_sample_rate``. What a
lower rate costs is a rare fault found later; the always-on parts (liveness, crashes, the
whole-sample NaN scan of :mod:`flow1_ray.checks.sample_scan`) do not depend on it. The rate
in force and its lowest value are reported with the runner's sample timing.
"""

from __future__ import annotations

from .. import codes as C
from ..checks.findings import Finding
from ..checks.rule import Rule

RULES = (
    Rule("CHECK_RATE_LOWERED", C.FLOW1, C.PASS,
         "a runner's live contract checks would take more than check_budget of its sample() time at sample_rate: "
         "the share of checked episodes was lowered (said once per runner, when it first falls below half of "
         "sample_rate; the scan of every sampled step and crash detection are unaffected)",
         evidence=("check_rate", "sample_rate", "check_budget", "share_at_sample_rate")),
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
