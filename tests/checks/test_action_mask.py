"""RLlib's action-mask convention (an observation dict with ``"action_mask"``): the check draws
its random actions from the valid ones, as RLlib's action-masking RLModule does, so the envs
RLlib ships that reject masked actions by design are judged right; a mask that cannot mask,
or an env that rejects what its own mask allows, is named."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray import check_env
from flow1_ray.common import codes as C


def _loud(report) -> list[tuple[str, str]]:
    return [(e.code, e.message[:200]) for e in report.events if e.status != C.PASS]


def _messages(report) -> str:
    return "\n".join(e.message for e in report.events)


def test_rllibs_action_mask_env_is_driven_by_its_mask_and_judged_right():
    """RLlib's ActionMaskEnv raises on a masked action; with RLlib's own example config
    (Discrete(100), the mask a random 0/1 vector) every random action is a valid one."""
    from ray.rllib.examples.envs.classes.action_mask_env import ActionMaskEnv

    env = ActionMaskEnv({"action_space": gym.spaces.Discrete(100),
                         "observation_space": gym.spaces.Box(-1.0, 1.0, (5,))})
    report = check_env(env, steps=300)
    # what RLlib's RandomEnv below it does deviate in: a 0-d array reward, a reset that ignores its seed
    assert {code for code, _ in _loud(report)} <= {C.REWARD_NOT_SCALAR, C.NONDETERMINISTIC_RESET}, _loud(report)
    assert report.summary["crashes"] == 0 and report.summary["action_mask_steps"] >= 300


def test_rllibs_parametric_actions_cartpole_is_judged_right():
    """Two valid actions among ten, moved every reset; any other action raises."""
    from ray.rllib.examples.envs.classes.parametric_actions_cartpole import ParametricActionsCartPole

    report = check_env(ParametricActionsCartPole(10), steps=300)
    assert report.summary["crashes"] == 0 and report.summary["action_mask_steps"] >= 300
    assert report.summary["action_mask_probe"] == {"tried": 3, "rejected": 3}
    assert not [e for e in report.events if e.code in (C.ENV_CRASHED, C.ACTION_MASK_INVALID)], _loud(report)


def test_a_mask_under_another_key_is_recognised():
    """RLlib's ParametricActionsCartPoleNoEmbeddings names its mask ``valid_avail_actions_mask``.
    Measured before: flow1 drew any of the ten actions, the env raised (ENV_CRASHED FAIL)."""
    from ray.rllib.examples.envs.classes.parametric_actions_cartpole import (
        ParametricActionsCartPoleNoEmbeddings)

    report = check_env(ParametricActionsCartPoleNoEmbeddings(10), steps=300)
    assert report.summary["crashes"] == 0 and report.summary["action_mask_steps"] >= 300, _loud(report)
    assert not [e for e in report.events if e.code in (C.ENV_CRASHED, C.ACTION_MASK_INVALID)], _loud(report)


@pytest.mark.parametrize("mask_space", [
    gym.spaces.Box(0, 255, (4,), np.uint8),          # not within [0, 1]: not a mask
    gym.spaces.Box(0, 1, (5,), np.float32),          # not one entry per action
], ids=["not-0-1", "wrong-size"])
def test_a_key_that_only_says_mask_is_not_taken_for_one(mask_space):
    from flow1_ray.checks.env.action_mask import MASK_KEY, mask_key

    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,)), "segmentation_mask": mask_space})
    assert mask_key(space, gym.spaces.Discrete(4)) == MASK_KEY
    ok = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,)), "legal_moves_mask": gym.spaces.MultiBinary(4)})
    assert mask_key(ok, gym.spaces.Discrete(4)) == "legal_moves_mask"


class MaskedEnv(gym.Env):
    """Four actions; the mask allows only actions 1 and 3 and the env rejects the others,
    unless told to publish a broken mask at step 3 (``bad``) or to reject action 3 (``liar``)."""

    action_space = gym.spaces.Discrete(4)
    observation_space = gym.spaces.Dict({"obs": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                                         "action_mask": gym.spaces.Box(0, 1, (4,), np.int8)})

    def __init__(self, bad=None, liar=False, lenient=False):
        self.bad, self.liar, self.lenient, self.t = bad, liar, lenient, 0

    def _obs(self):
        mask = np.array([0, 1, 0, 1], np.int8)
        if self.bad is not None and self.t == 3:
            mask = self.bad
        return {"obs": np.zeros(2, np.float32), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if (action not in (1, 3) and not self.lenient) or (self.liar and action == 3):
            raise ValueError(f"invalid action {action}")
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 20, {}


def test_a_masking_env_that_rejects_what_its_mask_excludes_is_silent():
    report = check_env(MaskedEnv(), steps=200)
    assert _loud(report) == [] and report.summary["action_mask_steps"] == 200
    # the probe after the run: masked-out actions sent on purpose, each rejected
    assert report.summary["action_mask_probe"] == {"tried": 3, "rejected": 3}
    assert "step() rejected 3/3 masked-out actions: the env enforces its action mask" in _messages(report)


def test_an_env_that_accepts_masked_out_actions_is_said_so_and_silent():
    """A mask that advises (the env would take any action) is a design, not a fault: a note."""
    report = check_env(MaskedEnv(lenient=True), steps=200)
    assert _loud(report) == [] and report.summary["action_mask_probe"] == {"tried": 3, "rejected": 0}
    assert "step() accepted 3/3 masked-out actions: the env does not enforce its action mask" in _messages(report)


@pytest.mark.parametrize("bad, says", [
    (np.zeros(4, np.int8), "expected at least one valid action, actual every entry 0"),
    (np.array([0, 1, 1], np.int8), "expected shape (4,), one entry per action of Discrete(4), actual (3,)"),
    (np.array([0, 2, 0, 1], np.int8), "expected values in [0, 1], actual min 0, max 2"),
])
def test_a_mask_that_cannot_mask_is_action_mask_invalid(bad, says):
    report = check_env(MaskedEnv(bad=bad), steps=100)
    (f,) = [e for e in report.events if e.code == C.ACTION_MASK_INVALID]
    assert f.status == C.FAIL and says in f.message and "at step 3" in f.message, f.message   # step 3's observation


def test_an_env_rejecting_an_action_its_mask_allows_is_named_so():
    report = check_env(MaskedEnv(liar=True), steps=100)
    crashed = [e for e in report.events if e.code == C.ENV_CRASHED]
    assert crashed and "the mask and the env disagree" in crashed[0].message
