"""The flight recorder's bookkeeping on a real gymnasium vector env: per sub-env, the episode's
start (seed, the env's generator state, the first observation's digest) and its rows (actions,
observation digests, rewards), bounded by bytes; a dump holds exactly the sub-env's episode."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray.rundir.repro import Digest
from flow1_ray.runner.flight import FlightRecorder, rng_state, unseeded_first


def _vector(n: int = 3):
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")


def _record(env, rec: FlightRecorder, steps: int, seed: int = 7) -> list:
    """Steps the vector env with the recorder wired as the runner wires it; the obs returned."""
    subs = env.envs
    in_step = [False]
    for i, sub in enumerate(subs):
        reset = sub.reset

        def wrapped(*args, _i=i, _sub=sub, _reset=reset, **kwargs):
            state = rng_state(_sub)
            obs, info = _reset(*args, **kwargs)
            rec.on_reset(_i, kwargs.get("seed"), kwargs.get("options"), state, obs, in_step[0])
            return obs, info
        sub.reset = wrapped
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    rng = np.random.default_rng(0)
    for _ in range(steps):
        actions = rng.integers(0, 2, size=len(subs))
        in_step[0] = True
        obs, rew, term, trunc, _ = env.step(actions)
        in_step[0] = False
        rec.on_step(actions, obs, rew)
        seen.append(obs)
    return seen


def test_a_dump_replays_each_sub_envs_life_to_the_same_observations():
    """Three CartPole sub-envs, autoreset by the vector env: each sub-env's dump (its life since
    it was made: every episode's reset, every action) replays on a fresh env to the same first
    observation and the same digest at every step (the replay compares them)."""
    from flow1_ray.replay import NOT_REPRODUCED, steps

    env = _vector()
    rec = FlightRecorder(3)
    _record(env, rec, 60)
    for i in range(3):
        d = rec.dump(i)
        meta, arrays = d["meta"], d["arrays"]
        assert meta["from"] == "creation" and meta["whole"] and len(meta["episodes"]) >= 2   # autoresets
        # every vector step is a step of the sub-env but its autoresets (NEXT_STEP: a step of their own)
        assert meta["steps"] == len(arrays["actions"]) == len(arrays["digests"]) == 60 - (len(meta["episodes"]) - 1)
        assert meta["episodes"][0]["seed"] == 7 + i and meta["rng_state"] is None   # the vector env's seeds
        man = {"start": meta, "failure": {"call": "step", "step": meta["steps"] + 1, "exception": "never"}}
        out = steps(man, arrays, gym.make("CartPole-v1"))
        assert out == {"result": NOT_REPRODUCED, "step": meta["steps"],
                       "why": f"all {meta['steps']} steps replayed without the failure"}, (i, out)


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Pendulum-v1", "MountainCar-v0"])
def test_envs_nobody_here_wrote_replay_their_life_to_the_same_observations(env_id):
    """Third-party envs (MuJoCo's Hopper over ~20 episodes, classic control with continuous and
    discrete actions), first reset without a seed as RLlib's: each sub-env's life replays with
    every observation's digest equal to the run's."""
    from flow1_ray.replay import NOT_REPRODUCED, steps

    if env_id.startswith("Hopper"):
        pytest.importorskip("mujoco")
    env = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    rec, in_step = FlightRecorder(2), [False]
    for i, sub in enumerate(env.envs):
        reset = sub.reset

        def wrapped(*a, _i=i, _sub=sub, _reset=reset, **k):
            state = rng_state(_sub)
            if state is None and k.get("seed") is None and unseeded_first(_sub):
                k["seed"] = 99 + _i   # the recorder's drawn seed
            obs, info = _reset(*a, **k)
            rec.on_reset(_i, k.get("seed"), k.get("options"), state, obs, in_step[0])
            return obs, info
        sub.reset = wrapped
    env.reset()
    env.action_space.seed(0)
    for _ in range(400):
        a = env.action_space.sample()
        in_step[0] = True
        obs, r, *_ = env.step(a)
        in_step[0] = False
        rec.on_step(a, obs, r)
    for i in range(2):
        d = rec.dump(i)
        man = {"start": d["meta"], "failure": {"call": "step", "step": d["meta"]["steps"] + 1, "exception": "-"}}
        out = steps(man, d["arrays"], gym.make(env_id))
        assert out["result"] == NOT_REPRODUCED and out["step"] == d["meta"]["steps"], (env_id, i, out)


def test_the_rows_are_bounded_by_bytes_and_an_episode_older_than_them_says_it_is_not_whole():
    env = _vector(2)
    rec = FlightRecorder(2, cap_bytes=10_000)   # ~3 chunks of 64 vector steps of 2 sub-envs
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=3)
    rec.on_reset(0, 3, None, None, obs[0], False)
    rec.on_reset(1, 4, None, None, obs[1], False)
    for _ in range(1000):   # no reset recorded after the first: the episodes outgrow the rows
        a = rng.integers(0, 2, size=2)
        obs, rew, *_ = env.step(a)
        rec.on_step(a, obs, rew)
    assert rec.bytes <= 10_000 and rec.first_row > 0 and len(rec.chunks) >= 2
    d = rec.dump(0)
    assert d["meta"]["from"] == "episode" and not d["meta"]["whole"]
    assert d["meta"]["dropped_steps"] == rec.first_row
    assert len(d["arrays"]["actions"]) == rec.next_row - rec.first_row == len(d["arrays"]["digests"])


def test_a_buffer_the_caller_reuses_is_copied_not_kept_by_reference():
    rec = FlightRecorder(1)
    rec.on_reset(0, 1, None, None, np.zeros(2, dtype=np.float32), False)
    buf, act = np.zeros((1, 2), dtype=np.float32), np.zeros(1, dtype=np.int64)
    for k in range(10):   # one array object written in place each step, as a vector env with copy=False
        buf[0] = [k, -k]
        act[0] = k % 2
        rec.on_step(act, buf, np.ones(1))
    d = rec.dump(0)
    assert list(d["arrays"]["actions"]) == [k % 2 for k in range(10)]
    assert len(set(d["arrays"]["digests"].tolist())) == 10   # ten observations, not the last one ten times


def test_a_nan_observation_gives_a_nan_digest_and_a_dict_observation_none():
    digest = Digest()
    obs = np.ones((2, 4), dtype=np.float32)
    obs[1, 2] = np.nan
    got = digest.of(obs, 2)
    assert np.isfinite(got[0]) and np.isnan(got[1])
    assert digest.of({"a": obs}, 2) is None and digest.of(obs, 3) is None


def test_a_space_violation_and_an_audited_life_replay_whole():
    """A sub-env whose observation leaves its Box at step 30 of its life: its dump, replayed
    whole, is reproduced at that step with the excess named; the same life as a reward audit's
    dump replays to its end (reproduced), and a recorded reward the env does not give again is
    a divergence at its step."""
    from flow1_ray.replay import DIVERGED, NOT_REPRODUCED, REPRODUCED, steps
    from replay_envs import LeavesItsBox

    env = gym.vector.SyncVectorEnv([lambda: LeavesItsBox({"at": 30}), lambda: LeavesItsBox({"at": 10**6})])
    rec = FlightRecorder(2)
    _record(env, rec, 45)
    d = rec.dump(0)
    man = {"start": d["meta"], "failure": {"call": "step", "step": d["meta"]["steps"], "whole_life": "space"}}
    out = steps(man, d["arrays"], LeavesItsBox({"at": 30}))
    assert out["result"] == REPRODUCED and out["step"] == 30, out
    assert re.search(r"the observation of step 30 is outside the observation space: 20.2 beyond the bounds", out["nonfinite"])
    d1 = rec.dump(1)   # the healthy sub-env: said, not claimed
    out = steps({"start": d1["meta"], "failure": {**man["failure"], "step": d1["meta"]["steps"]}}, d1["arrays"],
                LeavesItsBox({"at": 10**6}))
    assert out["result"] == NOT_REPRODUCED and "every observation of the" in out["why"], out
    audit = {"start": d["meta"], "failure": {"call": "step", "step": d["meta"]["steps"], "whole_life": "rewards"}}
    out = steps(audit, d["arrays"], LeavesItsBox({"at": 30}))
    assert out["result"] == REPRODUCED and out["step"] == d["meta"]["steps"], out
    arrays = {**d["arrays"], "rewards": d["arrays"]["rewards"].copy()}
    arrays["rewards"][12] = 5.0
    out = steps(audit, arrays, LeavesItsBox({"at": 30}))
    assert out["result"] == DIVERGED and out["step"] == 13 and "the run's was 5" in out["why"], out
