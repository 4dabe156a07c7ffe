"""Envs whose failures ``flow1 replay`` must make happen again, or say why not (tests/test_replay_play.py,
tests/live). Each counts the steps of its own life (across episodes), as a simulator's state does."""

from __future__ import annotations

import time

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CrashesAtLifeStep(CartPoleEnv):
    """Raises at the ``at``-th step of its life: a fault that depends on the episodes before."""

    def __init__(self, config=None, render_mode=None):
        super().__init__(render_mode=render_mode)
        self.at = int((config or {}).get("at", 50))
        self.life = 0

    def step(self, action):
        self.life += 1
        if self.life == self.at:
            x = float(self.state[0])
            raise ValueError(f"cart left the track at life step {self.life} (x={x:.4f})")
        return super().step(action)


class HangsAtLifeStep(CrashesAtLifeStep):
    def step(self, action):
        if self.life + 1 == self.at:
            time.sleep(3600)
        return super().step(action)


class GlobalRandomReset(CrashesAtLifeStep):
    """Draws its initial state from numpy's global generator, which reset(seed) does not seed."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.state = np.random.uniform(-0.05, 0.05, size=4)
        return np.array(self.state, dtype=np.float32), {}


def _multi_agent_cartpole():
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return MultiAgentCartPole


class AgentPushCrash(_multi_agent_cartpole()):
    """RLlib's MultiAgentCartPole (two agents, ints 0 and 1) that raises when agent 1 pushes right
    (action 1) on or after the ``at``-th step of its life: one agent's action in a state the
    episodes before led to."""

    def __init__(self, config=None):
        config = dict(config or {})
        self.at = int(config.pop("at", 120))
        super().__init__({"num_agents": 2, **config})
        self.life = 0

    def step(self, action_dict):
        self.life += 1
        if self.life >= self.at and action_dict.get(1) == 1:
            raise RuntimeError(f"agent 1's push right broke the joint at life step {self.life}")
        return super().step(action_dict)


class RareStateFault(CartPoleEnv):
    """CartPole whose physics breaks in a rare state: after ``at`` steps of its life, the first
    time the pole leans past ``angle`` radians while the cart moves right. On the runner whose
    ``worker_index`` is ``crash_on`` it raises there; on ``hang_on`` its step never returns.
    Other runners' copies stay healthy (what a fault in one region of a cluster looks like)."""

    def __init__(self, config=None, render_mode=None):
        super().__init__(render_mode=render_mode)
        config = config or {}
        self.at, self.angle = int(config.get("at", 200)), float(config.get("angle", 0.15))
        index = getattr(config, "worker_index", None)
        self.fault = "crash" if index == config.get("crash_on") else "hang" if index == config.get("hang_on") else None
        self.life = 0

    def step(self, action):
        self.life += 1
        x_dot, theta = float(self.state[1]), float(self.state[2])
        if self.fault and self.life >= self.at and abs(theta) > self.angle and x_dot > 0:
            if self.fault == "hang":
                time.sleep(3600)
            raise FloatingPointError(f"pole solver diverged at life step {self.life} (theta={theta:.4f})")
        return super().step(action)


class LeavesItsBox(CartPoleEnv):
    """CartPole whose observation leaves its declared Box at the ``at``-th step of its life (a
    unit change in one sensor: the cart's position reported in decimetres)."""

    def __init__(self, config=None, render_mode=None):
        super().__init__(render_mode=render_mode)
        self.at, self.life = int((config or {}).get("at", 30)), 0

    def step(self, action):
        self.life += 1
        obs, r, term, trunc, info = super().step(action)
        if self.life == self.at:
            obs = obs.copy()
            obs[0] = 10.0 * self.x_threshold + 1.0
        return obs, r, term, trunc, info
