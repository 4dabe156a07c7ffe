"""The live half of ``tests/checks/test_replay.py`` (real Ray and RLlib runs). The replay-buffer
rules on result dicts shaped as RLlib 2.60 writes them (``replay_buffer``:
``num_env_steps_stored``, ``num_env_steps_added_lifetime``, ``num_env_steps_sampled_lifetime``
-- the steps replayed -- and ``num_env_steps_evicted_lifetime``) and on what Flow1Callbacks
measure of the buffer in the driver (``flow1/replay``); then live: a DQN that starts learning on
an empty buffer, one whose buffer cannot fit the memory, and the buffer measured in the driver
of a real run."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray.common import codes as C

DQN = {"algo_class": "DQN", "train_batch_size_per_learner": 32, "num_learners": 0, "rollout_fragment_length": 1,
       "num_envs_per_env_runner": 1, "num_env_runners": 1, "num_steps_sampled_before_learning_starts": 1000,
       "replay_buffer_config": {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50000}, "explore": True}


REPLAY = (C.REPLAY_UNDERFILLED, C.REPLAY_CAPACITY, C.REPLAY_RATIO, C.REPLAY_MEMORY)


# -- live ----------------------------------------------------------------------------------
class WideObs(gym.Env):
    """16 KiB float32 observations (4,096 numbers), two actions, 50-step episodes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4096,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4096).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        return self.np_random.uniform(-1, 1, 4096).astype(np.float32), float(action), False, self.t >= 50, {}


@pytest.mark.slow
def test_live_dqn_a_buffer_too_big_for_the_memory_and_learning_on_an_empty_buffer(ray_session, tmp_path):
    """Real DQN runs: the buffer is measured in the driver (16 KiB a step); a capacity of 10^8
    steps cannot fit any machine this runs on, and a first update on 1 stored step is named."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from flow1_ray import Flow1Callbacks, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     learner_tracing=False)
    config = (DQNConfig().environment(WideObs).callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=0)
              .rl_module(model_config={"fcnet_hiddens": [16]})
              .training(train_batch_size_per_learner=64, num_steps_sampled_before_learning_starts=0,
                        replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 100_000_000})
              .reporting(min_sample_timesteps_per_iteration=100))
    algo = config.build_algo()
    try:
        results = [algo.train()]
    finally:
        algo.stop()
    foot = results[-1]["flow1"]["replay"]
    assert foot["capacity"] == 100_000_000 and foot["stored"] == results[-1]["num_env_steps_sampled_lifetime"]
    assert 16384 <= foot["bytes_per_step"] < 17000, foot   # the observation's 16 KiB and a few numbers
    events = load_events(Path(results[-1]["flow1"]["run_dir"])).to_pylist()
    found = {e["code"]: {**e, "evidence": json.loads(e["evidence"])} for e in events if e["code"] in REPLAY}
    assert set(found) == {C.REPLAY_UNDERFILLED, C.REPLAY_MEMORY}, [(e["code"], e["message"][:200]) for e in events]
    mem = found[C.REPLAY_MEMORY]
    cap = mem["evidence"]["knobs"][0]["value"]["capacity"]
    assert mem["status"] == C.WARN and cap * foot["bytes_per_step"] <= mem["evidence"]["available"]
    assert found[C.REPLAY_UNDERFILLED]["evidence"]["knobs"][0]["value"] == 640


