"""Parts of an RLlib run, other than the env's step, that fail on a rare call inside an
EnvRunner's ``sample()``: a user's env-to-module and module-to-env connector, an RLModule whose
forward pass raises, a callback that raises, an env that ends its process with
``os._exit(3)``; and, in a Learner actor, a loss that ends its process the same way. Each counts its calls in its own process and fails at the ``at``-th, so a
runner trains a little before it dies (and its replacement, counting again, lives as long)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.connector_v2 import ConnectorV2

CALLS: Counter = Counter()   # per process


def _count(name: str) -> int:
    CALLS[name] += 1
    return CALLS[name]


class FeatureLookup(ConnectorV2):
    """An env-to-module connector that looks a feature up and one day does not find it."""

    def __init__(self, *args: Any, at: int = 300, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def __call__(self, *, batch: Any, **kwargs: Any) -> Any:
        if _count("feature_lookup") == self.at:
            raise ValueError("feature lookup failed: key 'speed' missing")
        return batch


class ActionRemap(ConnectorV2):
    """A module-to-env connector that maps actions through a table missing one entry."""

    def __init__(self, *args: Any, at: int = 300, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def __call__(self, *, batch: Any, **kwargs: Any) -> Any:
        if _count("action_remap") == self.at:
            table: dict[str, int] = {}
            return table["left"]
        return batch


def feature_lookup(env: Any = None, spaces: Any = None, device: Any = None) -> FeatureLookup:
    return FeatureLookup(at=300)


def action_remap(env: Any = None, spaces: Any = None, device: Any = None) -> ActionRemap:
    return ActionRemap(at=300)


def agent_to_policy(agent_id: Any, *args: Any, **kwargs: Any) -> str:
    return f"p{agent_id}"


class RareInputModule(DefaultPPOTorchRLModule):
    """PPO's default module whose exploration forward pass raises on a rare call (the Learner's
    training forward pass is left alone)."""

    def _forward(self, batch: dict, **kwargs: Any) -> dict:
        if _count("forward") == 300:
            raise RuntimeError("embedding index out of range: observation bucket 97 >= 96")
        return super()._forward(batch, **kwargs)


class SyncFailingModule(DefaultPPOTorchRLModule):
    """PPO's default module whose ``set_state`` refuses the weights the driver syncs on its
    3rd call in a remote EnvRunner (a module whose layout drifted from the Learner's)."""

    def set_state(self, state: dict) -> None:
        import ray

        if ray.get_runtime_context().get_actor_id() is not None and _count("set_state") == 3:
            raise ValueError("weights for 'pi' do not fit: shape (2, 256) given, (3, 256) expected")
        return super().set_state(state)


def raising_on_episode_step(*, episode: Any = None, **kwargs: Any) -> None:
    """A user's on_episode_step callback that fails on a rare step."""
    if _count("on_episode_step") == 300:
        raise ZeroDivisionError("reward shaping: division by zero in the user's callback")


class ExitsCartPole(gym.Wrapper):
    """CartPole whose step calls ``os._exit(3)`` on its ``exit_at_step``-th step (a simulator
    binding that ends the process on an internal error)."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.exit_at = int((config or {}).get("exit_at_step", 300))

    def step(self, action: Any) -> Any:
        if _count("exits_step") == self.exit_at:
            os._exit(3)
        return self.env.step(action)


class NanCartPole(gym.Wrapper):
    """CartPole whose ``nan_at_step``-th step returns a NaN in its observation (a simulator's
    division by zero): the module's logits turn NaN and the action distribution refuses them."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.nan_at = int((config or {}).get("nan_at_step", 300))
        self.on_last = bool((config or {}).get("on_last_step", False))

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        # the first step from the nan_at-th on that does not end its episode (mid-episode), or
        # that does (on_last_step: the episode RLlib sets aside inside the same sample() call)
        ends = bool(terminated or truncated)
        if _count("nan_step") >= self.nan_at and ends == self.on_last and not CALLS["nan_done"]:
            CALLS["nan_done"] = 1
            obs = obs.copy()
            obs[2] = float("nan")
        return obs, reward, terminated, truncated, info


class AbortingLearner(PPOTorchLearner):
    """PPO's Learner whose loss ends the process with ``os._exit(3)`` on its 6th minibatch (a
    native extension's abort on an internal error, in the second training iteration)."""

    def compute_loss_for_module(self, **kwargs: Any) -> Any:
        if _count("loss") == 6:
            os._exit(3)
        return super().compute_loss_for_module(**kwargs)
