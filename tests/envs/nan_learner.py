"""A PPO whose value head produces inf on one planted observation (the Learner's NaN guard and
``flow1 replay`` of its dump: tests/live/test_learner_nan_live.py).

``PlantedObs``: observations in [-1, 1] (declared within [-10, 10]), except one, filled with
``value``, at step ``at`` of the env's ``episode``-th episode (an unnormalised sensor's spike,
outside the declared space: OBS_OUT_OF_BOUNDS too). ``CoshValuePPO``:
RLlib's default PPO module whose value head ends in a ``cosh`` (a value predicted on a log
scale overflows the same way): on the spike, through a ReLU encoder, the value is inf; the
learner connector's GAE turns it into NaN advantages and value targets, and the loss is NaN.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule


class PlantedObs(gym.Env):
    observation_space = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        config = config or {}
        self.value = float(config.get("value", 1e5))
        self.at, self.episode = int(config.get("at", 5)), int(config.get("episode", 3))
        self.episodes, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episodes += 1
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        if self.episodes == self.episode and self.t == self.at:
            obs[:] = self.value
        return obs, float(action), False, self.t >= 20, {}


class Cosh(torch.nn.Module):
    def forward(self, x):
        return torch.cosh(x)


class CoshValuePPO(DefaultPPOTorchRLModule):
    def setup(self):
        super().setup()
        self.vf = torch.nn.Sequential(self.vf, Cosh())


class RmsPenaltyPPO(DefaultPPOTorchRLModule):
    """RLlib's default PPO module with a value-consistency penalty: the RMS distance between
    the value and a frozen copy of it (a target network's, here the detached value itself),
    exactly 0 right after the copy is synced. Its forward is finite; its gradient is NaN
    (``sqrt``'s derivative at 0 is inf, times the square's 0): a NaN gradient under a finite loss."""

    def compute_values(self, batch, embeddings=None):
        v = super().compute_values(batch, embeddings)
        return v + 1e-3 * torch.sqrt(((v - v.detach()) ** 2).mean())
