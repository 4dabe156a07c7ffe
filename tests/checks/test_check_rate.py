"""The runner's cost tiers: the vector step carries liveness, unchecked episodes step with
nothing of flow1's around them, the checked share follows a time budget, and the scan of
every sampled step finds a one-off NaN whatever that share is. Real SingleAgentEnvRunners
in this process."""

from __future__ import annotations

import time

import pytest

from flow1_ray.checks.own.budgets import JUDGE_AFTER_S, CheckBudget


def test_budget_scales_the_rate_to_the_checks_cost():
    b = CheckBudget(rate=0.5, budget=0.01, floor=0.02)
    b.spent_s = 0.05                        # 5 % of a second of sampling
    b.sampled(JUDGE_AFTER_S)
    assert b.rate == pytest.approx(0.1)     # scaled to the 1 % budget
    b.spent_s = 0.5
    b.sampled(JUDGE_AFTER_S)
    assert b.rate == 0.02 and b.lowest == 0.02   # never below the floor
    for _ in range(10):                     # cheap again: back up, at most 2x a second, capped at the most
        b.spent_s = 0.0001
        b.sampled(JUDGE_AFTER_S)
    assert b.rate == 0.5 and b.lowest == 0.02
    fixed = CheckBudget(rate=1.0, budget=0.0)
    fixed.spent_s = 0.9
    fixed.sampled(10.0)
    assert fixed.rate == 1.0                # budget 0: the rate is held


