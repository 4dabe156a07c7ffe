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
