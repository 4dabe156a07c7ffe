"""flow1's own CPU in the EnvRunners, per feature, on a real PPO CartPole run with flow1's
defaults (CartPole: the cheapest env there is, where every share is largest): each feature
within its budget (a share of the runners' own CPU per step, never an absolute time), in
``result["flow1"]`` and in the report. Shares of thread CPU time hold on a loaded machine:
numerator and denominator are both the runner thread's own CPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.runner.cost import BUDGETS, FEATURES

pytestmark = pytest.mark.slow


def test_every_feature_of_flow1_in_the_runners_stays_within_its_cpu_budget(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb)
            .env_runners(num_env_runners=2, sample_timeout_s=30)
            .training(train_batch_size_per_learner=2000, minibatch_size=500, num_epochs=1)).build_algo()
    try:
        results = [algo.train() for _ in range(5)]
        time.sleep(2.5)    # each runner sends its account every 2 s: the last one reaches the hub
        results.append(algo.train())
    finally:
        algo.stop()
    cost = results[-1]["flow1"]["runner_cost"]["cpu"]
    # 12,000 steps on 2 runners, the first 2,000 of each its warm-up: the account's steps are the rest
    assert cost and set(cost["features"]) == set(FEATURES) and cost["steps"] >= 4000, cost
    assert cost["runner_us_per_step"] > 0 and 0 < cost["flow1_share"] < sum(BUDGETS.values()), cost
    assert cost["over_budget"] == [], [(k, f) for k, f in cost["features"].items() if k in cost["over_budget"]]
    assert all(f["us_per_step"] > 0 for k, f in cost["features"].items() if k in ("liveness", "watchdog", "checks",
                                                                                     "scan", "hooks")), cost
    # flow1's hub: its CPU per 1,000 env steps from the first iteration's row on, its start apart
    hub = results[-1]["flow1"]["runner_cost"]["hub_cpu"]
    assert hub and hub["steps"] >= 8000 and hub["cpu_s_per_1000_steps"] > 0 and hub["at_start_cpu_s"] > 0, hub
    # the report of the run directory (flow1 report) shows the account the Recorder wrote at the stop
    from flow1_ray.report.rundir import load_run_report

    text = load_run_report(Path(results[-1]["flow1"]["run_dir"])).to_markdown()
    assert "## flow1's own cost" in text and "| liveness |" in text, text[-1500:]
    assert "flow1's hub: " in text and " s of CPU per 1,000 env steps over " in text, text[-1500:]
