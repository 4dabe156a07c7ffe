"""The off-policy and exploration rules on result dicts shaped as RLlib 2.60 writes them (DQN,
SAC: ``qf_mean/qf_max/qf_min``, ``td_error_mean``, ``alpha_value``, ``logps``,
``target_entropy``), and on the recorded healthy DQN and SAC runs, which must stay silent."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from flow1_ray.common import codes as C
from flow1_ray import diagnose_curves
from flow1_ray.checks.learner.curve_diagnosis import CurveDiagnosis
from flow1_ray.checks.learner.exploration import epsilon_at

CORPUS = Path(__file__).resolve().parents[1] / "data" / "healthy"
DQN = {"algo_class": "DQN", "lr": 0.5, "gamma": 0.99, "n_step": 1, "tau": 1.0, "target_network_update_freq": 500,
       "double_q": True, "grad_clip": 40.0, "explore": True}
SAC = {"algo_class": "SAC", "gamma": 0.99, "initial_alpha": 1e-4, "alpha_lr": 0.0, "critic_lr": 3e-4, "tau": 0.005,
       "explore": True}


def _dqn(qs: list[tuple[float, float, float]], reward_range=(1.0, 1.0), returns=None) -> list[dict]:
    out = []
    for i, (qmin, qmax, td) in enumerate(qs):
        stats = {"qf_mean": (qmin + qmax) / 2, "qf_min": qmin, "qf_max": qmax, "td_error_mean": td,
                 "default_optimizer_learning_rate": 0.5}
        if reward_range is not None:
            stats["flow1"] = {"traces": 1, "reward_min": reward_range[0], "reward_max": reward_range[1]}
        ret = returns[i] if returns else 25.0
        out.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 500 * (i + 1),
                    "env_runners": {"episode_return_mean": ret, "episode_return_max": ret * 2,
                                    "episode_len_mean": ret, "num_episodes": 20},
                    "learners": {"default_policy": stats}})
    return out


def _codes(results, config, code, space=None):
    return [e for e in diagnose_curves(results, config=config, action_space=space) if e.code == code]


def test_q_values_no_policy_can_earn_are_q_divergence_with_a_smaller_lr():
    """lr=0.5 on CartPole (measured): Q in [-77, 60] when every reward is +1 (Q may take [0, 100])."""
    (f,) = _codes(_dqn([(0.7, 1.4, 0.5), (-129, 112, 64.6), (-77, 60, 49.5), (-34, 35, 25.7)]), DQN, C.Q_DIVERGENCE)
    assert f.status == C.WARN and f.iteration == 3 and f.evidence["q_range"] == pytest.approx([0.0, 100.0])
    assert "qf_min -77 < 0" in f.message and "rewards in [1, 1] (traced train batches)" in f.message
    (lr,) = [k for k in f.evidence["knobs"] if k["knob"] == "lr"]
    assert (lr["current"], lr["value"]) == (0.5, 0.05) and "config.training(lr=0.05)" in f.message


def test_healthy_q_values_and_a_single_excursion_are_silent():
    healthy = [(0.4 + i, 1.4 + 5 * i, 0.5) for i in range(10)]
    assert _codes(_dqn(healthy), DQN, C.Q_DIVERGENCE) == []
    once = healthy[:4] + [(-60, 50, 40)] + healthy[5:]
    assert _codes(_dqn(once), DQN, C.Q_DIVERGENCE) == []
    # outside the range but with a small, steady TD error: a second signal is missing
    assert _codes(_dqn([(-60, 50, 0.5)] * 6), DQN, C.Q_DIVERGENCE) == []
    # no non-zero reward seen yet: nothing bounds Q
    assert _codes(_dqn([(-60, 50, 40)] * 6, reward_range=(0.0, 0.0)), DQN, C.Q_DIVERGENCE) == []


def test_without_tracing_the_episodes_returns_bound_q_and_a_target_copied_too_often_is_the_first_knob():
    """A plain result.json: no reward range, so +-max(max |return|, max |return| / mean length /
    (1 - gamma)): returns up to 50 over 25 steps bound Q by +-200."""
    config = {**DQN, "target_network_update_freq": 10}
    runaway = [(1, 2, 0.5), (-900, 800, 300), (-5000, 7000, 2000), (-3e4, 4e4, 9e3)]
    (f,) = _codes(_dqn(runaway, reward_range=None, returns=[25.0] * 4), config, C.Q_DIVERGENCE)
    assert "no reward range traced" in f.message and f.evidence["q_range"] == pytest.approx([-200.0, 200.0])
    assert [k["knob"] for k in f.evidence["knobs"]][:2] == ["target_network_update_freq", "lr"]
    assert f.evidence["knobs"][0]["value"] == 500


def _sac(alphas, logps, target=-1.0) -> list[dict]:
    return [{"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 200 * (i + 1),
             "env_runners": {"episode_return_mean": -1500.0, "episode_return_max": -900.0, "episode_len_mean": 200},
             "learners": {"default_policy": {"alpha_value": a, "logps": lp, "target_entropy": target,
                                             "qf_mean": -5.0 * (i + 1), "qf_max": -1.0, "qf_min": -6.0 * (i + 1),
                                             "td_error_mean": 4.0}}}
            for i, (a, lp) in enumerate(zip(alphas, logps))]


def test_a_fixed_tiny_alpha_with_the_entropy_under_its_target_is_alpha_collapse():
    """Measured: initial_alpha=1e-4, alpha_lr=0, actor_lr=3e-3 on Pendulum: logps 5 -> 10 (entropy -10)."""
    (f,) = _codes(_sac([1e-4] * 6, [5.0, 10.5, 9.7, 7.9, 6.4, 5.1]), SAC, C.ALPHA_COLLAPSE)
    assert f.iteration == 3 and "below its target" in f.message and f.evidence["alpha_frozen"] is True
    assert [(k["knob"], k["value"]) for k in f.evidence["knobs"]] == [("alpha_lr", 3e-4), ("initial_alpha", 1.0)]


def test_a_fixed_tiny_alpha_with_a_falling_entropy_above_target_is_alpha_collapse_too():
    (f,) = _codes(_sac([1e-4] * 6, [-0.55, -0.5, -0.45, -0.40, -0.30, -0.19]), SAC, C.ALPHA_COLLAPSE)
    assert "alpha does not move" in f.message


def test_healthy_sac_alpha_falling_above_its_target_entropy_is_silent():
    """Measured, RLlib defaults: alpha 1.0 -> 0.58 over 2,000 steps with the entropy ~0.68 > -1."""
    alphas = [0.99 - 0.045 * i for i in range(10)]
    assert _codes(_sac(alphas, [-0.68] * 10), {**SAC, "initial_alpha": 1.0, "alpha_lr": 3e-4}, C.ALPHA_COLLAPSE) == []
    # a tuned alpha that became small while the entropy sits above target: by design
    small = [2e-4 * 0.8 ** i for i in range(8)]
    assert _codes(_sac(small, [-1.5] * 8), {**SAC, "alpha_lr": 3e-4}, C.ALPHA_COLLAPSE) == []


def test_an_unreachable_target_entropy_sends_alpha_up_and_the_knob_is_auto():
    alphas = [1.0, 3.0, 12.0, 40.0, 150.0]
    config = {**SAC, "initial_alpha": 1.0, "alpha_lr": 3e-3, "target_entropy": 5.0}
    (f,) = _codes(_sac(alphas, [-0.6] * 5, target=5.0), config, C.ALPHA_EXPLODING, space=gym.spaces.Box(-2, 2, (1,)))
    assert f.iteration == 5 and "150x initial_alpha" in f.message
    assert [(k["knob"], k["value"]) for k in f.evidence["knobs"]] == [("target_entropy", "auto"), ("alpha_lr", 3e-4)]


@pytest.mark.parametrize("name", ["dqn", "sac", "ppo-default", "appo", "multi-agent-ppo"])
def test_the_recorded_healthy_runs_are_silent_on_the_new_rules(name):
    results = [json.loads(line) for line in (CORPUS / name / "results.jsonl").read_text().splitlines()]
    codes = {C.Q_DIVERGENCE, C.ALPHA_COLLAPSE, C.ALPHA_EXPLODING, C.EXPLORATION_OFF, C.EPSILON_SCHEDULE,
             C.POLICY_LAG, C.CLIP_FRACTION, C.TRAIN_EVAL_GAP}
    assert [e.code for e in diagnose_curves(results) if e.code in codes] == []
    if name in ("dqn", "sac"):   # the signals are there
        assert any("qf_max" in s for r in results for s in r["learners"].values())


def test_explore_false_in_training_is_exploration_off_once():
    results = _dqn([(0.5, 1.0, 0.4)] * 3)
    (f,) = _codes(results, {"algo_class": "PPO", "explore": False}, C.EXPLORATION_OFF)
    assert f.iteration == 1 and "config.env_runners(explore=True)" in f.message
    assert _codes(results, {"algo_class": "PPO", "explore": True}, C.EXPLORATION_OFF) == []
    # offline RL (BC, MARWIL, CQL on recorded data): no runner samples for training, nothing to explore
    assert _codes(results, {"algo_class": "BC", "explore": False, "input_": "/data/episodes"}, C.EXPLORATION_OFF) == []


@pytest.mark.parametrize("epsilon, starts, stalled, found", [
    ([[0, 1.0], [500, 0.05]], 1000, False, "before learning starts"),
    ([[0, 1.0], [10000, 0.05]], 1000, False, None),                 # RLlib's default
    ([[0, 1.0], [10_000_000, 0.05]], 1000, True, "still 0.998"),    # never ends within the run
    ([[0, 1.0], [10_000_000, 0.05]], 1000, False, None),            # ... but the return still rises
])
def test_an_epsilon_schedule_spent_before_learning_or_never_ending(epsilon, starts, stalled, found):
    rets = [50.0 + 1 for _ in range(60)] if stalled else [10.0 + 10 * i for i in range(60)]
    results = []
    for i, ret in enumerate(rets):
        results.append({"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
                        "env_runners": {"episode_return_mean": ret if i > 0 else 100.0, "num_episodes": 5}})
    got = _codes(results, {"epsilon": epsilon, "num_steps_sampled_before_learning_starts": starts}, C.EPSILON_SCHEDULE)
    if found is None:
        assert got == []
    else:
        (f,) = got
        assert found in f.message and f.evidence["knobs"][0]["knob"] == "epsilon"


def test_epsilon_at_interpolates_rllibs_schedule():
    assert epsilon_at([(0, 1.0), (10000, 0.05)], 5000) == pytest.approx(0.525)
    assert epsilon_at([(0, 1.0), (10000, 0.05)], 1e6) == 0.05 and epsilon_at([(0, 0.3)], 10) == 0.3


@pytest.mark.parametrize("name, kind", [("dqn", "Q-learning"), ("sac", "SAC")])
def test_flow1_diagnose_on_a_plain_dqn_or_sac_result_json_says_what_it_judged_and_what_it_cannot(
        tmp_path, cli_env, name, kind):
    """The recorded runs with flow1's own parts removed are what RLlib writes without flow1:
    the Q, TD error and temperature rules run on them; what needs tracing is listed."""
    import subprocess
    import sys

    plain = tmp_path / "result.json"
    lines = []
    for line in (CORPUS / name / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        r.pop("flow1", None)
        for stats in r["learners"].values():
            stats.pop("flow1", None)
        lines.append(json.dumps(r))
    plain.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "-m", "flow1_ray", "diagnose", str(plain), "--json", "-"],
                         capture_output=True, text=True, env=cli_env, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    gaps = report["not_assessable"]
    assert any("not assessable without Flow1Callbacks" in g and "GRADIENT_ZERO" in g for g in gaps), gaps
    assert any("Q_DIVERGENCE" in g and "episodes' returns" in g for g in gaps), gaps
    # the learner's own signals are all there: no "absent" line for this module, and no PPO signal asked for
    assert not [g for g in gaps if g.startswith("module ")], gaps
    assert not any("entropy / max entropy" in g for g in gaps) and report["verdict"].startswith("PASS, but ")
    # a diverging copy of the same file is judged: Q_DIVERGENCE from the returns' bound
    sick = []
    for i, line in enumerate(lines):
        r = json.loads(line)
        stats = r["learners"].get("default_policy")
        if stats is not None and i >= len(lines) - 3:
            stats.update(qf_max=1e5 * (i + 1), qf_min=-1e5, td_error_mean=1e4 * (i + 1))
        sick.append(json.dumps(r))
    plain.write_text("\n".join(sick) + "\n")
    out = subprocess.run([sys.executable, "-m", "flow1_ray", "diagnose", str(plain), "--json", "-"],
                         capture_output=True, text=True, env=cli_env, timeout=120)
    assert out.returncode == 0 and "Q_DIVERGENCE" in out.stderr, out.stderr
    assert [e["code"] for e in json.loads(out.stdout)["events"] if e["status"] != C.PASS] == [C.Q_DIVERGENCE], kind


#: measured, APPO CartPole (1 EnvRunner, 1 learner actor, 500-step batches, seed 0), per iteration:
#: (mean_IS, lag in updates, entropy, return)
APPO_HEALTHY = [(1.0, 2.5, 0.677, 24.3), (1.045, 5.62, 0.658, 37.9), (1.086, 5.58, 0.652, 47.5),
                (1.129, 5.69, 0.635, 40.6), (1.138, 5.53, 0.647, 49.3), (1.121, 5.65, 0.662, 83.6),
                (1.066, 5.63, 0.677, 92.3), (1.01, 5.66, 0.627, 140.2), (1.074, 5.7, 0.622, 147.5)]
APPO_LR_005 = [(1.0, 2.5, 0.259, 17.8), (1.534, 5.65, 0.002, 10.1), (1.68, 5.6, 0.002, 13.5),
               (1.786, 5.62, 0.003, 9.7), (1.815, 5.7, 0.015, 9.4)]


def _appo(rows):
    return [{"training_iteration": i + 1, "env_runners": {"episode_return_mean": ret, "num_episodes": 10},
             "learners": {"default_policy": {"mean_IS": m, "var_IS": 0.05, "diff_num_grad_updates_vs_sampler_policy": lag,
                                             "entropy": h, "mean_kl_loss": 0.0, "default_optimizer_learning_rate": 0.05}}}
            for i, (m, lag, h, ret) in enumerate(rows)]


def test_appo_with_a_large_lr_is_policy_lag_from_its_importance_ratios():
    config = {"algo_class": "APPO", "lr": 0.05, "broadcast_interval": 1, "circular_buffer_iterations_per_batch": 2}
    (f,) = _codes(_appo(APPO_LR_005), config, C.POLICY_LAG, space=gym.spaces.Discrete(2))
    assert f.iteration == 3 and f.evidence["mean_IS"] == 1.68 and f.evidence["policy_lag"] == 5.6
    assert "the entropy collapsing" in f.message and [k["knob"] for k in f.evidence["knobs"]] == ["lr"]
    assert f.evidence["knobs"][0]["value"] == 0.005


def test_healthy_appo_importance_ratios_are_silent():
    assert _codes(_appo(APPO_HEALTHY), {"algo_class": "APPO", "lr": 5e-4}, C.POLICY_LAG,
                  space=gym.spaces.Discrete(2)) == []


def test_a_critic_swinging_in_and_out_of_range_is_one_incident():
    swing = [(0.5, 1.0, 0.4), (-90, 80, 40), (-80, 70, 40), (5, 60, 30), (-70, 60, 40), (-75, 65, 45),
             (1, 50, 30), (-60, 60, 40), (-60, 60, 40)]
    assert len(_codes(_dqn(swing), DQN, C.Q_DIVERGENCE)) == 1
    # back in range for 6 iterations, then out again: a second incident, counted on the same row
    back = swing[:3] + [(1, 5, 0.5)] * 6 + [(-90, 80, 40)] * 2
    assert len(_codes(_dqn(back), DQN, C.Q_DIVERGENCE)) == 1
    diag = CurveDiagnosis(config=DQN)
    for r in _dqn(back):
        diag.add(r)
    assert diag.repeats["Q_DIVERGENCE:default_policy"] == {"count": 2, "first_iteration": 3, "last_iteration": 11}
    assert diag.values()["repeats"] == {"Q_DIVERGENCE:default_policy": 2}


def _impala(rows, traced_every=1):
    """IMPALA logs no importance ratio: flow1's tracing sums the clamped ratios of its traced
    updates (``flow1/is_sum``, ``flow1/is_n``); an iteration without a traced update has none."""
    out = []
    for i, (m, _lag, h, ret) in enumerate(rows):
        stats = {"entropy": h, "default_optimizer_learning_rate": 0.05, "vf_loss": 1.0}
        if i % traced_every == 0:
            stats["flow1"] = {"traces": 1, "is_sum": m * 500, "is_n": 500.0}
        out.append({"training_iteration": i + 1, "env_runners": {"episode_return_mean": ret, "num_episodes": 10},
                    "learners": {"default_policy": stats}})
    return out


def test_impala_lag_is_measured_by_the_tracing_and_judged_as_appos():
    config = {"algo_class": "IMPALA", "lr": 0.05, "broadcast_interval": 1}
    (f,) = _codes(_impala(APPO_LR_005), config, C.POLICY_LAG, space=gym.spaces.Discrete(2))
    assert f.iteration == 3 and f.evidence["mean_IS"] == pytest.approx(1.68)
    assert f.evidence["measured_by"] == "flow1 tracing" and "measured on traced updates" in f.message
    assert f.evidence["knobs"][0]["value"] == 0.005
    # untraced iterations in between neither count nor reset the run of high ratios
    (g,) = _codes(_impala(APPO_LR_005 + APPO_LR_005[-1:] * 3, traced_every=2), config, C.POLICY_LAG,
                  space=gym.spaces.Discrete(2))
    assert g.iteration == 5 and g.evidence["mean_IS"] == pytest.approx(1.815)   # traced at 1, 3, 5: 1.0, 1.68, 1.815
    assert _codes(_impala(APPO_HEALTHY), {"algo_class": "IMPALA", "lr": 5e-4}, C.POLICY_LAG,
                  space=gym.spaces.Discrete(2)) == []
