"""RLModules made sick on purpose for the learner tests (importable by Ray workers)."""

from __future__ import annotations

from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns


class ZeroedPolicyHead(DefaultPPOTorchRLModule):
    """The policy head's output multiplied by 0 in training: the logits are always 0 and no
    gradient reaches the head -- the kind of broken graph a stray ``* mask`` leaves behind."""

    def _forward_train(self, batch, **kwargs):
        out = super()._forward_train(batch, **kwargs)
        out[Columns.ACTION_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS] * 0.0
        return out


def hang_next_update(learner, seconds: float = 600.0) -> int:
    """Make this Learner's next gradient computation sleep (a stuck collective, a loss that
    never returns); returns the Learner's pid."""
    import os
    import time

    original = learner.compute_gradients

    def stuck(*args, **kwargs):
        learner.compute_gradients = original
        time.sleep(seconds)
        return original(*args, **kwargs)

    learner.compute_gradients = stuck
    return os.getpid()


def slow_next_update(learner, seconds: float = 8.0) -> int:
    """Make this Learner's next gradient computation work for ``seconds`` (a long backward on a
    busy machine): the driver computes all along, nothing is stuck."""
    import os
    import time

    import numpy as np

    original = learner.compute_gradients

    def slow(*args, **kwargs):
        learner.compute_gradients = original
        end = time.time() + seconds
        a = np.random.default_rng(0).random((200, 200))
        while time.time() < end:
            a = np.tanh(a @ a / 200.0)
        return original(*args, **kwargs)

    learner.compute_gradients = slow
    return os.getpid()


class SlowInitCartPole:
    """CartPole whose constructor takes ``init_s`` seconds (a simulator that boots slowly)."""

    def __new__(cls, config=None):
        import time

        import gymnasium as gym

        time.sleep(float((config or {}).get("init_s", 8.0)))
        return gym.make("CartPole-v1")
