"""VALUE_NOT_LEARNING: a critic that explains none of the returns while the return stopped
rising. DLR-RM/stable-baselines3#25 shows the symptom: a PPO that "does not learn" at explained variance
-1.57. Healthy RLlib PPO runs sit at 0-0.25 (and dip below 0) while the return climbs, so
the rule needs the stalled return too."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from flow1_ray.common import codes as C
from flow1_ray import diagnose_curves
from flow1_ray.driver.learner_watch import rule_columns

CORPUS = Path(__file__).resolve().parents[1] / "data" / "healthy"
PPO = {"lr": 5e-5, "entropy_coeff": 0.0, "num_epochs": 30, "clip_param": 0.3, "vf_clip_param": 10.0,
       "vf_loss_coeff": 1.0, "lambda": 0.95, "use_kl_loss": True, "model_config": {"vf_share_layers": False}}
STALLED = [60, 80, 100, 90, 70, 60, 58, 55, 57, 56]     # the return fell below its best and went flat
RISING = [20.0 + 30 * i for i in range(10)]


def _run(evs: list[float], returns: list[float], vf_loss: float = 9.9, unclipped: float = 1450.0) -> list[dict]:
    out = []
    for i, (ev, ret) in enumerate(zip(evs, returns)):
        stats = {"entropy": 0.6, "mean_kl_loss": 0.01, "policy_loss": -0.02, "vf_loss": vf_loss,
                 "vf_loss_unclipped": unclipped, "vf_explained_var": ev, "default_optimizer_learning_rate": 5e-5}
        out.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
                    "env_runners": {"episode_return_mean": ret, "num_episodes": 20, "num_episodes_lifetime": 20 * (i + 1)},
                    "learners": {"default_policy": stats}})
    return out


def _found(results, config=PPO):
    return [e for e in diagnose_curves(results, config=config, action_space=gym.spaces.Discrete(2))
            if e.code == C.VALUE_NOT_LEARNING]


def test_a_critic_that_explains_nothing_on_a_stalled_run_is_a_warn_naming_the_clip():
    (f,) = _found(_run([0.3, 0.2, 0.1, -0.4, -1.2, -1.57, -1.3, -1.5, -1.4, -1.6], STALLED))
    assert f.status == C.WARN and f.module == C.TRAIN_CURVES
    assert "explained variance was <= 0 on each of the last 5 iterations" in f.message
    assert "stalled below its best" in f.message and "vf_clip_param 10" in f.message
    (knob,) = f.evidence["knobs"]
    assert (knob["knob"], knob["current"], knob["value"]) == ("vf_clip_param", 10.0, 2900.0)
    assert "config.training(vf_clip_param=2900.0)" in f.message
    assert f.iteration == 8 and f.evidence["window"] == [-0.4, -1.2, -1.57, -1.3, -1.5] and f.evidence["vf_loss_unclipped"] == 1450.0


def test_the_same_critic_on_a_rising_return_is_silent():
    assert _found(_run([-1.5] * 10, RISING)) == []


def test_a_critic_that_explains_some_of_the_returns_is_silent_however_flat_the_return():
    assert _found(_run([0.05, -0.02, 0.01, -0.01, 0.02, 0.01, -0.03, 0.04, 0.0, 0.01], STALLED)) == []


def test_an_unclipped_shared_critic_gets_a_larger_vf_loss_coeff_else_a_larger_lr():
    shared = {**PPO, "model_config": {"vf_share_layers": True}}
    (f,) = _found(_run([-0.5] * 10, STALLED, vf_loss=3.0, unclipped=3.0), config=shared)
    assert [(k["knob"], k["value"]) for k in f.evidence["knobs"]] == [("vf_loss_coeff", 3.0)]
    (f,) = _found(_run([-0.5] * 10, STALLED, vf_loss=3.0, unclipped=3.0))
    assert [(k["knob"], k["value"]) for k in f.evidence["knobs"]] == [("lr", 0.00015)]


def test_without_the_signal_the_rule_says_nothing():
    results = _run([-1.5] * 10, STALLED)
    for r in results:
        del r["learners"]["default_policy"]["vf_explained_var"]
    assert _found(results) == []


@pytest.mark.parametrize("name", ["ppo-default", "multi-agent-ppo"])
def test_the_recorded_healthy_ppo_runs_are_silent_though_their_critic_dips_below_zero(name):
    results = [json.loads(line) for line in (CORPUS / name / "results.jsonl").read_text().splitlines()]
    evs = [s["vf_explained_var"] for r in results for m, s in r["learners"].items() if "vf_explained_var" in s]
    assert len(evs) >= 20 and min(evs) <= 0.0 and max(evs) < 0.3   # the signal is there, and low
    assert _found(results, config=None) == []


def test_its_signal_is_recorded_in_the_learner_table():
    assert "vf_explained_var" in rule_columns()
