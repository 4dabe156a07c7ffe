"""Envs that look healthy and are wrong, and correct envs built alike.

Each trap passes every contract check; only the reward-logic audit (REWARD_UNEARNED) or
the leakage test (OBS_LEAKAGE) can tell. The look-alikes beside them do what the traps do
for a reason the agent controls, and must stay silent.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]])


class _Env(gym.Env):
    """Takes RLlib's ``env_config`` (and ignores it), so RLlib can build every env here."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()


class _Grid(_Env):
    """A 20 x 20 grid, an agent moving by 4 actions, a goal; reward -distance / 20 a step."""

    observation_space = spaces.Box(0.0, 19.0, (4,), np.float32)
    action_space = spaces.Discrete(4)
    size, horizon = 20, 400

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent = self.np_random.integers(0, self.size, 2)
        self.goal = self.np_random.integers(0, self.size, 2)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.concatenate([self.agent, self.goal]).astype(np.float32)

    def _move(self, action) -> None:
        self.agent = np.clip(self.agent + MOVES[int(action)], 0, self.size - 1)
        self.t += 1

    def _reward(self) -> float:
        return -float(np.abs(self.agent - self.goal).sum()) / self.size

    def _out(self, reward: float):
        return self._obs(), reward, False, self.t >= self.horizon, {}


class MovingGoal(_Grid):
    """A reward the policy did not earn: every 100 steps the env puts the goal next to the
    agent, before it computes the reward. The reward curve climbs; the policy did nothing."""

    def step(self, action):
        self._move(action)
        if self.t % 100 == 0:
            self.goal = np.clip(self.agent + np.array([1, 0]), 0, self.size - 1)
        return self._out(self._reward())


class HiddenRefuel(_Env):
    """A hidden state reset before the reward: fuel drains by one a step, the reward is the
    fuel left, and every 50 steps (in no observation) the env refuels before computing it."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(3)
    horizon = 300

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.fuel, self.t = 100, 0
        self.x = float(self.np_random.uniform(-0.5, 0.5))
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, action):
        self.x = float(np.clip(self.x + 0.05 * (int(action) - 1), -1, 1))
        self.t += 1
        self.fuel -= 1
        if self.t % 50 == 0:
            self.fuel = 100
        reward = self.fuel / 100 - 0.1 * abs(self.x)
        return np.array([self.x, self.t / self.horizon], np.float32), reward, False, self.t >= self.horizon, {}


class RandomTeleportGoal(_Grid):
    """The goal is put next to the agent at random moments (1 % of steps): no period, so only
    a copy of the env stepped with another action shows that no action caused it."""

    def step(self, action):
        self._move(action)
        if self.np_random.random() < 0.01:
            self.goal = np.clip(self.agent + np.array([0, 1]), 0, self.size - 1)
        return self._out(self._reward())


class EarnedGoal(_Grid):
    """Correct look-alike: reaching the goal pays +5 and moves the goal elsewhere (the agent
    earned both); the goal's jumps line up with the reward's, but another action would not
    have moved it."""

    size = 6

    def step(self, action):
        self._move(action)
        reward = self._reward()
        if np.array_equal(self.agent, self.goal):
            reward += 5.0
            self.goal = self.np_random.integers(0, self.size, 2)
        return self._out(reward)


class ScheduledCurriculum(_Grid):
    """Correct look-alike: every 100 steps the goal moves away at random (a curriculum the
    agent must chase); the reward drops when it does, never rises: no trap to warn of."""

    def step(self, action):
        self._move(action)
        if self.t % 100 == 0:
            self.goal = np.clip(self.agent + np.array([9, 9]), 0, self.size - 1)
            if np.array_equal(self.goal, self.agent):
                self.goal = np.array([0, 0])
        return self._out(self._reward())


class LeakyMarket(_Env):
    """An observation that knows the future: a price random walk whose observation holds the next
    step's price change (obs[2]). Reward: position x the change."""

    observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = spaces.Discrete(3)
    horizon = 200
    leak = True

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.price, self.position, self.t = 100.0, 0.0, 0
        self.next_change = float(self.np_random.normal())
        return self._obs(), {}

    def _obs(self):
        return np.array([self.price, self.position, self.next_change if self.leak else 0.0], np.float32)

    def step(self, action):
        self.position = float(action) - 1.0
        change = self.next_change
        self.price += change
        self.next_change = float(self.np_random.normal())
        self.t += 1
        return self._obs(), self.position * change, False, self.t >= self.horizon, {}


class HonestMarket(LeakyMarket):
    """Correct look-alike: the same market, the third field always 0."""

    leak = False


class NoisyVelocity(_Env):
    """Correct look-alike of a leak: a 1-d body whose velocity gets a random kick every step
    (process noise); the velocity predicts the next position, as physics does."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    horizon = 200

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.v, self.t = 0.0, 0.0, 0
        return np.array([self.x, self.v], np.float32), {}

    def step(self, action):
        self.x = float(np.clip(self.x + 0.1 * self.v, -5.0, 5.0))
        self.v = 0.95 * self.v + 0.1 * float(np.asarray(action).ravel()[0]) + 0.05 * float(self.np_random.normal())
        self.t += 1
        return np.array([self.x, self.v], np.float32), 1.0 - 0.1 * abs(self.x), False, self.t >= self.horizon, {}
