"""The learner-curve rules on short synthetic runs: each fires on its symptom only
with its second signal, names a knob computed from the run's config, and stays silent on
the recorded healthy runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import gymnasium as gym
import pytest

from flow1_ray.common import codes as C
from flow1_ray import diagnose_curves
from flow1_ray.checks.advice import Knobs
from flow1_ray.checks.learner.gradients import LayerRules
from flow1_ray.checks.learner.learner_reading import max_entropy

CORPUS = Path(__file__).resolve().parents[1] / "data" / "healthy"
LOG2 = math.log(2)
PPO = {"lr": 5e-5, "entropy_coeff": 0.0, "num_epochs": 30, "clip_param": 0.3, "kl_target": 0.01,
       "vf_loss_coeff": 1.0, "lambda": 1.0, "use_kl_loss": True, "model_config": {"vf_share_layers": False}}


def _run(points: list[dict], returns: list[float] | None = None, episodes: int = 20) -> list[dict]:
    """Result dicts of a run: ``points`` are per-iteration learner stats of default_policy."""
    out = []
    for i, p in enumerate(points):
        ret = returns[i] if returns else 20.0 + 10 * i
        out.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
                    "env_runners": {"episode_return_mean": ret, "num_episodes": episodes,
                                    "num_episodes_lifetime": episodes * (i + 1)},
                    "learners": {"default_policy": dict(p), "__all_modules__": {"num_env_steps_trained": 1000}}})
    return out


def _codes(events, status=C.WARN):
    return [e.code for e in events if C.STATUS_RANK[e.status] >= C.STATUS_RANK[status]]


def _healthy(n: int = 12) -> list[dict]:
    return [{"entropy": LOG2 * (1 - 0.01 * i), "mean_kl_loss": 0.01 + 0.002 * (i % 3), "policy_loss": 0.05 * (-1) ** i,
             "vf_loss": 9.5, "total_loss": 9.6, "default_optimizer_learning_rate": 5e-5} for i in range(n)]


def test_a_healthy_learning_run_is_silent():
    assert diagnose_curves(_run(_healthy()), config=PPO, action_space=gym.spaces.Discrete(2)) == []


def test_entropy_collapse_needs_the_steep_fall_and_names_entropy_coeff_from_the_config():
    pts = [{**p, "default_optimizer_learning_rate": 0.05} for p in
           _healthy(3) + [{**_healthy(1)[0], "entropy": e} for e in (0.3, 0.1, 0.02, 0.01)]]
    ev = diagnose_curves(_run(pts), config={**PPO, "lr": 0.05}, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.ENTROPY_COLLAPSE]
    assert f.status == C.FAIL and f.evidence["entropy_ratio"] < 0.05
    knobs = {k["knob"]: k for k in f.evidence["knobs"]}
    assert knobs["entropy_coeff"]["current"] == 0.0 and knobs["entropy_coeff"]["value"] == 0.01
    assert knobs["lr"]["current"] == 0.05 and knobs["lr"]["value"] == 0.005
    assert "config.training(entropy_coeff=0.01)" in f.message


def _collapsed_at_once(first_iteration: int) -> list[dict]:
    """A discrete policy already near deterministic when first read, then flat."""
    pts = [{**p, "entropy": LOG2 * r, "default_optimizer_learning_rate": 0.05}
           for p, r in zip(_healthy(4), (1e-3, 1.4e-7, 2e-6, 2e-6))]
    run = _run(pts, returns=[20.0, 21.0, 22.0, 23.0])
    for i, res in enumerate(run):
        res["training_iteration"] = first_iteration + i
    return run


def test_an_entropy_collapsed_inside_the_first_iteration_is_found_at_the_second():
    """lr=0.05 with 10 epochs: RLlib's fresh near-uniform policy is at 0.1 % of its maximum
    entropy by the end of iteration 1 -- no earlier reading to fit a fall on, yet a fall."""
    ev = diagnose_curves(_collapsed_at_once(1), config={**PPO, "lr": 0.05}, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.ENTROPY_COLLAPSE]
    assert f.status == C.FAIL and f.iteration == 2 and "inside the first iteration" in f.message


def test_a_low_entropy_first_read_after_a_resume_is_not_a_collapse_inside_it():
    """Restored from a checkpoint (first reading at iteration 40): the policy may have converged
    before; with the return rising nothing says it collapsed."""
    ev = diagnose_curves(_collapsed_at_once(40), config={**PPO, "lr": 0.05}, action_space=gym.spaces.Discrete(2))
    assert C.ENTROPY_COLLAPSE not in _codes(ev)


def test_a_low_but_flat_entropy_on_a_rising_return_is_a_converged_policy_not_a_collapse():
    pts = [{**_healthy(1)[0], "entropy": 0.1} for _ in range(12)]
    ev = diagnose_curves(_run(pts, returns=[50 + 40 * i for i in range(12)]), config=PPO,
                         action_space=gym.spaces.Discrete(2))
    assert C.ENTROPY_COLLAPSE not in _codes(ev)


def test_entropy_is_normalised_by_the_action_space():
    assert max_entropy(gym.spaces.Discrete(4))[0] == pytest.approx(math.log(4))
    assert max_entropy(gym.spaces.MultiDiscrete([2, 3]))[0] == pytest.approx(math.log(6))
    h, d, kind = max_entropy(gym.spaces.Box(-2, 2, (3,)))
    assert kind == "box" and d == 3 and h == pytest.approx(3 * math.log(4))
    assert max_entropy(gym.spaces.Box(-math.inf, math.inf, (2,)))[0] is None
    # RLlib's normalize_actions (its default): the Gaussian lives in [-1, 1] per dimension
    h, d, kind = max_entropy(gym.spaces.Box(-100, 100, (3,)), normalized=True)
    assert d == 3 and h == pytest.approx(3 * math.log(2)) and kind.startswith("box")


def test_a_unit_gaussian_on_a_wide_box_is_judged_in_rllibs_normalized_action_space():
    """A fresh Gaussian (std 1: entropy 1.419 a dimension) over a [-100, 100] box: 2 % of the
    box's width, but RLlib's default normalize_actions samples it in [-1, 1] and unsquashes the
    action -- the policy is at full width there: silent with the return stalled. With
    normalize_actions=False the same entropy is a collapsed policy."""
    gaussian = 0.5 * math.log(2 * math.pi * math.e)
    pts = [{**p, "entropy": 3 * gaussian} for p in _healthy(12)]
    box = gym.spaces.Box(-100, 100, (3,))
    stalled = [20.0] * 12
    assert C.ENTROPY_COLLAPSE not in _codes(diagnose_curves(_run(pts, returns=stalled), config=PPO, action_space=box))
    raw = {**PPO, "normalize_actions": False}
    (f,) = [e for e in diagnose_curves(_run(pts, returns=stalled), config=raw, action_space=box)
            if e.code == C.ENTROPY_COLLAPSE]
    assert f.evidence["normalised_by"] == "box" and f.evidence["entropy_ratio"] == pytest.approx(
        math.sqrt(2 * math.pi * math.e) / 200, rel=1e-3)


def test_kl_spike_is_a_fail_with_a_smaller_lr_computed_from_the_current_one():
    pts = [{**p, "default_optimizer_learning_rate": 3e-4} for p in _healthy(8)]
    pts[6] = {**pts[6], "mean_kl_loss": 0.4}
    ev = diagnose_curves(_run(pts), config={**PPO, "lr": 3e-4}, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.KL_SPIKE]
    assert f.status == C.FAIL and f.iteration == 7
    lr = {k["knob"]: k for k in f.evidence["knobs"]}["lr"]
    assert lr["current"] == 3e-4 and lr["value"] == pytest.approx(3e-4 * math.sqrt(0.015 / 0.4), rel=0.05)


def test_kl_too_high_needs_a_stalled_return():
    pts = [{**p, "mean_kl_loss": 0.08} for p in _healthy(10)]
    assert C.KL_TOO_HIGH not in _codes(diagnose_curves(_run(pts), config=PPO, action_space=gym.spaces.Discrete(2)))
    flat = [60, 80, 100, 90, 70, 60, 58, 55, 57, 56]
    ev = diagnose_curves(_run(pts, returns=flat), config=PPO, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.KL_TOO_HIGH]
    assert {k["knob"] for k in f.evidence["knobs"]} >= {"lr", "clip_param", "num_epochs"}
    assert {k["knob"]: k for k in f.evidence["knobs"]}["num_epochs"]["value"] == 10


def test_kl_too_low_only_while_the_policy_stays_near_random_and_the_return_is_flat():
    pts = [{**p, "mean_kl_loss": 0.001, "entropy": LOG2 * 0.98} for p in _healthy(10)]
    ev = diagnose_curves(_run(pts, returns=[20.0] * 10), config=PPO, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.KL_TOO_LOW]
    assert {k["knob"]: k for k in f.evidence["knobs"]}["lr"]["value"] > 5e-5
    # the same KL on a converged policy (low entropy, return at its best) is silent
    conv = [{**p, "mean_kl_loss": 0.001, "entropy": LOG2 * 0.5} for p in _healthy(10)]
    assert diagnose_curves(_run(conv, returns=[500.0] * 10), config=PPO, action_space=gym.spaces.Discrete(2)) == []


def test_kl_rules_stay_off_when_rllib_does_not_compute_the_kl():
    pts = [{**p, "mean_kl_loss": 0.0} for p in _healthy(10)]
    assert diagnose_curves(_run(pts, returns=[20.0] * 10), config=PPO, action_space=gym.spaces.Discrete(2)) == []


def test_policy_loss_stuck_names_lambda_when_gae_lambda_is_high():
    pts = [{**p, "mean_kl_loss": 1e-5, "policy_loss": 1e-5, "entropy": LOG2 * 0.7} for p in _healthy(8)]
    ev = diagnose_curves(_run(pts), config=PPO, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.POLICY_LOSS_STUCK]
    assert {k["knob"]: k for k in f.evidence["knobs"]}["lambda_"]["value"] == 0.95


def test_value_dominates_only_in_a_shared_trunk_and_scales_vf_loss_coeff():
    pts = [{**p, "vf_loss": 9.0, "policy_loss": 0.05, "flow1": {"vf_pi_trunk_ratio": 3000.0}} for p in _healthy(6)]
    separate = {**PPO, "vf_loss_coeff": 1000.0}
    assert diagnose_curves(_run(pts), config=separate, action_space=gym.spaces.Discrete(2)) == []
    shared = {**separate, "model_config": {"vf_share_layers": True}}
    (f,) = [e for e in diagnose_curves(_run(pts), config=shared, action_space=gym.spaces.Discrete(2))
            if e.code == C.VALUE_DOMINATES]
    knob = {k["knob"]: k for k in f.evidence["knobs"]}["vf_loss_coeff"]
    assert knob["current"] == 1000.0 and knob["value"] == pytest.approx(3.3, rel=0.05)
    # a shared trunk at RLlib's default coefficient: measured ratio ~2.5-3.7, silent
    calm = [{**p, "flow1": {"vf_pi_trunk_ratio": 3.0}} for p in pts]
    assert diagnose_curves(_run(calm), config={**PPO, "model_config": {"vf_share_layers": True}},
                           action_space=gym.spaces.Discrete(2)) == []


def test_lr_decayed_to_nothing_while_the_policy_stopped_moving_proposes_a_floor():
    pts = [{**p, "default_optimizer_learning_rate": 3e-4 * (0.5 ** i), "mean_kl_loss": 0.001 if i > 3 else 0.01}
           for i, p in enumerate(_healthy(12))]
    rets = [20, 60, 100, 140, 130, 120, 110, 105, 100, 100, 100, 100]
    ev = diagnose_curves(_run(pts, returns=rets, episodes=100), config={**PPO, "lr": [[0, 3e-4], [12000, 0.0]]},
                         action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.LR_DECAYED]
    assert f.evidence["lr_first"] == 3e-4 and "lr=[[0, 0.0003]" in f.message


def test_an_lr_decayed_before_anything_was_learnt_is_named_on_a_noisy_return():
    """A schedule to 1e-9 by the third iteration: the policy is frozen (KL ~1e-9) and the return
    wanders around its first level (CartPole's ~20-50 at random), never flat enough to count as
    stalled, never beyond its noise: the rule names the decay. The same decay at the end of a
    run that learned (the return at its best) stays silent: annealing is not a fault."""
    lrs = [3e-4, 1e-4, 1e-9] + [1e-9] * 9
    frozen = [{**p, "default_optimizer_learning_rate": lr, "mean_kl_loss": 0.01 if lr > 1e-6 else 5e-9}
              for p, lr in zip(_healthy(12), lrs)]
    noisy = [40.0, 36.0, 44.0, 38.0, 47.0, 39.0, 45.0, 50.0, 41.0, 46.0, 52.0, 48.0]   # up and down, within its noise
    schedule = {**PPO, "lr": [[0, 3e-4], [2000, 1e-9]]}
    results = _run(frozen, returns=noisy, episodes=40)
    for r in results:   # the episodes' spread, from which the return's noise is known (random CartPole: 10-90)
        r["env_runners"].update(episode_return_min=10.0, episode_return_max=90.0)
    ev = diagnose_curves(results, config=schedule, action_space=gym.spaces.Discrete(2))
    (f,) = [e for e in ev if e.code == C.LR_DECAYED]
    assert f.status == C.WARN and "the return never rose beyond its noise" in f.message, f.message
    # the advice keeps the run's own schedule, each point at or above 10 % of the first lr
    assert "try lr [[0, 0.0003], [2000, 1e-09]] -> [[0, 0.0003], [2000, 3e-05]]" in f.message, f.message
    # a run that learnt a little before the schedule froze it (the corpus's PPO CartPole, lr to 1e-9
    # by step 2000: the return 20 -> 49, then noisy near 40, the EMA still catching up): |KL| ~1e-9
    learnt_then_frozen = [{**p, "default_optimizer_learning_rate": lr, "mean_kl_loss": 0.02 if lr > 1e-6 else 3e-9}
                          for p, lr in zip(_healthy(14), [1.5e-4] + [1e-9] * 13)]
    rets = [20.4, 26.8, 49.1, 47.8, 55.2, 35.1, 41.5, 37.3, 43.2, 48.0, 39.1, 38.3, 41.6, 47.5]
    results = _run(learnt_then_frozen, returns=rets, episodes=25)
    for r, ret in zip(results, rets):   # a narrow spread: the rise to ~45 is beyond the noise (it learnt)
        r["env_runners"].update(episode_return_min=ret - 10.0, episode_return_max=ret + 15.0)
    (f,) = [e for e in diagnose_curves(results, config=schedule, action_space=gym.spaces.Discrete(2))
            if e.code == C.LR_DECAYED]
    assert "the policy did not move for 5 iterations (|KL| < 1e-06)" in f.message, f.message
    annealed = [{**p, "default_optimizer_learning_rate": 3e-4 * (1 - i / 12) + 1e-9, "mean_kl_loss": 0.01 if i < 8 else 1e-4}
                for i, p in enumerate(_healthy(12))]
    learnt = [20, 80, 160, 260, 380, 470, 495, 500, 500, 499, 500, 500]
    ev = diagnose_curves(_run(annealed, returns=learnt, episodes=10), config={**PPO, "lr": [[0, 3e-4], [12000, 0.0]]},
                         action_space=gym.spaces.Discrete(2))
    assert C.LR_DECAYED not in _codes(ev), [(e.code, e.message) for e in ev]


def test_knobs_read_a_live_config_object_and_its_dict_alike():
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    cfg = PPOConfig().training(lr=1e-3, vf_loss_coeff=5.0).rl_module(
        model_config=DefaultModelConfig(vf_share_layers=True))
    for source in (cfg, cfg.to_dict()):
        k = Knobs.from_config(source)
        assert (k.lr, k.vf_loss_coeff, k.vf_share_layers, k.kl_target) == (1e-3, 5.0, True, 0.01)


def test_gradient_rules_name_the_layer():
    rules = LayerRules("default_policy")
    fired = []
    for it in range(3):
        stats = {"flow1": {"traces": 5, "grad_norm": 1.0, "grad_nonfinite": 0,
                           "grad_rms": {"encoder.mlp.0": 0.01, "encoder.mlp.2": 0.02, "pi.net.mlp.0": 0.0,
                                        "vf.net.mlp.0": 0.05},
                           "dormant": {"encoder.mlp.1": 0.1}}}
        fired += rules.add(it, stats)
    (f,) = fired
    assert f.code == C.GRADIENT_ZERO and f.evidence["layers"] == ["pi.net.mlp.0"] and f.status == C.FAIL
    rules = LayerRules("m")
    out = []
    for it in range(8):
        norm = 1e6 if it == 7 else 1.0 + 0.1 * it
        out += rules.add(it, {"flow1": {"traces": 1, "grad_norm": norm, "grad_nonfinite": 0,
                                        "grad_rms": {"enc.mlp.0": 1e-6, "enc.mlp.2": 0.1, "enc.mlp.4": 0.1,
                                                     "critic.mlp.0": 100.0, "critic.mlp.2": 90.0},
                                        "dormant": {"a.act": 0.9}}})
    assert sorted(f.code for f in out) == [C.DORMANT_UNITS, C.GRADIENT_EXPLODING, C.GRADIENT_VANISHING]
    (v,) = [f for f in out if f.code == C.GRADIENT_VANISHING]
    assert v.evidence["layer"] == "enc.mlp.0" and v.evidence["stack"] == "enc.mlp"


def test_a_critic_at_a_thousand_times_the_actors_scale_is_not_vanishing():
    """Separate networks: vf_loss_coeff=1000 puts the critic's gradients ~1000x the actor's."""
    rules = LayerRules("default_policy")
    out = []
    for it in range(5):
        out += rules.add(it, {"flow1": {"traces": 1, "grad_norm": 500.0, "grad_nonfinite": 0,
                                        "grad_rms": {"encoder.actor_encoder.net.mlp.0": 4e-4,
                                                     "encoder.actor_encoder.net.mlp.2": 2.5e-4,
                                                     "pi.net.mlp.0": 1e-3,
                                                     "encoder.critic_encoder.net.mlp.0": 0.6,
                                                     "encoder.critic_encoder.net.mlp.2": 0.5,
                                                     "vf.net.mlp.0": 3.0}}})
    assert out == []


def _corpus(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name, space", [("ppo-default", gym.spaces.Discrete(2)), ("appo", gym.spaces.Discrete(2)),
                                         ("dqn", gym.spaces.Discrete(2)), ("sac", gym.spaces.Box(-2, 2, (1,))),
                                         ("multi-agent-ppo", gym.spaces.Discrete(2))])
def test_the_recorded_healthy_runs_stay_silent(name, space):
    """RLlib's defaults for each algorithm (the configs the corpus was recorded with)."""
    ev = diagnose_curves(_corpus(name), action_space=space)
    expected = [C.REWARD_DROP] if name == "appo" else []   # test_healthy_runs.py: APPO's real fall
    assert _codes(ev) == expected, [(e.code, e.message[:200]) for e in ev]


@pytest.mark.parametrize("reach, stats, knobs, cause, says", [
    ({"vf.net.mlp.0": 0}, {"vf_loss": 10.0, "vf_loss_unclipped": 2.2e5}, {"vf_clip_param": 10.0},
     "value_loss_clipped", "clamped at vf_clip_param=10"),
    ({"vf.net.mlp.0": 0}, {"vf_loss": 3.0, "vf_loss_unclipped": 3.0}, {"vf_loss_coeff": 0.0},
     "value_loss_off", "vf_loss_coeff=0"),
    ({"vf.net.mlp.0": 0}, {"vf_loss": 3.0, "vf_loss_unclipped": 3.0}, {"vf_clip_param": 10.0},
     "zero_passed_back", "passes back exactly 0"),
    ({"vf.net.mlp.0": -1}, {"vf_loss": 10.0, "vf_loss_unclipped": 2.2e5}, {"vf_clip_param": 10.0},
     "not_in_loss", "no loss term uses it"),
    ({}, {}, {}, "unknown", "the model's forward does"),
    # PPO Pendulum, lr=0.05 (measured): the critic's tanh layers pinned at +-1, vf_clip_param out of the way
    ({"vf.net.mlp.0": 0}, {"vf_loss": 3.0, "vf_loss_unclipped": 3.0, "saturated": {"vf.net.mlp.0": 1.0}},
     {"vf_clip_param": 1e6, "lr": 0.05}, "activations_saturated", "sits at its bounds on 100%"),
    ({"vf.net.mlp.0": 0}, {"vf_loss": 3.0, "vf_loss_unclipped": 3.0, "saturated": {"vf.net.mlp.0": 0.4}},
     {"vf_clip_param": 1e6}, "zero_passed_back", "passes back exactly 0"),
    # ... and a layer below a saturated one of its own stack: cut by it (measured: the critic's first layer)
    ({"encoder.critic_encoder.net.mlp.0": 0, "encoder.critic_encoder.net.mlp.2": 0},
     {"vf_loss": 3.0, "saturated": {"encoder.critic_encoder.net.mlp.0": 0.0, "encoder.critic_encoder.net.mlp.2": 1.0}},
     {"vf_clip_param": 1e6, "lr": 0.05}, "activations_saturated", "after encoder.critic_encoder.net.mlp.2 sits"),
])
def test_gradient_zero_names_the_loss_term_that_cuts_the_layer(reach, stats, knobs, cause, says):
    """Which cause is named follows from where the gradient stops: exact zeros arriving at a
    value layer while the value loss sits at its clip is the clip; no gradient arriving at all
    is an output the loss never uses (a detach), never the clip."""
    rules = LayerRules("default_policy", Knobs.from_config(knobs))
    fired = []
    stats = dict(stats)
    saturated = stats.pop("saturated", {})
    for it in range(2):
        fired += rules.add(it, {**stats, "flow1": {"traces": 1, "grad_norm": 1.0, "grad_nonfinite": 0, "reach": reach,
                                                   "grad_rms": {**({k: 0.0 for k in reach} or {"vf.net.mlp.0": 0.0}),
                                                                "pi.net.mlp.0": 0.1},
                                                   "saturated": saturated}})
    (f,) = fired
    assert f.code == C.GRADIENT_ZERO and f.evidence["cause"] == cause and says in f.message, f.message
    if cause == "activations_saturated":
        assert [(k["knob"], k["value"]) for k in f.evidence["knobs"]] == [("lr", 0.005), ("grad_clip", 0.5)]
    if cause == "value_loss_clipped":
        (k,) = f.evidence["knobs"]
        assert (k["knob"], k["current"], k["value"]) == ("vf_clip_param", 10.0, 440000.0)


def _ppo_traced(fractions, returns, kl=0.01, entropy=0.6, policy_loss=-0.02):
    out = []
    for i, (frac, ret) in enumerate(zip(fractions, returns)):
        stats = {"entropy": entropy, "mean_kl_loss": kl, "policy_loss": policy_loss, "vf_loss": 1.0,
                 "default_optimizer_learning_rate": 3e-4,
                 "flow1": {"traces": 1, "clipped": frac * 1000, "ratios": 1000}}
        out.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
                    "env_runners": {"episode_return_mean": ret, "num_episodes": 20},
                    "learners": {"default_policy": stats}})
    return out


PPO_CFG = {"algo_class": "PPO", "lr": 3e-4, "clip_param": 0.2, "num_epochs": 30, "lambda": 0.95}
FLAT = [60, 80, 100, 90, 70, 60, 58, 55, 57, 56]


def test_a_saturated_clip_fraction_with_a_high_kl_is_clip_fraction_with_a_smaller_lr():
    (f,) = [e for e in diagnose_curves(_ppo_traced([0.45] * 10, [20.0 + 30 * i for i in range(10)], kl=0.08),
                                       config=PPO_CFG, action_space=gym.spaces.Discrete(2)) if e.code == C.CLIP_FRACTION]
    assert f.evidence["case"] == "saturated" and f.evidence["clip_fraction"] == pytest.approx(0.45)
    assert "45% of the probability ratios fall outside 1 +- clip_param (0.2)" in f.message and "KL 0.08" in f.message
    assert [k["knob"] for k in f.evidence["knobs"]] == ["lr", "num_epochs"] and f.evidence["knobs"][1]["value"] == 10


@pytest.mark.parametrize("fractions, returns, kl, algo", [
    ([0.12] * 10, FLAT, 0.08, "PPO"),                                # a healthy clip fraction, whatever else
    ([0.45] * 10, [20.0 + 30 * i for i in range(10)], 0.02, "PPO"),  # high but the KL in band, the return rising
    ([0.45] * 10, FLAT, 0.08, "APPO"),                               # ratios against a lagging behaviour policy
    ([0.0] * 10, [20.0 + 30 * i for i in range(10)], 0.001, "PPO"),  # never at the clip but learning
])
def test_the_clip_fraction_is_silent_without_its_second_signal(fractions, returns, kl, algo):
    events = diagnose_curves(_ppo_traced(fractions, returns, kl=kl), config={**PPO_CFG, "algo_class": algo},
                             action_space=gym.spaces.Discrete(2))
    assert [e for e in events if e.code == C.CLIP_FRACTION] == []


def test_a_clip_that_never_binds_on_a_stalled_exploring_policy_is_clip_fraction_with_a_larger_lr():
    (f,) = [e for e in diagnose_curves(_ppo_traced([0.0] * 10, FLAT, kl=0.001), config=PPO_CFG,
                                       action_space=gym.spaces.Discrete(2)) if e.code == C.CLIP_FRACTION]
    assert f.evidence["case"] == "never_reached" and f.evidence["knobs"][0]["knob"] == "lr"
    assert f.evidence["knobs"][0]["value"] > 3e-4


def test_policy_loss_stuck_says_what_the_measured_clip_fraction_says():
    def stuck(frac):
        (f,) = [e for e in diagnose_curves(_ppo_traced([frac] * 8, FLAT, kl=1e-5, policy_loss=1e-5), config=PPO_CFG,
                                           action_space=gym.spaces.Discrete(2)) if e.code == C.POLICY_LOSS_STUCK]
        return f
    clipped = stuck(0.8)
    assert "clip fraction is 80%: most ratios sit past the clip" in clipped.message
    assert clipped.evidence["knobs"][0]["knob"] == "lr" and clipped.evidence["knobs"][0]["value"] < 3e-4
    flat = stuck(0.0)
    assert "the clip is not what stops it: the advantages carry no signal" in flat.message


def test_a_policy_collapsed_onto_one_action_is_the_cause_of_its_zero_gradient_not_the_forward():
    """PPO CartPole lr=0.05 (measured): the entropy reaches 0 by iteration 2 and the actor's
    layers get exact zeros; the critic's are judged apart."""
    rules = LayerRules("default_policy", Knobs.from_config({"entropy_coeff": 0.0, "lr": 0.05}))
    fired = []
    for it in range(2):
        fired += rules.add(it, {"flow1": {"traces": 1, "grad_norm": 1.0, "grad_nonfinite": 0,
                                          "reach": {"encoder.actor_encoder.net.mlp.0": 0, "vf.net.mlp.0": 0},
                                          "grad_rms": {"encoder.actor_encoder.net.mlp.0": 0.0, "vf.net.mlp.0": 0.0}}},
                           entropy_ratio=1e-9)
    by_cause = {f.evidence["cause"]: f for f in fired}
    assert set(by_cause) == {"policy_collapsed", "zero_passed_back"}, [f.message for f in fired]
    collapsed = by_cause["policy_collapsed"]
    assert collapsed.evidence["layers"] == ["encoder.actor_encoder.net.mlp.0"] and "ENTROPY_COLLAPSE" in collapsed.message
    assert collapsed.evidence["knobs"][0]["knob"] == "entropy_coeff"
    assert by_cause["zero_passed_back"].evidence["layers"] == ["vf.net.mlp.0"]


def test_a_nonfinite_update_fails_once_naming_its_dump_and_a_finite_run_stays_silent():
    """LEARNER_NONFINITE from the NaN guard's counts (every update, traced or not); the dump's
    name travels as one number (common/schema.py); the traced GRADIENT_EXPLODING does not say it twice."""
    from flow1_ray.common import schema as S

    rules = LayerRules("default_policy")
    assert rules.add(0, {"flow1": {"nonfinite_loss": 0, "nonfinite_grad": 0}}) == []
    rid = S.learner_repro_id(0, 4242, 1)
    (f,) = rules.add(1, {"flow1": {"nonfinite_loss": 3, "nonfinite_grad": 3, "repro_id": rid, "traces": 1,
                                   "grad_norm": float("nan"), "grad_nonfinite": 6, "grad_rms": {}}})
    assert f.code == C.LEARNER_NONFINITE and f.status == C.FAIL
    assert f.evidence["repro"] == "repro/learner0-pid4242-001-learner_nonfinite"
    assert re.search(r"its loss was NaN/inf on 3 update\(s\) and a gradient was NaN/inf on 3 checked update\(s\).*"
                     r"repro/learner0-pid4242-001-learner_nonfinite", f.message)
    assert rules.add(2, {"flow1": {"nonfinite_loss": 1, "repro_id": rid}}) == []   # once per module
    quiet = LayerRules("m").add(0, {"flow1": {"nonfinite_grad": 1}})[0]
    assert quiet.evidence["repro"] is None and "no dump of it reached the run directory" in quiet.message


def test_the_learner_dump_id_round_trips_and_refuses_what_is_not_one():
    from flow1_ray.common import schema as S

    for rank, pid, n in ((0, 1, 1), (3, 4194303, 999), (15, 77, 2)):
        assert S.learner_repro_entry(S.learner_repro_id(rank, pid, n), "X") == \
            f"repro/{S.repro_entry_name('learner', rank, pid, n, 'X')}"
    for bad in (None, float("nan"), float("inf"), 0.0, -5.0, 1.5, "x"):
        assert S.learner_repro_entry(bad, "X") is None
