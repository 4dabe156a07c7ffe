"""Multi-agent cases of the corpus (``corpus.py``): RLlib MultiAgentEnvs with a reported fault
and their fixed twins. gymnasium's and SB3's checkers take single-agent envs only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from corpus import case

_OBS = spaces.Box(0, 10, (1,), np.float32)


class Race(MultiAgentEnv):
    """Two runners, "a" twice as fast as "b"; a runner is done at position 4. The env keeps
    sending observations and rewards for the runner already done."""

    def __init__(self, config=None, fixed=False):
        super().__init__()
        self.fixed = fixed
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_spaces = {k: _OBS for k in self.agents}
        self.action_spaces = {k: spaces.Discrete(2) for k in self.agents}

    def reset(self, *, seed=None, options=None):
        self.pos, self.done = {"a": 0, "b": 0}, set()
        return {k: np.zeros(1, np.float32) for k in self.pos}, {}

    def step(self, action_dict):
        for k in action_dict:
            self.pos[k] += 2 if k == "a" else 1
        live = [k for k in self.pos if k not in self.done] if self.fixed else list(self.pos)
        obs = {k: np.array([min(self.pos[k], 10)], np.float32) for k in live}
        rew = {k: 1.0 for k in live}
        term = {k: self.pos[k] >= 4 for k in live}
        self.done |= {k for k, v in term.items() if v}
        term["__all__"] = len(self.done) == 2
        return obs, rew, term, {"__all__": False}, {}


class CutWithoutLastObs(MultiAgentEnv):
    """Two agents acting in turns under a time limit: at the limit only the agent to move next
    gets an observation, the other is truncated without its last one."""

    def __init__(self, config=None, fixed=False):
        super().__init__()
        self.fixed = fixed
        self.agents = self.possible_agents = ["p1", "p2"]
        self.observation_spaces = {k: _OBS for k in self.agents}
        self.action_spaces = {k: spaces.Discrete(2) for k in self.agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"p1": np.zeros(1, np.float32)}, {}

    def step(self, action_dict):
        (actor,) = action_dict
        nxt = "p2" if actor == "p1" else "p1"
        self.t += 1
        cut = self.t >= 9
        seen = [nxt, actor] if cut and self.fixed else [nxt]
        obs = {k: np.array([self.t], np.float32) for k in seen}
        return obs, {actor: 0.1}, {"__all__": False}, {"__all__": cut}, {}


class TwoAgents(MultiAgentEnv):
    """Two agents paid their action each step, ten steps an episode."""

    def __init__(self, config=None):
        super().__init__()
        self.agents = self.possible_agents = ["a0", "a1"]
        self.observation_spaces = {k: _OBS for k in self.agents}
        self.action_spaces = {k: spaces.Discrete(2) for k in self.agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {k: np.zeros(1, np.float32) for k in self.agents}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {k: np.array([self.t], np.float32) for k in action_dict}
        done = self.t >= 10
        return obs, {k: float(v) for k, v in action_dict.items()}, {"__all__": done}, {"__all__": False}, {}


class ScaleRewards(gym.RewardWrapper):
    """A single-agent reward wrapper around a multi-agent env: it scales a number, and gets a
    dict of rewards."""

    def __init__(self, env, fixed=False):
        super().__init__(env)
        self.fixed = fixed

    def reward(self, r):
        return {k: 0.1 * v for k, v in r.items()} if self.fixed else 0.1 * r


CASES = [
    case("ma_data_after_done", "multi-agent", "https://github.com/flatland-association/flatland-rl/issues/301",
         "observations and rewards sent for an agent already done; RLlib's MultiAgentEpisode raises \"already had "
         "its SingleAgentEpisode.is_done set to True, but still received data\"",
         lambda: Race(), lambda: Race(fixed=True), {"MA_AGENT_AFTER_DONE"}, multi_agent=True),
    case("ma_cut_without_last_obs", "multi-agent", "https://github.com/ray-project/ray/pull/4139",
         "an episode cut for all agents while a live agent has no last observation (RLlib raises: \"Please ensure "
         "that you include the last observations of all live agents\")",
         lambda: CutWithoutLastObs(), lambda: CutWithoutLastObs(fixed=True), {"MA_TRUNCATED_WITHOUT_OBS"},
         multi_agent=True),
    case("ma_single_agent_wrapper", "multi-agent", "https://github.com/ray-project/ray/issues/8303",
         "a gym reward wrapper around a MultiAgentEnv treats the per-agent dict as one value (sven1977: RLlib "
         "processes a wrapped MultiAgentEnv wrongly; the reward must be mapped over the agents)",
         lambda: ScaleRewards(TwoAgents()), lambda: ScaleRewards(TwoAgents(), fixed=True), {"ENV_CRASHED"},
         multi_agent=True),
]
