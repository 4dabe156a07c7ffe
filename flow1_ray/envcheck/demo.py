"""Built-in envs with injected faults, for ``flow1 check --demo`` and ``flow1 train``.

Faults that first-step checkers miss: they appear after a few steps, not at reset.
The env takes an RLlib-style ``config`` dict so the same class serves both commands.
"""

from __future__ import annotations

import os
import time
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
    - ``crash_worker`` / ``crash_at_step``: on that RLlib worker index, ``step`` raises a
      ValueError at that step of the env's life (ENV_CRASHED, then WORKER_DIED);
    - ``hang_worker`` / ``hang_at_step``: on that worker, ``step`` blocks in
      ``_env_step_hangs_here`` for ``hang_s`` seconds (WORKER_STALLED);
    - ``fork_child``: the env forks a child process that outlives it (as simulators and
      fork-based vector envs do), which inherits the runner's open files.
    Absent keys mean no fault; ``config=None`` takes :data:`DEFAULT_FAULTS`. The worker
    index comes from RLlib's EnvContext (``config.worker_index``).
    """

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.faults = dict(DEFAULT_FAULTS if config is None else config)
        self._t = 0
        self._global_t = 0
        self._info: dict[str, Any] = {}
        self.worker_index = getattr(config, "worker_index", None)
        self._child: int | None = None
        if self.faults.get("fork_child"):
            # a bare fork, as simulators and fork-based vector envs do: the child inherits
            # every open file of the runner, its lock file included
            self._child = os.fork()
            if self._child == 0:
                time.sleep(float(self.faults.get("child_lifetime_s", 60)))
                os._exit(0)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._t = 0
        return obs, info

    def step(self, action):
        f = self.faults
        if self._on_this_worker("crash_worker") and self._global_t + 1 == f.get("crash_at_step", -1):
            self._env_step_raises_here()
        if self._on_this_worker("hang_worker") and self._global_t + 1 == f.get("hang_at_step", -1):
            self._env_step_hangs_here(float(f.get("hang_s", 3600)))
        obs, reward, terminated, truncated, info = super().step(action)
        self._t += 1
        self._global_t += 1
        if f.get("float64_from_step") is not None and self._t >= f["float64_from_step"]:
            obs = obs.astype(np.float64)
        if f.get("nan_reward_at_step") is not None and self._global_t == f["nan_reward_at_step"]:
            reward = float("nan")
        if f.get("reuse_info"):
            self._info.clear()
            self._info["t"] = self._t
            info = self._info
        return obs, reward, terminated, truncated, info


    def _on_this_worker(self, key: str) -> bool:
        return key in self.faults and self.faults[key] == self.worker_index

    def _env_step_raises_here(self) -> None:
        raise ValueError(f"injected physics fault at step {self._global_t + 1} (pid {os.getpid()})")

    def _env_step_hangs_here(self, seconds: float) -> None:
        mark = self.faults.get("hang_mark")
        if mark:  # when the hang began, for the detection benchmark
            with open(mark, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {time.time()}\n")
        time.sleep(seconds)

    def close(self) -> None:
        if self._child:
            try:
                os.kill(self._child, 9)
                os.waitpid(self._child, 0)
            except OSError:
                pass
            self._child = None
        super().close()


def faulty_cartpole(config: dict[str, Any] | None = None) -> TimeLimit:
    """A FaultyCartPole with CartPole-v1's 500-step limit (a zero-argument factory)."""
    return TimeLimit(FaultyCartPole(config), max_episode_steps=500)
