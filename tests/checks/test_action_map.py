"""A wrapper between the policy and ``env.step``: a rescale is what it is (an advisory with the
map found), a clip, a rounding or a lossy cast is ACTION_CAST_WARNING. Real wrappers:
gymnasium's RescaleAction and ClipAction, RLlib's TransformedActionPendulum."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import zoo
from flow1_ray import check_env
from flow1_ray.common import codes as C
from flow1_ray.checks.env.action_map import fit_dim


def _pipe(report) -> list:
    return [e for e in report.events if e.module == C.ACTION_PIPE and e.code != C.CHECKS_PASSED]


class Round(gym.ActionWrapper):
    """Rounds the torque to 0.1: many actions become one."""

    def action(self, action):
        return np.round(action, 1).astype(action.dtype)


def test_rllibs_transformed_action_pendulum_is_a_rescale_with_its_map():
    """RLlib's example maps the policy's [-15, 1] onto Pendulum's [-2, 2]: 0.25 a + 1.75."""
    from ray.rllib.examples.envs.classes.transformed_action_space_env import TransformedActionPendulum

    report = check_env(TransformedActionPendulum({"low": -15.0, "high": 1.0}), steps=300)
    (f,) = _pipe(report)
    assert f.code == C.ACTION_TRANSFORMED and f.status == C.PASS and report.status == C.PASS
    assert "rescaled on the way to env.step by ActionTransform" in f.message and "dim 0: 0.25 x +1.75" in f.message
    (m,) = f.evidence["map"]
    assert m["kind"] == "affine" and m["scale"] == pytest.approx(0.25) and m["offset"] == pytest.approx(1.75)


@pytest.mark.parametrize("make, scale", [
    (lambda: gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), -1.0, 1.0), 2.0),
    (zoo.rescaled_actions_env, 0.5),   # a wrapper that halves every action
])
def test_an_affine_rescale_is_an_advisory(make, scale):
    report = check_env(make(), steps=300)
    (f,) = _pipe(report)
    assert f.code == C.ACTION_TRANSFORMED and f.status == C.PASS, f.message
    assert all(m["scale"] == pytest.approx(scale) for m in f.evidence["map"])


def test_a_clip_is_a_finding_with_the_share_clipped():
    """ClipAction's outer space is unbounded: the random actions beyond [-2, 2] reach Pendulum
    at its bound."""
    report = check_env(gym.wrappers.ClipAction(gym.make("Pendulum-v1")), steps=500)
    (f,) = _pipe(report)
    assert f.code == C.ACTION_CAST_WARNING and f.status == C.WARN
    assert "values clipped on the way to env.step by ClipAction" in f.message
    assert "of 500 actions" in f.message and f.evidence["bounds"] == [-2.0, 2.0] and f.evidence["clipped"] > 0


def test_a_clip_after_a_rescale_is_still_a_clip():
    env = gym.wrappers.ClipAction(gym.wrappers.RescaleAction(gym.make("MountainCarContinuous-v0"), -2.0, 2.0))
    (f,) = _pipe(check_env(env, steps=300))
    assert f.code == C.ACTION_CAST_WARNING and "clipped" in f.message and "ClipAction > RescaleAction" in f.message


def test_a_rounding_is_a_loss():
    (f,) = _pipe(check_env(Round(gym.make("Pendulum-v1")), steps=300))
    assert f.code == C.ACTION_CAST_WARNING and "and not by a rescale: dimension 0 misses the best affine map" in f.message


def test_a_dtype_cast_stays_a_finding():
    (f,) = _pipe(check_env(zoo.cast_actions_env, steps=100))
    assert f.code == C.ACTION_CAST_WARNING and "dtype changed on the way to env.step" in f.message


@pytest.mark.parametrize("y, kind", [
    (lambda x: 3 * x - 1, "affine"),
    (lambda x: np.clip(2 * x, -1, 1), "clipped"),
    (lambda x: np.tanh(x), "lossy"),
    (lambda x: np.zeros_like(x), "lossy"),     # every action the same: everything lost
    (lambda x: x, "identity"),
])
def test_fit_dim_tells_maps_from_losses(y, kind):
    x = np.random.default_rng(0).uniform(-1, 1, 200)
    assert fit_dim(x, y(x)).kind == kind
