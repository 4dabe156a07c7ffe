"""flow1's CPU account inside a runner (flow1_ray/runner/cost.py): the arithmetic of the run's
account from its runners' parts, and the thread clock it reads, on real CPU work."""

from __future__ import annotations

import time

import pytest

from flow1_ray.runner.cost import BUDGETS, FEATURES, CostAccount, Sampled, account, clock_cost, thread_time


def test_the_account_sets_each_feature_against_the_runners_cpu_without_flow1():
    parts = [{"runner_cpu_s": 1.0, "steps": 10_000,
              "features_cpu_s": {"liveness": 0.004, "watchdog": 0.002, "checks": 0.006, "scan": 0.0,
                                 "states": 0.0, "sends": 0.0, "hooks": 0.0, "alloc_sites": 0.0}},
             {"runner_cpu_s": 1.0, "steps": 10_000, "features_cpu_s": dict.fromkeys(FEATURES, 0.0)}]
    acc = account(parts)
    # the runners' own CPU: 2.0 s less flow1's part of the sampling thread (the watchdog is another thread)
    own = 2.0 - 0.010
    assert acc["runner_us_per_step"] == pytest.approx(own / 20_000 * 1e6, abs=0.01)
    assert acc["features"]["checks"]["share"] == pytest.approx(0.006 / own, abs=1e-5)
    assert acc["features"]["watchdog"]["us_per_step"] == pytest.approx(0.1)
    assert acc["flow1_share"] == pytest.approx(0.012 / own, abs=1e-5)
    assert acc["over_budget"] == [] and set(acc["features"]) == set(BUDGETS)
    over = account([{**parts[0], "features_cpu_s": {**parts[0]["features_cpu_s"], "sends": 0.01}}])
    assert over["over_budget"] == ["sends"]
    assert account([]) is None and account([{"runner_cpu_s": 0.0, "steps": 0}]) is None


def test_a_sampled_feature_is_measured_on_one_call_in_every():
    s = Sampled(8)
    assert [s.due() for _ in range(16)].count(True) == 2


def test_the_thread_clock_counts_this_threads_work_and_the_reads_own_cost_is_taken_out():
    read = clock_cost()
    assert 0.0 <= read < 1e-3
    acct = CostAccount(warmup_steps=0)
    c0 = thread_time()
    total = sum(i * i for i in range(200_000))   # real CPU work on this thread
    acct.add("scan", thread_time() - c0)
    assert total > 0 and acct.cpu["scan"] > 0.0
    acct.add("hooks", 0.0)   # an interval shorter than one read books nothing, never less than nothing
    assert acct.cpu["hooks"] == 0.0
    acct.sampled(0.5, 1000)
    assert acct.as_dict()["steps"] == 1000 and acct.as_dict()["runner_cpu_s"] == 0.5


def test_the_account_opens_after_the_warm_up_and_books_nothing_of_it():
    acct = CostAccount(warmup_steps=2000)
    acct.add("states", 0.07)          # a first batch building its encoders: paid once
    acct.watchdog(0.5)
    acct.sampled(1.0, 1500)
    assert not acct.open and acct.as_dict()["steps"] == 0
    acct.sampled(1.0, 600)            # the warm-up ends with this call: the account opens empty
    assert acct.open and acct.as_dict()["features_cpu_s"]["states"] == 0.0
    acct.watchdog(0.6)                # its CPU from here on
    acct.watchdog(0.7)
    acct.sampled(0.2, 1000)
    d = acct.as_dict()
    assert (d["steps"], d["runner_cpu_s"], d["warmup_steps"]) == (1000, 0.2, 2100)
    assert d["features_cpu_s"]["watchdog"] == pytest.approx(0.1)


def test_a_process_cpu_is_counted_per_1000_env_steps_from_the_first_mark():
    """The hub's CPU (all its threads) between the first and the last iteration's row, per
    1,000 env steps; what came before the first row is its start, stated apart."""
    from flow1_ray.runner.cost import ProcessCpu

    pc = ProcessCpu()
    assert pc.as_dict() is None
    pc.mark(1000)
    assert pc.as_dict() is None                    # one row: nothing counted yet
    end = time.process_time() + 0.2
    while time.process_time() < end:              # 0.2 s of this process's CPU
        pass
    pc.mark(3000)
    pc.mark(float("nan"))                         # not a count: ignored
    d = pc.as_dict()
    assert d["steps"] == 2000 and 0.19 <= d["cpu_s"] <= 1.0, d
    assert d["cpu_s_per_1000_steps"] == pytest.approx(d["cpu_s"] / 2, rel=1e-3) and d["at_start_cpu_s"] > 0
