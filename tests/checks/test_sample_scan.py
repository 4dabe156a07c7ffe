"""The scan of every sampled step (checks/env/sample_scan.py) on RLlib's own episodes, as an
EnvRunner's sample() returns them (NumPy) and as they are while running (lists)."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from flow1_ray.common import codes as C
from flow1_ray.checks.findings import FindingLog
from flow1_ray.checks.env.sample_scan import SampleScan


def _episode(obs: list, rewards: list, numpy: bool = True) -> SingleAgentEpisode:
    ep = SingleAgentEpisode()
    ep.add_env_reset(observation=obs[0])
    for o, r in zip(obs[1:], rewards):
        ep.add_env_step(observation=o, action=0, reward=r)
    return ep.to_numpy() if numpy else ep


def _scan(episodes: list) -> dict[str, str]:
    log = FindingLog()
    scan = SampleScan(log, "train worker 1: ")
    scan.scan(episodes)
    return {f.code: f.message for f in log.pop_new()}


def _clean(n: int, width: int = 4, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=width).astype(np.float32) for _ in range(n + 1)], [1.0] * n


@pytest.mark.parametrize("numpy", [True, False])
def test_a_nan_in_one_step_of_many_episodes_is_found_with_its_place(numpy):
    episodes = [_episode(*_clean(20, seed=s), numpy=numpy) for s in range(30)]
    obs, rew = _clean(20, seed=99)
    obs[7] = obs[7].copy()
    obs[7][2] = np.nan
    episodes.insert(12, _episode(obs, rew, numpy=numpy))
    found = _scan(episodes)
    assert set(found) == {C.OBS_NAN_INF}
    assert "1 NaN and 0 inf" in found[C.OBS_NAN_INF] and "episode of 20 sampled steps, at its step 7" in found[C.OBS_NAN_INF]


@pytest.mark.parametrize("numpy", [True, False])
def test_an_inf_reward_is_found_and_clean_episodes_are_silent(numpy):
    episodes = [_episode(*_clean(15, seed=s), numpy=numpy) for s in range(10)]
    assert _scan(episodes) == {}
    obs, rew = _clean(15, seed=5)
    rew[3] = float("inf")
    found = _scan(episodes + [_episode(obs, rew, numpy=numpy)])
    assert set(found) == {C.REWARD_NAN} and "reward inf" in found[C.REWARD_NAN]


def test_episodes_of_different_widths_are_each_scanned():
    a = _episode(*_clean(10, width=3))
    obs, rew = _clean(10, width=5)
    obs[4] = np.full(5, np.inf, np.float32)
    assert set(_scan([a, _episode(obs, rew)])) == {C.OBS_NAN_INF}


def test_non_scalar_rewards_and_integer_observations_are_left_to_the_checked_episodes():
    ints = _episode([np.array([1, 2], np.int64)] * 6, [1.0] * 5)
    vec = _episode(*_clean(5))
    vec.rewards.data = np.ones((5, 2))   # an env that returned a reward vector
    assert _scan([ints, vec]) == {}


def test_a_part_reads_the_chunk_as_sample_returned_it_after_the_buffer_grew_it():
    """A local replay buffer (DQN's) concatenates the next chunk of an episode into the chunk
    it stored: a held part still reads one step, not terminated, and its own rewards."""
    from flow1_ray.checks.env.episode_parts import episode_parts, part_rows
    from flow1_ray.runner.sender import Sender
    from flow1_ray.runner.states import StateSampler
    from gymnasium import spaces

    ep = SingleAgentEpisode()
    ep.add_env_reset(observation=np.zeros(3, np.float32))
    ep.add_env_step(observation=np.ones(3, np.float32), action=1, reward=1.0)
    later = ep.cut()
    ep = ep.to_numpy()
    (part,) = episode_parts([ep])
    later.add_env_step(observation=np.full(3, 2, np.float32), action=0, reward=float("nan"), terminated=True)
    ep.concat_episode(later.to_numpy())
    assert len(ep) == 2 and ep.is_terminated            # the object RLlib returned has grown
    assert part.n == 1 and part.terminated is False
    assert part_rows(part, "observations", 1).tolist() == [[0, 0, 0], [1, 1, 1]]
    log = FindingLog()
    SampleScan(log).scan_parts([part])
    assert log.pop_new() == []                           # the NaN reward belongs to the next chunk
    sampler = StateSampler(spaces.Box(-5, 5, (3,)), spaces.Discrete(2), 1.0, Sender("r/states", lambda: None, 1))
    assert sampler.add_parts([part]) == 1
    b = sampler.batch()["modules"]["default_policy"]
    assert b["fail"].tolist() == [False] and b["a"].tolist() == [1]
