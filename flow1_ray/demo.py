"""Built-in envs with injected faults, for ``flow1 check --demo`` and ``flow1 train``.

Faults that first-step checkers miss: they appear after a few steps, not at reset.
The env takes an RLlib-style ``config`` dict so the same class serves both commands.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers import TimeLimit

DEFAULT_FAULTS = {"float64_from_step": 6, "nan_reward_at_step": 23, "reuse_info": True}


class FaultyCartPole(CartPoleEnv):
    """CartPole-v1 with faults switched on through ``config``.

    - ``float64_from_step``: from that step of every episode the observation is float64
      while the space says float32 (OBS_DTYPE_MISMATCH);
    - ``nan_reward_at_step``: a NaN reward at that global step (REWARD_NAN);
    - ``reuse_info``: one info dict object is returned and rewritten every step
      (INFO_MUTATION_DETECTED).
    Absent keys mean no fault; ``config=None`` takes :data:`DEFAULT_FAULTS`.
    """

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.faults = dict(DEFAULT_FAULTS if config is None else config)
        self._t = 0
        self._global_t = 0
        self._info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._t = 0
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self._t += 1
        self._global_t += 1
        f = self.faults
        if f.get("float64_from_step") is not None and self._t >= f["float64_from_step"]:
            obs = obs.astype(np.float64)
        if f.get("nan_reward_at_step") is not None and self._global_t == f["nan_reward_at_step"]:
            reward = float("nan")
        if f.get("reuse_info"):
            self._info.clear()
            self._info["t"] = self._t
            info = self._info
        return obs, reward, terminated, truncated, info


def faulty_cartpole(config: dict[str, Any] | None = None) -> TimeLimit:
    """A FaultyCartPole with CartPole-v1's 500-step limit (a zero-argument factory)."""
    return TimeLimit(FaultyCartPole(config), max_episode_steps=500)
