"""An env whose step asks a Ray actor of its own (a simulator server, a shared model): the
runner then waits in ``ray.get``. On runner 1 only: the actor takes ``start_s`` to construct
(the first step waits for its slow start), and at step ``hang_at_step`` its answer never comes
(once per run: ``marker``, a file, says it has hung already, so the restarted runner steps on)."""

from __future__ import annotations

import os
import time

import gymnasium as gym


class _Helper:
    def __init__(self, start_s: float) -> None:
        time.sleep(start_s)

    def ping(self) -> bool:
        return True

    def hang(self) -> None:
        time.sleep(3600)


class WaitsOnAnActor(gym.Env):
    def __init__(self, config=None):
        config = config or {}
        self.env = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.env.observation_space, self.env.action_space
        self.index = getattr(config, "worker_index", 0)
        self.start_s = float(config.get("start_s", 5.0))
        self.hang_at = int(config.get("hang_at_step", 10**9))
        self.marker = config.get("marker")
        self.actor = None
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.index == 1:
            import ray

            if self.actor is None:
                self.actor = ray.remote(num_cpus=0)(_Helper).remote(self.start_s)
                ray.get(self.actor.ping.remote())
            if self.steps == self.hang_at and self.marker and not os.path.exists(self.marker):
                open(self.marker, "w").close()
                ray.get(self.actor.hang.remote())
        return self.env.step(action)
