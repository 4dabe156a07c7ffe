"""Envs whose memory grows per step, and their clean twin, for the leak rule's attribution.

``KeepsEveryObservation`` is the classic user leak: an env that appends each step's
observation to a list it never clears (a "history" kept for debugging). ``ForgetsItsHistory``
is the same env clearing it at reset. Both step a cart-pole-like system in pure numpy.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ForgetsItsHistory(gym.Env):
    """A balance task (CartPole's dynamics, simplified); keeps the episode's observations,
    cleared at each reset."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        self.pad = int((config or {}).get("pad", 256))   # float64 values kept with each observation
        self.history: list = []
        self.state = np.zeros(4)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.history = []
        self.state = self.np_random.uniform(-0.05, 0.05, 4)
        self.t = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, v, th, w = self.state
        f = 10.0 if action == 1 else -10.0
        acc = (f + 0.05 * w * w * np.sin(th)) / 1.1
        wacc = (9.8 * np.sin(th) - np.cos(th) * acc) / (0.5 * (4 / 3 - 0.1 * np.cos(th) ** 2 / 1.1))
        self.state = np.array([x + 0.02 * v, v + 0.02 * acc, th + 0.02 * w, w + 0.02 * wacc])
        self.t += 1
        self.remember(self.state)
        done = bool(abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.21)
        return self.state.astype(np.float32), 1.0, done, self.t >= 500, {}

    def remember(self, state: np.ndarray) -> None:
        self.history.append(np.concatenate([state, np.zeros(self.pad)]))


class KeepsEveryObservation(ForgetsItsHistory):
    """The same env, its history never cleared: ~2 KB a step kept for the process's life."""

    def reset(self, *, seed=None, options=None):
        kept = self.history
        obs, info = super().reset(seed=seed, options=options)
        self.history = kept
        return obs, info
