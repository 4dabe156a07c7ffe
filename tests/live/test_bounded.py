"""flow1's own costs stay bounded for the whole run, on RLlib's own example envs: an env
that RLlib recreates after each crash neither grows flow1's state nor floods the run with
rows; iterations that sample nothing, and an ``algo.stop()`` that never returns, are said."""

from __future__ import annotations

import json
import os
import threading
import time

import gymnasium as gym
import pytest

from flow1_ray import Flow1Callbacks, load_events
from flow1_ray.common import codes as C
from flow1_ray.checks.run.sampling import NoSamples
from test_rllib_callbacks import Run

pytestmark = pytest.mark.slow


def _checkers(er) -> list[int]:
    return [len(a.checkers) for cb in er._callbacks for a in getattr(cb, "_agents", {}).values()]


def test_a_crashing_env_recreated_by_rllib_is_one_incident_and_no_leak(ray_session, tmp_path):
    """RLlib's CartPoleCrashing raising on 5 % of its steps, ``restart_failed_sub_environments``:
    RLlib rebuilds the vector env after each crash (and samples that fragment again). flow1
    keeps one checker per live sub-env (not one per env ever made), one ENV_CRASHED FAIL for
    the repeated crash and a number of PASS count rows logarithmic in the crashes."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.examples.envs.classes.cartpole_crashing import CartPoleCrashing

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     sample_rate=1.0, check_budget=0.0)
    config = (PPOConfig().environment(CartPoleCrashing, env_config={"p_crash": 0.05}).callbacks(cb)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=25,
                           sample_timeout_s=30)
              .fault_tolerance(restart_failed_sub_environments=True)
              .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1))
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        (checkers,) = algo.env_runner_group.foreach_env_runner(_checkers, local_env_runner=False,
                                                                timeout_seconds=10)
        events = Run(results[-1]).events()
    finally:
        algo.stop()
    assert checkers == [2], checkers
    crashed = [e for e in events if e["code"] == C.ENV_CRASHED]
    fails = [e for e in crashed if e["status"] == C.FAIL]
    counts = [json.loads(e["evidence"])["count"] for e in crashed if e["status"] == C.PASS]
    assert len(fails) == 1 and "EnvError" in fails[0]["message"], [e["message"][:120] for e in fails]
    assert counts and counts == sorted(counts) and counts[-1] >= 8, counts   # ~30 crashes expected in >= 600 steps; fewer than 8: p < 1e-5
    assert len(crashed) <= 2 + counts[-1].bit_length(), len(crashed)   # log2 of the crashes, not one per crash
    assert not [e for e in events if e["code"] in (C.MEMORY_LEAK_SUSPECTED, C.FLOW1_INTERNAL)]


def test_no_samples_rule_on_result_dicts():
    rule = NoSamples(iters=3)
    found = []
    steps = [100, 200, 200, 200, 200, 200, 300, 300, 300, 300]
    for i, s in enumerate(steps, 1):
        found += rule.add({"num_env_steps_sampled_lifetime": s,
                           "fault_tolerance": {"num_env_runners_dropped_lifetime": 2 * i, "num_healthy_workers": 1}}, i)
    assert [e.iteration for e in found] == [5, 10]   # one per streak of 3 empty iterations
    assert "3 iterations in a row sampled 0 env steps" in found[0].message
    assert "RLlib left out 6 late sample() call(s)" in found[0].message
    assert rule.add({}, 11) == []   # a result without the key is not a claim


class _BlockedCartPole(gym.Wrapper):
    """CartPole whose step blocks while the file ``block`` exists (a simulator that stopped
    answering, until it answers again)."""

    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))
        self.block = (config or {}).get("block", "")

    def step(self, action):
        while self.block and os.path.exists(self.block):
            time.sleep(0.05)
        return self.env.step(action)


def test_iterations_that_sample_nothing_and_a_stop_that_blocks_are_named(ray_session, tmp_path):
    """The only runner's env blocks and sample_timeout_s is 1 s: RLlib leaves each sample()
    out and trains on nothing, every iteration (NO_SAMPLES); its stop() then waits for the
    step in flight longer than stop_timeout_s (STOP_STALLED, with the stack), until the env
    answers again."""
    from ray.rllib.algorithms.ppo import PPOConfig

    block = tmp_path / "block"
    block.write_text("")
    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     stop_timeout_s=1.0, learner_tracing=False)
    config = (PPOConfig().environment(_BlockedCartPole, env_config={"block": str(block)}).callbacks(cb)
              .env_runners(num_env_runners=1, sample_timeout_s=1.0, rollout_fragment_length=50)
              .fault_tolerance(restart_failed_env_runners=False)
              .training(train_batch_size_per_learner=50, minibatch_size=50, num_epochs=1))
    config.sync_filters_on_rollout_workers_timeout_s = 1.0
    algo = config.build_algo()
    unblock = threading.Timer(4.0, block.unlink)
    try:
        results = [algo.train() for _ in range(4)]
        run = Run(results[-1])
    finally:
        unblock.start()   # the env answers again 4 s into stop(): stop() returns then
        algo.stop()
    events = load_events(run.dir).to_pylist()
    (nothing,) = [e for e in events if e["code"] == C.NO_SAMPLES]
    assert nothing["status"] == C.WARN and "sampled 0 env steps" in nothing["message"], nothing
    (stop,) = [e for e in events if e["code"] == C.STOP_STALLED]
    assert "algo.stop() has not returned" in stop["message"] and json.loads(stop["evidence"])["stack"]
