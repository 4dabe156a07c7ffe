"""Noise is not a signal: on an env whose rewards are noise by design there is nothing to learn,
and the return and KL rules must know it (the return's chance movement measured from the spread
of the episodes RLlib averages); a finding that fires again is one row with a count.

The synthetic runs are result dicts shaped like RLlib's; the live one is PPO on RLlib's own
RandomEnv (rewards uniform in [-1, 1], episodes ending with p = 0.1)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray import diagnose_curves
from flow1_ray.common import codes as C
from flow1_ray.checks.learner.curve_diagnosis import CurveDiagnosis
from flow1_ray.checks.learner.reward_drop import ReturnNoise

LOG2 = math.log(2)
PPO = {"algo_class": "PPO", "lr": 5e-5, "clip_param": 0.3, "num_epochs": 3}


def _run(returns, spread, evs, kl=0.002, entropy=0.95 * LOG2, episodes=100) -> list[dict]:
    out = []
    for i, (ret, ev) in enumerate(zip(returns, evs)):
        out.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
                    "env_runners": {"episode_return_mean": ret, "episode_return_min": ret - spread,
                                    "episode_return_max": ret + spread, "num_episodes": episodes,
                                    "num_episodes_lifetime": episodes * (i + 1)},
                    "learners": {"default_policy": {
                        "entropy": entropy, "mean_kl_loss": kl, "policy_loss": 0.01 * (-1) ** i, "vf_loss": 3.0,
                        "vf_explained_var": ev, "default_optimizer_learning_rate": 5e-5,
                        "flow1": {"clip_n": 1000, "clip_out": 0}}}})
    return out


def test_the_noise_of_the_smoothed_return_comes_from_the_spread_of_its_episodes():
    noise = ReturnNoise(window=100)
    noise.add(-8.0, 8.0, 10)                 # 10 episodes: their range says little
    assert noise.sigma is None
    noise.add(-8.0, 8.0, 100)
    # 100 normal returns span ~5.15 sigma: sigma_episode 16 / 5.15, over sqrt(100)
    assert noise.sigma == pytest.approx(16 / 5.15 / 10, rel=0.01)
    assert noise.beyond(1.0, 3.0) is True and noise.beyond(0.5, 3.0) is False


@pytest.mark.parametrize("seed", range(3))
def test_a_run_with_nothing_to_learn_raises_nothing(seed):
    """40 iterations of a noise return (sigma 0.2 of the 100-episode mean), the critic at EV ~ 0
    (the mean is all it can predict), a near-random policy barely moving: no WARN; KL_TOO_LOW
    is an advisory, once, that says nothing shows a learnable return."""
    rng = np.random.default_rng(seed)
    results = _run(rng.normal(0, 0.2, 40), spread=10.0, evs=rng.uniform(-0.012, 0.012, 40))
    ev = diagnose_curves(results, config=PPO, action_space=gym.spaces.Discrete(2))
    assert [e.code for e in ev if e.status != C.PASS] == [], [(e.code, e.message[:150]) for e in ev]
    advisories = [e for e in ev if e.code == C.KL_TOO_LOW]
    assert len(advisories) <= 1
    for e in advisories:
        assert e.advisory and "nothing shows a learnable return yet" in e.message


def test_the_same_quiet_policy_after_a_real_rise_is_kl_too_low():
    """The return rose far beyond its noise, then stalled below its best with the policy still
    near random and barely moving: there is something to learn, the steps are too small."""
    rng = np.random.default_rng(0)
    returns = np.concatenate([np.linspace(20, 60, 8), [50, 45] + [44] * 12]) + rng.normal(0, 0.2, 22)
    ev = diagnose_curves(_run(returns, 10.0, [0.3] * 22), config=PPO, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.KL_TOO_LOW]
    assert f.status == C.WARN and not f.advisory


def test_a_drop_within_the_noise_is_not_a_drop_and_one_beyond_it_is():
    flat = [0.0, 0.1, -0.1, 0.2, 0.1, 0.3, 0.2, 0.25, 0.2, 0.1, -0.2, -0.25, -0.3, -0.2, -0.25, -0.3, -0.2]
    quiet = [e.code for e in diagnose_curves(_run(flat, 10.0, [0.0] * 17), config=PPO)]
    assert C.REWARD_DROP not in quiet
    # the same shape, a hundred times larger against the same spread: a real drop
    (f,) = [e for e in diagnose_curves(_run([100 * x for x in flat], 10.0, [0.0] * 17), config=PPO)
            if e.code == C.REWARD_DROP]
    assert f.evidence["noise_sigma"] == pytest.approx(20 / 5.15 / 10, rel=0.01) and "3x the return's noise" in f.message


def test_a_finding_that_fires_again_is_one_row_with_a_count():
    """KL_TOO_LOW on a learnable run whose return keeps leaving and re-entering its stall."""
    returns = list(np.linspace(20, 60, 8)) + [50, 45, 44, 44, 44, 44, 44, 60, 61, 62, 50, 45, 44, 44, 44, 44, 44, 44]
    diag = CurveDiagnosis(config=PPO, action_space=gym.spaces.Discrete(2))
    events = [e for r in _run(returns, 10.0, [0.3] * len(returns)) for e in diag.add(r)]
    assert [e.code for e in events].count(C.KL_TOO_LOW) == 1
    assert diag.repeats["KL_TOO_LOW:default_policy"]["count"] >= 2
    assert diag.values()["repeats"]["KL_TOO_LOW:default_policy"] >= 2


