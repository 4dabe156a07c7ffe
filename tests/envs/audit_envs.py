"""Envs for the reward-logic audit's reach and bounds.

Reach: the planted trap of :class:`traps.MovingGoal` (every 100 steps the goal is put next to
the agent before the reward is computed) with the goal kept where a flat look at the env's
attributes does not find it (a dataclass, a ``SimpleNamespace``, an object inside an object),
a refuel trap in a dm_control task behind shimmy, and one in a multi-agent env, with a twin
that earns its refuel. Bounds: attributes whose read raises or never returns, copies of the
env that crash or hang, state the audit cannot read, an env with 200,000 attributes, and one
whose copy is too large to take at every step.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv

import traps


# --- state held inside objects -------------------------------------------------------------


@dataclass
class Positions:
    agent: np.ndarray
    goal: np.ndarray


class _HeldGoal(traps.MovingGoal):
    """MovingGoal whose ``agent`` and ``goal`` live in ``self.holder()`` (properties of the
    class's, which the audit never calls: it must find them in the object that holds them)."""

    def _new_holder(self) -> None:
        raise NotImplementedError

    def _where(self):
        raise NotImplementedError

    def reset(self, *, seed=None, options=None):
        self._new_holder()
        return super().reset(seed=seed, options=options)

    agent = property(lambda self: self._where().agent, lambda self, v: setattr(self._where(), "agent", v))
    goal = property(lambda self: self._where().goal, lambda self, v: setattr(self._where(), "goal", v))


class DataclassGoal(_HeldGoal):
    """The goal in a dataclass: ``pos.goal``."""

    def _new_holder(self):
        self.pos = Positions(np.zeros(2, np.int64), np.zeros(2, np.int64))

    def _where(self):
        return self.pos


class NamespaceGoal(_HeldGoal):
    """The goal in a ``SimpleNamespace``: ``ns.goal``."""

    def _new_holder(self):
        self.ns = SimpleNamespace(agent=np.zeros(2, np.int64), goal=np.zeros(2, np.int64))

    def _where(self):
        return self.ns


class _Body:
    pass


class NestedGoal(_HeldGoal):
    """The goal two objects down: ``world.target.goal`` (a plain class each)."""

    def _new_holder(self):
        self.world = _Body()
        self.world.target = _Body()
        self.world.target.agent, self.world.target.goal = np.zeros(2, np.int64), np.zeros(2, np.int64)

    def _where(self):
        return self.world.target


# --- a dm_control task behind shimmy --------------------------------------------------------


def dm_cartpole(trap: bool = True):
    """dm_control's cartpole balance through shimmy's ``DmControlCompatibilityV0``; with
    ``trap``, its task keeps a fuel tank that drains a unit a step, is refilled every 50 steps
    whatever the agent does (before the reward), and pays half the reward."""
    from dm_control.rl import control
    from dm_control.suite import cartpole
    from shimmy.dm_control_compatibility import DmControlCompatibilityV0

    class FuelBalance(cartpole.Balance):
        def __init__(self) -> None:
            super().__init__(swing_up=False, sparse=False, random=0)
            self.fuel, self.ticks = 100, 0

        def initialize_episode(self, physics):
            self.fuel, self.ticks = 100, 0
            super().initialize_episode(physics)

        def get_reward(self, physics):
            self.ticks += 1
            self.fuel -= 1
            if self.ticks % 50 == 0:
                self.fuel = 100
            return 0.5 * super().get_reward(physics) + 0.5 * self.fuel / 100

    if not trap:
        from dm_control import suite

        return DmControlCompatibilityV0(suite.load("cartpole", "balance", task_kwargs={"random": 0}))
    physics = cartpole.Physics.from_xml_string(*cartpole.get_model_and_assets())
    return DmControlCompatibilityV0(control.Environment(physics, FuelBalance(), time_limit=10))


# --- a multi-agent env ------------------------------------------------------------------------


@dataclass
class Tank:
    fuel: int = 100
    t: int = 0


class TeamRefuel(MultiAgentEnv):
    """Two agents on a line share a tank in a dataclass (``tank.fuel``); each agent's reward is
    the fuel left. ``earned=False``: the env refills the tank every 50 steps whatever they do
    (the trap); ``earned=True``: the tank is refilled when both choose action 2 (the twin)."""

    earned = False

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a0", "a1"]
        self.observation_spaces = {a: spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(3) for a in self.agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.tank = Tank()
        self.x = {a: 0.0 for a in self.agents}
        return self._obs(), {}

    def _obs(self):
        return {a: np.array([self.x[a], self.tank.t / 300], np.float32) for a in self.agents}

    def step(self, action_dict):
        for a, act in action_dict.items():
            self.x[a] = float(np.clip(self.x[a] + 0.05 * (int(act) - 1), -1, 1))
        self.tank.t += 1
        self.tank.fuel -= 1
        if (all(int(action_dict.get(a, 0)) == 2 for a in self.agents) if self.earned
                else self.tank.t % 50 == 0):
            self.tank.fuel = 100
        rew = {a: self.tank.fuel / 100 - 0.1 * abs(self.x[a]) for a in self.agents}
        done = self.tank.t >= 300
        return self._obs(), rew, {"__all__": False}, {"__all__": done}, {}


class TeamRefuelEarned(TeamRefuel):
    earned = True


# --- hostile attributes and copies ----------------------------------------------------------


class RaisingList(list):
    """A list whose ``len()`` raises (a lazy container of a library's)."""

    def __len__(self):
        raise RuntimeError("no length for you")


class Hostile(np.ndarray):
    """An array whose ``copy()`` raises."""

    def copy(self, *args, **kwargs):
        raise RuntimeError("no copies of me")


class BadAttributesGoal(traps.MovingGoal):
    """MovingGoal holding two attributes that cannot be read: the trap is still there."""

    def reset(self, *, seed=None, options=None):
        self.lazy = RaisingList([1, 2])
        self.weird = np.zeros(3).view(Hostile)
        return super().reset(seed=seed, options=options)


class BlockingList(list):
    """A list whose ``len()`` never returns (a container waiting on a lock nobody releases)."""

    def __len__(self):
        time.sleep(3600)
        return 0


class BlockingReadGoal(traps.MovingGoal):
    def reset(self, *, seed=None, options=None):
        self.queue = BlockingList([1])
        return super().reset(seed=seed, options=options)


class SegfaultCopyGoal(traps.MovingGoal):
    """MovingGoal whose deepcopy dies of SIGSEGV (a C extension's copy going wrong)."""

    def __deepcopy__(self, memo):
        ctypes.string_at(0)


class HangingCopyGoal(traps.MovingGoal):
    def __deepcopy__(self, memo):
        time.sleep(3600)


class BigCopyGoal(traps.MovingGoal):
    """MovingGoal carrying 30,000 small objects (a replay of its own history, say): each copy
    of it is 30,000 objects, over the audit's size limit; its period alone is left."""

    def reset(self, *, seed=None, options=None):
        self.history = [[i] for i in range(30_000)]
        return super().reset(seed=seed, options=options)


class ManyAttributes(traps.MovingGoal):
    """200,000 attributes (none of them the env's logic) before the goal."""

    def reset(self, *, seed=None, options=None):
        for i in range(200_000):
            setattr(self, f"a{i}", "x")
        return super().reset(seed=seed, options=options)


class ManyNumbers(traps.MovingGoal):
    """10,000 objects each holding a list: more values than one discovery reads."""

    def reset(self, *, seed=None, options=None):
        for i in range(10_000):
            setattr(self, f"o{i}", [i, "x"])
        return super().reset(seed=seed, options=options)


class ClosureState(gym.Env):
    """A correct env whose whole state lives in a closure: the audit reads no number of it."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        state = {"x": 0.0, "t": 0}

        def advance(action):
            state["x"] = float(np.clip(state["x"] + 0.1 * (2 * int(action) - 1), -1, 1))
            state["t"] += 1
            return state["x"], state["t"]

        def restart():
            state["x"], state["t"] = 0.0, 0

        self._advance, self._restart = advance, restart

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._restart()
        return np.zeros(1, np.float32), {}

    def step(self, action):
        x, t = self._advance(action)
        return np.array([x], np.float32), -abs(x), False, t >= 100, {}
