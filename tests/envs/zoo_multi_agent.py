"""The multi-agent fault zoo: tiny RLlib MultiAgentEnvs, each with one contract fault, and clean ones.

The contract is RLlib 2.60's new API stack (``MultiAgentEpisode.add_env_step``): dicts keyed
by agent id, ``__all__`` in terminateds, a reward for every agent that acted and got its
next observation, no data for an agent after its own terminated/truncated. The clean envs
use what that contract allows: turn-based play (only the agent to move gets an
observation), agents joining and leaving mid-episode, termination without a last
observation.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole


def multi_agent_cartpole() -> MultiAgentEnv:
    """RLlib's own MultiAgentCartPole with 2 agents (ids 0 and 1), as its examples build it."""
    return MultiAgentCartPole({"num_agents": 2})


class TwoWalkers(MultiAgentEnv):
    """Clean: agents "a" and "b" walk in 3-d and act every step; 20-step episodes, reward ~ N(1, 0.1)."""

    horizon = 20

    def __init__(self, config=None):
        super().__init__()
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_spaces = {aid: spaces.Box(-10.0, 10.0, (3,), np.float32) for aid in self.agents}
        self.action_spaces = {aid: spaces.Discrete(2) for aid in self.agents}
        self.t = 0
        self.ep = -1
        self.pos: dict = {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.t = 0
        self.ep += 1
        self.pos = {aid: self.np_random.uniform(-1, 1, 3).astype(np.float32) for aid in self.possible_agents}
        return {aid: self._obs(aid) for aid in self.possible_agents}, {aid: {} for aid in self.possible_agents}

    def _obs(self, aid):
        return self.pos[aid].copy()

    def _reward(self, aid):
        return float(1.0 + 0.1 * self.np_random.standard_normal())

    def _move(self, action_dict):
        for aid, a in action_dict.items():
            step = self.np_random.normal(0.05 if a else -0.05, 0.1, 3)
            self.pos[aid] = np.clip(self.pos[aid] + step, -5, 5).astype(np.float32)

    def step(self, action_dict):
        self.t += 1
        self._move(action_dict)
        done = self.t >= self.horizon
        obs = {aid: self._obs(aid) for aid in action_dict}
        rewards = {aid: self._reward(aid) for aid in action_dict}
        terminateds = {**{aid: done for aid in action_dict}, "__all__": done}
        infos = {aid: {"t": self.t} for aid in action_dict}
        return obs, rewards, terminateds, {"__all__": False}, infos


# --- faults -----------------------------------------------------------------------------


class AgentObsOutOfBounds(TwoWalkers):
    """From step 5, agent "b"'s first coordinate is 12, outside its Box(-10, 10)."""

    def _obs(self, aid):
        o = super()._obs(aid)
        if aid == "b" and self.t >= 5:
            o[0] = 12.0
        return o


class AgentDtypeDrift(TwoWalkers):
    """From step 6 of each episode agent "b"'s observation is float64; agent "a" stays float32."""

    def _obs(self, aid):
        o = super()._obs(aid)
        return o.astype(np.float64) if aid == "b" and self.t >= 6 else o


class RewardMissing(TwoWalkers):
    """From step 3, agent "b" acts and gets its next observation but no reward."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.t >= 3:
            rewards.pop("b", None)
        return obs, rewards, terminateds, truncateds, infos


class RewardBeforeJoining(TwoWalkers):
    """A third agent "c" joins at step 10, but is paid 1.0 from step 1: before it ever acted."""

    def __init__(self, config=None):
        super().__init__(config)
        self.agents = self.possible_agents = ["a", "b", "c"]
        self.observation_spaces["c"] = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_spaces["c"] = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return {aid: obs[aid] for aid in ("a", "b")}, {aid: {} for aid in ("a", "b")}

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.t == 10:
            obs["c"] = self._obs("c")  # its first observation
        if "c" not in action_dict:
            rewards["c"] = 1.0
        return obs, rewards, terminateds, truncateds, infos


class AllNeverSet(TwoWalkers):
    """terminateds carries each agent's flag but never the '__all__' key."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        terminateds.pop("__all__")
        truncateds.pop("__all__")
        return obs, rewards, terminateds, truncateds, infos


class AllStaysFalse(TwoWalkers):
    """Both agents terminate at step 20, '__all__' stays False: RLlib would step on past the end."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        terminateds["__all__"] = False
        return obs, rewards, terminateds, truncateds, infos


class ActsAfterTerminated(TwoWalkers):
    """Agent "a" terminates at step 8 but keeps getting observations and rewards afterwards."""

    def step(self, action_dict):
        self.t += 1
        self._move(action_dict)
        done = self.t >= self.horizon
        obs = {aid: self._obs(aid) for aid in self.possible_agents}
        rewards = {aid: self._reward(aid) for aid in self.possible_agents}
        terminateds = {"a": self.t == 8 or done, "b": done, "__all__": done}
        return obs, rewards, terminateds, {"__all__": False}, {aid: {} for aid in self.possible_agents}


class UnknownAgentInInfos(TwoWalkers):
    """infos carries an entry for "ghost", an id that is not in possible_agents."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        infos["ghost"] = {"note": "not an agent"}
        return obs, rewards, terminateds, truncateds, infos


class TerminatedInt(TwoWalkers):
    """Agent "a"'s terminated flag is an int (0/1)."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if "a" in terminateds:
            terminateds["a"] = int(terminateds["a"])
        return obs, rewards, terminateds, truncateds, infos


class RewardArray(TwoWalkers):
    """Agent "b"'s rewards come as 1-element arrays."""

    def _reward(self, aid):
        r = super()._reward(aid)
        return np.array([r]) if aid == "b" else r


class CrashInEpisode2(TwoWalkers):
    """step() raises at step 5 of episode 2."""

    def step(self, action_dict):
        if self.ep == 2 and self.t == 4:
            raise FloatingPointError("integrator diverged: dt too large")
        return super().step(action_dict)


# --- clean envs beyond TwoWalkers and MultiAgentCartPole ---------------------------------


class TurnBased(MultiAgentEnv):
    """Clean: "x" and "o" alternate; only the agent to move gets an observation.

    The mover is paid when it moves (no observation then: its action waits, as RLlib
    allows). A game ends at random after step 6 (terminated: only the next player gets a
    last observation, which RLlib accepts) or at step 30 (truncated: both get one, which
    RLlib requires for bootstrapping).
    """

    max_steps = 30

    def __init__(self, config=None):
        super().__init__()
        self.agents = self.possible_agents = ["x", "o"]
        self.observation_spaces = {aid: spaces.Box(-1.0, 1.0, (4,), np.float32) for aid in self.agents}
        self.action_spaces = {aid: spaces.Discrete(3) for aid in self.agents}
        self.t = 0
        self.mover = "x"
        self.board = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.t = 0
        self.board = self.np_random.uniform(-0.5, 0.5, 4).astype(np.float32)
        self.mover = self.possible_agents[int(self.np_random.integers(2))]
        return {self.mover: self._obs()}, {}

    def _obs(self):
        return self.board.copy()

    def _other(self, aid):
        return "o" if aid == "x" else "x"

    def _ends(self):
        """(terminated, truncated) after this move."""
        return self.t > 6 and self.np_random.random() < 0.1, self.t >= self.max_steps

    def step(self, action_dict):
        mover, other = self.mover, self._other(self.mover)
        action = action_dict[mover]
        self.t += 1
        self.board = np.clip(self.board + (action - 1) * 0.1 + self.np_random.normal(0, 0.05, 4), -1, 1).astype(
            np.float32)
        rewards = {mover: float(0.5 + 0.1 * self.np_random.standard_normal())}
        terminated, truncated = self._ends()
        if truncated:
            obs = {mover: self._obs(), other: self._obs()}
            rewards[other] = float(0.5 + 0.1 * self.np_random.standard_normal())
        else:
            obs = {other: self._obs()}
        self.mover = other
        return obs, rewards, {"__all__": terminated and not truncated}, {"__all__": truncated}, {}


class TruncatedWithoutObs(TurnBased):
    """At truncation only the next player gets a last observation; the mover, who acted, gets none."""

    def _ends(self):
        return False, self.t >= self.max_steps

    def step(self, action_dict):
        mover = self.mover
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if truncateds["__all__"]:
            obs.pop(mover)
        return obs, rewards, terminateds, truncateds, infos


class JoinAndLeave(MultiAgentEnv):
    """Clean: agents spawn and leave mid-episode; '__all__' when the last one leaves.

    "a0" and "a1" start; "a2" spawns at step 4 and "scout" (its own spaces) at step 8.
    "a0" terminates with a last observation, "a1" is truncated with one, "a2" terminates
    without one (RLlib repeats its last observation), "scout" leaves last and ends the
    episode. Someone is always present, so RLlib's episode never runs out of agents early.
    """

    spawns = {"a2": 4, "scout": 8}

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a0", "a1", "a2", "scout"]
        self.agents = []
        walker = spaces.Box(-5.0, 5.0, (2,), np.float32)
        self.observation_spaces = {"a0": walker, "a1": walker, "a2": walker,
                                   "scout": spaces.Box(0.0, 1.0, (3,), np.float32)}
        self.action_spaces = {"a0": spaces.Discrete(2), "a1": spaces.Discrete(2), "a2": spaces.Discrete(2),
                              "scout": spaces.MultiBinary(2)}
        self.t = 0
        self.leave: dict = {}
        self.state: dict = {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.t = 0
        rng = self.np_random
        self.leave = {"a0": int(rng.integers(3, 8)), "a1": int(rng.integers(9, 13)),
                      "a2": int(rng.integers(10, 15)), "scout": int(rng.integers(15, 21))}
        self.state = {}
        self.agents = ["a0", "a1"]
        for aid in self.agents:
            self._spawn(aid)
        return {aid: self._obs(aid) for aid in self.agents}, {aid: {} for aid in self.agents}

    def _spawn(self, aid):
        lo, hi = (0.0, 1.0) if aid == "scout" else (-1.0, 1.0)
        self.state[aid] = self.np_random.uniform(lo, hi, 3 if aid == "scout" else 2).astype(np.float32)

    def _obs(self, aid):
        return self.state[aid].copy()

    def step(self, action_dict):
        self.t += 1
        obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        for aid, action in action_dict.items():
            lo, hi = (0.0, 1.0) if aid == "scout" else (-5.0, 5.0)
            shift = 0.05 * (np.sum(action) - 0.5)
            self.state[aid] = np.clip(self.state[aid] + shift + self.np_random.normal(0, 0.05, self.state[aid].shape),
                                      lo, hi).astype(np.float32)
            rewards[aid] = float(1.0 + 0.1 * self.np_random.standard_normal())
            leaving = self.t >= self.leave[aid]
            if aid == "a1":
                terminateds[aid], truncateds[aid] = False, leaving
            else:
                terminateds[aid], truncateds[aid] = leaving, False
            if not (leaving and aid == "a2"):  # a2 leaves without a last observation
                obs[aid], infos[aid] = self._obs(aid), {"t": self.t}
            if leaving:
                self.agents.remove(aid)
        for aid, at in self.spawns.items():
            if self.t == at:
                self._spawn(aid)
                self.agents.append(aid)
                obs[aid], infos[aid] = self._obs(aid), {}
        done = not self.agents
        terminateds["__all__"] = done
        truncateds["__all__"] = False
        return obs, rewards, terminateds, truncateds, infos


def six_rooms():
    """RLlib's HierarchicalSixRoomEnv (examples/envs/classes/six_room_env.py): a high-level
    agent picks a sub-goal and a low-level agent, which moves until it reaches it (+1 on
    its last step, control handed back) or runs out of steps (-0.01 a step)."""
    from ray.rllib.examples.envs.classes.six_room_env import HierarchicalSixRoomEnv

    return HierarchicalSixRoomEnv({})


def six_rooms_mid_turn_bonus():
    """The same env paying one low-level agent +5 once, in the middle of a sub-task (its
    turn goes on): an isolated bonus, not the sub-task's outcome."""
    from ray.rllib.examples.envs.classes.six_room_env import HierarchicalSixRoomEnv

    class MidTurnBonus(HierarchicalSixRoomEnv):
        low_steps = 0

        def step(self, action_dict):
            obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
            (aid,) = action_dict
            if aid != "high_level_agent" and aid in obs:    # the low-level turn goes on
                self.low_steps += 1
                if self.low_steps == 60:
                    rewards[aid] += 5.0
            return obs, rewards, terminateds, truncateds, infos

    return MidTurnBonus({})
