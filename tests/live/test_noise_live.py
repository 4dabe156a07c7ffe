"""The live half of ``tests/checks/test_noise.py`` (real Ray and RLlib runs). Noise is not a
signal: on an env whose rewards are noise by design there is nothing to learn, and the return
and KL rules must know it (the return's chance movement measured from the spread of the episodes
RLlib averages); a finding that fires again is one row with a count."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray import Flow1Callbacks, load_events
from flow1_ray.common import codes as C

PPO = {"algo_class": "PPO", "lr": 5e-5, "clip_param": 0.3, "num_epochs": 3}


class NoiseEnv(gym.Env):
    """RLlib's RandomEnv (rewards uniform in [-1, 1], p_terminated 0.1) with a float reward and a
    Box observation: nothing here can be learnt, by design."""

    def __init__(self, config=None):
        from ray.rllib.examples.envs.classes.random_env import RandomEnv

        self.env = RandomEnv({"observation_space": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
                              "action_space": gym.spaces.Discrete(2)})
        self.observation_space, self.action_space = self.env.observation_space, self.env.action_space

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), terminated, truncated, info


@pytest.mark.slow
def test_ppo_on_a_noise_env_is_silent(ray_session, tmp_path):
    """Measured on main before this (flow1 train, 40 iterations): REWARD_DROP, KL_TOO_LOW 8 times,
    CLIP_FRACTION 5 times; with the noise measured but before the critic's gate, VALUE_NOT_LEARNING.
    KL_TOO_LOW and CLIP_FRACTION fired from iteration 6 on."""
    from ray.rllib.algorithms.ppo import PPOConfig

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    config = (PPOConfig().environment(NoiseEnv).callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=600, minibatch_size=128, num_epochs=3))
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(9)]
    finally:
        algo.stop()
    events = load_events(Path(results[-1]["flow1"]["run_dir"])).to_pylist()
    loud = [(e["code"], e["message"][:200]) for e in events if e["status"] != C.PASS]
    assert loud == []
    for e in events:
        if e["code"] == C.KL_TOO_LOW:
            assert json.loads(e["evidence"])["nothing_to_learn"] is True
