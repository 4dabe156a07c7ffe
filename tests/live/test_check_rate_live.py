"""The live half of ``tests/checks/test_check_rate.py`` (real Ray and RLlib runs). The runner's
cost tiers: the vector step carries liveness, unchecked episodes step with nothing of flow1's
around them, the checked share follows a time budget, and the scan of every sampled step finds a
one-off NaN whatever that share is. Real SingleAgentEnvRunners in this process."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C
from flow1_ray.checks.own.budgets import JUDGE_AFTER_S


class Counting(gym.Env):
    """CartPole-sized; counts its own step() calls (class-wide: one process); a NaN
    observation at global step ``nan_at`` and a NaN reward at ``nan_reward_at`` (once each)."""

    steps = 0
    observation_space = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        self.config = dict(config or {})
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        Counting.steps += 1
        self.t += 1
        obs = np.full(4, 0.1 * self.t, np.float32)
        reward = 1.0
        if Counting.steps == self.config.get("nan_at"):
            obs[2] = np.nan
        if Counting.steps == self.config.get("nan_reward_at"):
            reward = float("nan")
        if Counting.steps == self.config.get("raise_at"):
            raise FloatingPointError("planted")
        return obs, reward, self.t >= 20, False, {}


def _runner(tmp_path, env_config: dict, envs: int = 4, **opts):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False, **opts)
    config = (PPOConfig().environment(Counting, env_config=env_config).callbacks(cb).debugging(seed=0)
              .env_runners(num_envs_per_env_runner=envs))
    runner = SingleAgentEnvRunner(config=config, worker_index=1)
    (agent,) = [a for c in runner._callbacks for a in getattr(c, "_agents", {}).values()]
    return runner, agent


def _found(agent) -> dict[str, str]:
    return {f.code: f.message for f in agent.log._items.values()}


def test_vector_step_counts_sub_env_steps_and_leaves_unchecked_steps_bare(ray_session, tmp_path):
    runner, agent = _runner(tmp_path, {}, envs=4, sample_rate=0.0)
    try:
        Counting.steps = 0
        runner.sample(num_timesteps=400, random_actions=True)
        assert agent.liveness.steps == Counting.steps > 0   # NEXT_STEP autoreset: reset steps not counted
        assert all("step" not in vars(sub) for sub in runner.env.unwrapped.envs)
        assert agent.liveness.step_time_ema > 0
    finally:
        runner.stop()


def test_a_one_off_nan_is_found_with_no_episode_checked(ray_session, tmp_path):
    runner, agent = _runner(tmp_path, {"nan_at": 150, "nan_reward_at": 230}, sample_rate=0.0)
    try:
        Counting.steps = 0
        for _ in range(3):
            runner.sample(num_timesteps=200, random_actions=True)
        found = _found(agent)
        assert C.OBS_NAN_INF in found and "1 NaN and 0 inf" in found[C.OBS_NAN_INF], found
        assert "scan of every sampled step" in found[C.OBS_NAN_INF]
        assert C.REWARD_NAN in found, found
        assert agent.scan.steps >= 600
    finally:
        runner.stop()


def test_a_crash_in_a_checked_step_is_one_crash(ray_session, tmp_path):
    runner, agent = _runner(tmp_path, {"raise_at": 50}, sample_rate=1.0, check_budget=0.0)
    try:
        Counting.steps = 0
        with pytest.raises(Exception):
            runner.sample(num_timesteps=200, random_actions=True)
        ((count, *_),) = agent._crashes.values()
        assert count == 1
    finally:
        runner.stop()


def test_the_rate_falls_on_a_cheap_env_and_is_reported(ray_session, tmp_path):
    runner, agent = _runner(tmp_path, {}, envs=8, sample_rate=1.0, check_budget=0.005, min_sample_rate=0.05)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4 * JUDGE_AFTER_S:   # the rate is judged once per second of sampling
            runner.sample(num_timesteps=1000, random_actions=True)
        rates = agent.budget.as_dict()
        assert 0.05 <= rates["check_rate"] < 1.0 and rates["check_rate_lowest"] <= rates["check_rate"], rates
    finally:
        runner.stop()


def test_only_checkers_fed_since_their_last_judgement_are_judged_and_a_slow_judgement_spaces_the_next(
        ray_session, tmp_path):
    from flow1_ray.runner.agent import JUDGE_EVERY_S, JUDGE_SHARE
    from flow1_ray.runner.holding import HOLD_MAX_SAMPLE_STEPS

    runner, agent = _runner(tmp_path, {}, envs=4, sample_rate=0.0)   # only each sub-env's first episode is checked
    try:
        judged: list[int] = []
        for i, rc in enumerate(agent.checkers):
            def counted(rc=rc, i=i, judge=rc.judge):
                judged.append(i)
                time.sleep(0.005)             # a judgement over full windows takes milliseconds
                judge()
            rc.judge = counted
        runner.sample(num_timesteps=200, random_actions=True)   # every first episode (20 steps) checked and over
        agent._last_judge = -1e9
        runner.sample(num_timesteps=HOLD_MAX_SAMPLE_STEPS, random_actions=True)   # read at once (not held)
        assert sorted(judged) == [0, 1, 2, 3]
        # 4 x 5 ms = 20 ms of judging: the next judgement waits until it is JUDGE_SHARE of the time between
        assert agent._judge_every >= max(JUDGE_EVERY_S, 0.02 / JUDGE_SHARE) * 0.99
        judged.clear()
        agent._last_judge = -1e9
        runner.sample(num_timesteps=200, random_actions=True)   # no episode checked since: nothing to judge again
        assert judged == []
        assert agent._judge_every == JUDGE_EVERY_S
    finally:
        runner.stop()


def test_one_step_samples_are_held_read_together_and_every_step_is_scanned(ray_session, tmp_path):
    """DQN's and SAC's default: one step per sample() call. The calls' episodes are held and
    read together (at most HOLD_S later): the NaN of one step is found, every step is scanned
    once, and what is still held when the runner stops is read then."""
    from flow1_ray.runner.holding import HOLD_S

    runner, agent = _runner(tmp_path, {"nan_at": 30}, envs=1, sample_rate=0.0)
    try:
        Counting.steps = 0
        runner.sample(num_timesteps=1, random_actions=True)
        assert agent._held and agent.scan.steps == 0        # held, not read yet
        # on until the NaN's step has been held longer than HOLD_S (on a loaded machine its step
        # came late: a loop timed from the first step ended before its hold did, the CI's flake)
        t_nan, sampled = None, 1
        while sampled < 60 or t_nan is None or time.monotonic() - t_nan < 1.5 * HOLD_S:
            sampled += sum(len(e) for e in runner.sample(num_timesteps=1, random_actions=True))
            if t_nan is None and Counting.steps >= 30:
                t_nan = time.monotonic()
        found = _found(agent)
        assert C.OBS_NAN_INF in found and "episode of 1 sampled steps, at its step 1" in found[C.OBS_NAN_INF], found
        assert agent.scan.steps + agent._held_steps == sampled   # each step scanned once, or still held
    finally:
        runner.stop()
    assert agent._held == [] and agent.scan.steps == sampled    # read when the runner stopped
