"""RLlib configs with a fault planted between the env and the loss, each with its correct twin,
for ``flow1 check --config``: a connector that clips observations, a frame stack, an RLModule
whose logits or Gaussian mean are scaled. Each ``*_config`` function returns an AlgorithmConfig
(``flow1 check --config pipeline_faults:clip_tight``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec


class ClipObservations(ConnectorV2):
    """Clips every observation value to [-bound, bound] (a user's "safety" clip)."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, bound: float = 10.0, **kwargs):
        self.bound = bound
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return gym.spaces.Box(-self.bound, self.bound, input_observation_space.shape, np.float32)

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            obs = ep.get_observations(-1)
            ep.set_observations(at_indices=-1, new_data=np.clip(obs, -self.bound, self.bound).astype(np.float32))
        return batch


class StackVectors(ConnectorV2):
    """Stacks the last ``frames`` vector observations into one (zeros before the episode's
    start), oldest first as RLlib's FrameStacking does, or newest first (``newest_first``)."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, frames: int = 4,
                 newest_first: bool = False, **kwargs):
        self.frames, self.newest_first = frames, newest_first
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        low = np.tile(input_observation_space.low, self.frames)
        return gym.spaces.Box(np.minimum(low, 0.0), np.maximum(np.tile(input_observation_space.high, self.frames), 0.0),
                              dtype=np.float32)

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes):
            stack = list(ep.get_observations(indices=slice(-self.frames, None), fill=0.0))
            if self.newest_first:
                stack = stack[::-1]
            self.add_batch_item(batch=batch, column=Columns.OBS, single_agent_episode=ep,
                                item_to_add=np.concatenate(stack).astype(np.float32))
        return batch


class ScaledLogitsModule(DefaultPPOTorchRLModule):
    """PPO's default module with its action distribution's inputs multiplied by ``scale``
    (``model_config["scale"]``); on a Box space only the mean half (``model_config["mean_only"]``)."""

    def _forward(self, batch: dict, **kwargs: Any) -> dict:
        out = super()._forward(batch, **kwargs)
        x = out[Columns.ACTION_DIST_INPUTS]
        scale = float(self.model_config.get("scale", 1.0))
        if self.model_config.get("mean_only"):
            mean, log_std = x.chunk(2, dim=-1)
            if self.model_config.get("squash"):
                mean = mean.tanh()
            out[Columns.ACTION_DIST_INPUTS] = __import__("torch").cat([mean * scale, log_std], dim=-1)
        else:
            out[Columns.ACTION_DIST_INPUTS] = x * scale
        return out


def _ppo(env: str = "CartPole-v1") -> PPOConfig:
    return PPOConfig().environment(env).env_runners(num_env_runners=0)


def clip_tight() -> PPOConfig:
    """CartPole's observations clipped to +-0.05: the cart's velocity and the pole's angular
    velocity (|x| up to ~2) sit at the clip on most steps."""
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: ClipObservations(bound=0.05))


def clip_loose() -> PPOConfig:
    """The twin: a clip at +-10 that CartPole's observations never reach."""
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: ClipObservations(bound=10.0))


def stack_newest_first() -> PPOConfig:
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: StackVectors(frames=4, newest_first=True))


def stack_oldest_first() -> PPOConfig:
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: StackVectors(frames=4))


def logits_scaled() -> PPOConfig:
    """Action logits scaled up 10,000x: the initial policy picks one action with p ~ 1."""
    return _ppo().rl_module(rl_module_spec=RLModuleSpec(module_class=ScaledLogitsModule,
                                                        model_config={"scale": 1e4}))


def logits_plain() -> PPOConfig:
    return _ppo().rl_module(rl_module_spec=RLModuleSpec(module_class=ScaledLogitsModule,
                                                        model_config={"scale": 1.0}))


def mean_unsquashed() -> PPOConfig:
    """MountainCarContinuous ([-1, 1] actions): the Gaussian's mean head scaled 50x, no squash."""
    return _ppo("MountainCarContinuous-v0").rl_module(rl_module_spec=RLModuleSpec(
        module_class=ScaledLogitsModule, model_config={"scale": 50.0, "mean_only": True}))


def mean_squashed() -> PPOConfig:
    """The twin: the same mean squashed by tanh before the scale of 1."""
    return _ppo("MountainCarContinuous-v0").rl_module(rl_module_spec=RLModuleSpec(
        module_class=ScaledLogitsModule, model_config={"scale": 1.0, "mean_only": True, "squash": True}))


class ConstantFeatureCartPole(gym.Wrapper):
    """CartPole with a fifth observation feature that never changes (a sensor that is always 1.0)."""

    def __init__(self, config: dict | None = None):
        super().__init__(gym.make("CartPole-v1"))
        low, high = self.env.observation_space.low, self.env.observation_space.high
        self.observation_space = gym.spaces.Box(np.append(low, 0.0), np.append(high, 2.0), dtype=np.float32)

    def _with(self, obs):
        return np.append(obs, np.float32(1.0)).astype(np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._with(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with(obs), reward, terminated, truncated, info


def mean_std_constant() -> PPOConfig:
    """ConstantFeatureCartPole through RLlib's MeanStdFilter, sampled by two EnvRunners whose
    filter statistics RLlib merges after every iteration."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return (PPOConfig().environment(ConstantFeatureCartPole)
            .env_runners(num_env_runners=2, env_to_module_connector=lambda env, *a: MeanStdFilter(multi_agent=False))
            .training(train_batch_size_per_learner=600, minibatch_size=200, num_epochs=1))


class AppendsBias(ConnectorV2):
    """Appends a constant 1.0 to each observation in the batch and forgets to declare it (no
    ``recompute_output_observation_space``): the RLModule is built for the env's shape."""

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes):
            obs = np.append(ep.get_observations(-1), np.float32(1.0)).astype(np.float32)
            self.add_batch_item(batch=batch, column=Columns.OBS, item_to_add=obs, single_agent_episode=ep)
        return batch


class RaisesAt(ConnectorV2):
    """An env-to-module connector whose own ``at``-th call raises."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, at: int = 100, **kwargs):
        self.at, self.calls = at, 0
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise KeyError("'speed' missing from the feature table")
        return batch


def undeclared_shape() -> PPOConfig:
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: AppendsBias())


def raising_connector() -> PPOConfig:
    return _ppo().env_runners(env_to_module_connector=lambda env, *a: RaisesAt(at=100))
