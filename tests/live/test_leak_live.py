"""A runner whose env keeps every observation: MEMORY_LEAK_SUSPECTED on a real PPO run, naming
the env's line that keeps it, found by the runner's own allocation-site window (tracemalloc,
opened when its RSS grew) and the hub's RSS trend. The trend's first minute is shortened by its
threshold (``leak_min_seconds``) so the run takes seconds, not minutes; nothing else is."""

from __future__ import annotations

import json

import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C
from test_rllib_callbacks import Run

pytestmark = pytest.mark.slow


def test_an_env_that_keeps_every_observation_is_the_envs_leak_named_at_its_line(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    from leaky_envs import KeepsEveryObservation

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path / "runs"), print_events=False, state_actions=False,
                                     thresholds={"leak_min_seconds": 5.0})
    config = (PPOConfig().environment(KeepsEveryObservation, env_config={"pad": 1000})   # ~8 KB a step
              .callbacks(cb)
              .env_runners(num_env_runners=1, sample_timeout_s=60)
              .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=1))
    algo = config.build_algo()
    try:
        run = Run(algo.train())
        evs = run.wait_events(lambda e: any(x["code"] in (C.MEMORY_LEAK_SUSPECTED, C.MEMORY_GROWTH_NOT_ENV)
                                            for x in e), timeout=150, algo=algo)
        (leak,) = [e for e in evs if e["code"] in (C.MEMORY_LEAK_SUSPECTED, C.MEMORY_GROWTH_NOT_ENV)]
        ev = json.loads(leak["evidence"])
        assert leak["code"] == C.MEMORY_LEAK_SUSPECTED and leak["status"] == C.WARN, leak["message"]
        assert ev["owner"] == "env" and ev["site"].endswith("leaky_envs.py:46"), ev
        assert "it grows in the env's code: envs/leaky_envs.py:46" in leak["message"], leak["message"]
        sites = ev["sites"]
        assert sites["grown"]["env"] > 5 * sites["grown"]["framework"], sites
        assert 0 < sites["steps_per_s"] and sites["steps_per_s_before"] > 0, sites
    finally:
        algo.stop()
