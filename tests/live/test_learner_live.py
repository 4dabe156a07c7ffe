"""The learner side on real, short RLlib runs made sick on purpose (PPO CartPole, seed 0),
and `flow1 diagnose` on the result.json of a plain Tune run made without flow1.

Each sick run must be named with its code and a knob value computed from *that* run's
config; the healthy run must stay silent while its Learner is traced (num_learners=1: the
tracing lives in the learner actor)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flow1_ray import Flow1Callbacks, load_events, load_learner
from flow1_ray.common import codes as C

pytestmark = pytest.mark.slow


def _ppo(cb, **training):
    from ray.rllib.algorithms.ppo import PPOConfig

    return (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
            .env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=1000, **training))


def _train(config, iterations: int) -> tuple[list[dict], list[dict], Path]:
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()
    run_dir = Path(results[-1]["flow1"]["run_dir"])
    return results, load_events(run_dir).to_pylist(), run_dir


def _one(events: list[dict], code: str) -> dict:
    found = [e for e in events if e["code"] == code]
    assert len(found) == 1, [(e["code"], e["message"][:160]) for e in events]
    return {**found[0], "evidence": json.loads(found[0]["evidence"])}


def _knob(event: dict, name: str) -> dict:
    return {k["knob"]: k for k in event["evidence"]["knobs"]}[name]


def test_a_huge_learning_rate_spikes_the_kl_collapses_the_entropy_and_the_guard_stops(sick_run):
    """The sick run (tests/conftest.py: lr 0.05, 10 epochs, on_fail="checkpoint+stop")."""
    results, events, run_dir = sick_run["results"], sick_run["events"], sick_run["run_dir"]
    spike = _one(events, C.KL_SPIKE)
    assert spike["status"] == C.FAIL and spike["iteration"] == 1
    lr = _knob(spike, "lr")
    kl = spike["evidence"]["kl"]
    assert lr["current"] == 0.05 and lr["value"] == pytest.approx(0.05 * max(0.05, min(0.5, (0.015 / kl) ** 0.5)),
                                                                  rel=0.05)
    collapse = _one(events, C.ENTROPY_COLLAPSE)
    assert collapse["evidence"]["entropy_ratio"] < 0.2 and collapse["evidence"]["normalised_by"] == "discrete"
    assert _knob(collapse, "entropy_coeff")["value"] == 0.01 and "entropy_coeff=0.01" in collapse["message"]
    # the traced updates measure the clip fraction: most ratios past clip_param at iteration 1. CLIP_FRACTION
    # (a median over 3 traced iterations) follows where the overshoot lasts; on some CPUs the policy is
    # already deterministic at iteration 2 (every ratio 1, clip fraction 0: dead, no longer overshooting)
    fractions = [r["clip_fraction"] for r in load_learner(run_dir).to_pylist()
                 if r["kind"] == "module" and r["clip_fraction"] is not None]
    assert fractions[0] > 0.3, fractions
    lasting = any(np.median(fractions[i:i + 3]) > 0.3 for i in range(len(fractions) - 2))
    clips = [e for e in events if e["code"] == C.CLIP_FRACTION]
    assert len(clips) == int(lasting), (fractions, clips)
    for clip in clips:
        clip = {**clip, "evidence": json.loads(clip["evidence"])}
        assert clip["evidence"]["case"] == "saturated" and clip["evidence"]["clip_fraction"] > 0.3
        assert clip["evidence"]["clip_param"] == 0.3 and _knob(clip, "lr")["value"] < 0.05
    # a zero gradient of the collapsed policy's layers is named as the collapse, never "fix the forward"
    for zero in [e for e in events if e["code"] == C.GRADIENT_ZERO]:
        cause = json.loads(zero["evidence"])["cause"]
        assert cause in ("policy_collapsed", "value_loss_clipped", "activations_saturated", "zero_passed_back"), \
            zero["message"]
        assert "no knob fixes this" not in zero["message"]
    # on_fail: a checkpoint beside the run directory, and every result from the FAIL on says done
    guard = _one(events, C.GUARD_ACTION)
    assert guard["evidence"]["finding"] == C.KL_SPIKE and Path(guard["evidence"]["checkpoint"]).is_dir()
    assert Path(guard["evidence"]["checkpoint"]).parent == run_dir.parent
    assert [r.get("done") for r in results] == [True] * 4
    assert results[0]["flow1"]["learner"]["stopped_by"] == C.KL_SPIKE


def test_the_sick_run_is_one_diagnosis_the_spike_first_the_lr_to_change(sick_run):
    """Read back as a user's report: one primary symptom (the KL spike at iteration 1), what
    follows from it under it, the step as its most likely cause on independent signals, and the
    change as the config line of the run's own lr (the what-if test may have run already: then
    the standing is its verdict)."""
    from flow1_ray.report.rundir import load_run_report

    rep = load_run_report(sick_run["run_dir"])
    assert rep.settings["lr"] == 0.05 and rep.settings["num_epochs"] == 10 and rep.settings["algo_class"] == "PPO"
    d = rep.diagnosis()
    assert d["state"] == "sick" and d["primary"]["code"] == C.KL_SPIKE and d["primary"]["iteration"] == 1, d["line"]
    assert C.ENTROPY_COLLAPSE in {c["code"] for c in d["chain"]}, d["chain"]
    top = d["causes"][0]
    assert top["id"] == "step_too_large", d["causes"]
    assert top["standing"] in ("supported by 2 or more independent signals", "tested: held"), top
    assert {"KL", "entropy", "lr", "num_epochs"} <= {x["signal"] for x in top["for"]}
    ch = top["change"]
    assert ch["knob"] == "lr" and ch["before"] == "config.training(lr=0.05)" and ch["after"].startswith(
        "config.training(lr=") and 0 < ch["value"] < 0.05


def test_a_zeroed_policy_head_is_named_gradient_zero(ray_session, tmp_path):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from sick_modules import ZeroedPolicyHead

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, grad_every=10,
                                     state_actions=False)
    config = _ppo(cb, num_epochs=2).rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroedPolicyHead))
    results, events, run_dir = _train(config, 3)
    zero = _one(events, C.GRADIENT_ZERO)
    layers = zero["evidence"]["layers"]
    # the cut head and the actor encoder below it (it feeds only that head); the critic still learns
    assert zero["status"] == C.FAIL and "pi.net.mlp.0" in layers, zero["evidence"]
    assert all(layer.startswith(("pi.", "encoder.actor_encoder.")) for layer in layers), layers
    # the cause: the head is in the loss's graph, but only zeros come back through the `* 0`
    assert zero["evidence"]["cause"] == "zero_passed_back" and set(zero["evidence"]["reach"].values()) == {0}
    assert "passes back exactly 0" in zero["message"] and zero["evidence"]["knobs"] == []
    rows = load_learner(run_dir).to_pylist()
    assert any(r["kind"] == "grad" and r["layer"].startswith("pi.") and r["grad_rms"] == 0.0 for r in rows)


def test_ppo_on_pendulum_with_rllibs_defaults_names_the_value_clip_that_cuts_the_critics_gradient(
        ray_session, tmp_path):
    """The critic's gradient is exactly 0, but its forward is fine: every sample's squared value
    error (~2e5 on Pendulum's returns) is clamped at vf_clip_param=10. The finding says so and
    opens the clip to a value computed from the run; with that value the critic learns."""
    from ray.rllib.algorithms.ppo import PPOConfig

    def config(cb, **training):
        return (PPOConfig().environment("Pendulum-v1").callbacks(cb).debugging(seed=0)
                .env_runners(num_env_runners=0)
                .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=2, **training))

    def options(sub: str):
        return Flow1Callbacks.with_options(output_dir=str(tmp_path / sub), print_events=False, grad_every=10,
                                           state_actions=False)

    results, events, _ = _train(config(options("default")), 3)
    zero = _one(events, C.GRADIENT_ZERO)
    assert zero["status"] == C.FAIL and zero["evidence"]["cause"] == "value_loss_clipped", zero["message"]
    assert zero["evidence"]["layers"] and all(layer.startswith(("vf.", "encoder.critic_encoder."))
                                              for layer in zero["evidence"]["layers"])
    assert "vf_clip_param=10" in zero["message"] and "no knob" not in zero["message"]
    knob = _knob(zero, "vf_clip_param")
    unclipped = max(r["learners"]["default_policy"]["vf_loss_unclipped"] for r in results)
    assert knob["current"] == 10.0 and 1e4 < knob["value"] <= 2.1 * unclipped
    _, events, run_dir = _train(config(options("fixed"), vf_clip_param=knob["value"]), 2)
    # a healthy Gaussian policy: its entropy is judged in RLlib's normalized action space, silent
    assert [(e["code"], e["message"][:160]) for e in events if e["status"] != C.PASS] == []
    rows = [r for r in load_learner(run_dir).to_pylist() if r["kind"] == "grad" and r["layer"].startswith("vf.")]
    assert rows and all(r["grad_rms"] > 0 for r in rows)


def test_ppo_on_pendulum_with_a_huge_lr_names_the_gaussians_collapse_and_the_saturated_critic(ray_session, tmp_path):
    """lr=0.05 (measured): KL 1199 at iteration 1, the Gaussian's entropy -1.05 (std ~0.08 of
    the normalized [-1, 1] box) by 5, and the critic's tanh pinned at +-1: its layers get
    exactly 0 -- the saturated activation is named with the lr, never "fix the forward"."""
    from ray.rllib.algorithms.ppo import PPOConfig

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, grad_every=10,
                                     state_actions=False)
    config = (PPOConfig().environment("Pendulum-v1").callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=1, sample_timeout_s=20)   # the seeded batches measured
              .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=10, lr=0.05,
                        vf_clip_param=1e6))
    _, events, _ = _train(config, 5)
    assert _one(events, C.KL_SPIKE)["iteration"] == 1
    collapse = _one(events, C.ENTROPY_COLLAPSE)
    assert collapse["evidence"]["normalised_by"] == "box (normalized to [-1, 1])"
    assert collapse["evidence"]["entropy_max"] == pytest.approx(np.log(2.0))
    zero = _one(events, C.GRADIENT_ZERO)
    assert zero["evidence"]["cause"] == "activations_saturated", zero["message"]
    assert max(zero["evidence"]["saturated"].values()) >= 0.95 and _knob(zero, "lr")["value"] == 0.005


def test_a_value_loss_swamping_a_shared_trunk_is_value_dominates(ray_session, tmp_path):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, grad_every=10,
                                     state_actions=False)
    config = _ppo(cb, vf_loss_coeff=1000.0, num_epochs=2).rl_module(
        model_config=DefaultModelConfig(vf_share_layers=True))
    results, events, _ = _train(config, 4)
    value = _one(events, C.VALUE_DOMINATES)
    assert value["evidence"]["trunk_grad_ratio"] >= 100
    knob = _knob(value, "vf_loss_coeff")
    assert knob["current"] == 1000.0 and knob["value"] == pytest.approx(
        1000.0 * 10 / value["evidence"]["trunk_grad_ratio"], rel=0.05)
    assert not [e for e in events if e["status"] != C.PASS and e["code"] != C.VALUE_DOMINATES]


def test_a_healthy_run_traced_in_a_learner_actor_is_silent(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    """Also the issue's calibration: vf_loss_coeff=1000 with separate value and policy networks
    learns (Adam scales each network on its own) and must stay silent. A loss plateau of one
    iteration triggers the snapshots here (bounded to 2), taken from the learner actor."""
    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, grad_every=10,
                                     state_actions=False, loss_plateau_iters=1, snapshots_max=2, snapshot_rows=256)
    config = (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=0).learners(num_learners=1)
              .training(train_batch_size_per_learner=1000, num_epochs=3, vf_loss_coeff=1000.0, lr=1e-3))
    results, events, run_dir = _train(config, 5)
    assert [e for e in events if e["status"] != C.PASS] == []
    snaps = [e for e in events if e["code"] == C.LEARNER_SNAPSHOT]
    assert 1 <= len(snaps) <= 2 and len(list((run_dir / "snapshots").iterdir())) == len(snaps)
    for e in snaps:
        d = Path(json.loads(e["evidence"])["path"])
        obs = np.load(d / "default_policy" / "obs.npy", allow_pickle=False)
        adv = np.load(d / "default_policy" / "advantages.npy", allow_pickle=False)
        assert obs.shape[1:] == (4,) and 0 < len(obs) <= 256 and len(adv) == len(obs)
        meta = json.loads((d / "snapshot.json").read_text())
        assert meta["trigger"].startswith("loss_plateau") and meta["grad_rms"]["default_policy"]
    traced = results[-1]["learners"]["default_policy"]["flow1"]
    assert traced["traces"] > 0 and traced["grad_norm"] > 0 and traced["grad_rms"] and traced["dormant"]
    mine = results[-1]["flow1"]["learner"]
    assert 0.5 < mine["default_policy"]["entropy_ratio"] <= 1.0 and mine["return_ema"] > 0
    kinds = {r["kind"] for r in load_learner(run_dir).to_pylist()}
    assert kinds == {"module", "grad", "activation"}
    from flow1_ray.report.rundir import load_run_report   # flow1 report reads it back, no Ray

    summary = load_run_report(run_dir).summary["learner"]
    assert summary["modules"]["default_policy"]["iteration"] == 5 and len(summary["snapshots"]) == len(snaps)
    _the_report_shows_the_last_trace_in_network_order(run_dir)


def _network_order() -> list[str]:
    """The layers of PPO's default CartPole module, in the order of its parameters."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray.learner.layers import _layer_of

    spec = PPOConfig().environment("CartPole-v1").get_rl_module_spec(env=gym.make("CartPole-v1"))
    return list(dict.fromkeys(_layer_of(n) for n, _ in spec.build().named_parameters()))


def _the_report_shows_the_last_trace_in_network_order(run_dir: Path) -> None:
    """The HTML report's gradient table: the last iteration that holds a trace (a number in
    every row), its layers in the order of the model's parameters; the rows carry that
    order from the Learner actor (layer_index)."""
    import re

    from flow1_ray.report.html import render_html
    from flow1_ray.report.rundir import load_run_report

    grads = [r for r in load_learner(run_dir).to_pylist() if r["kind"] == "grad"]
    traced = max(r["iteration"] for r in grads if r["grad_rms"] is not None)
    page = render_html(load_run_report(run_dir), run_dir)
    (table,) = re.findall(r"<h2>Gradients \(last trace\)</h2>\s*<table>(.*?)</table>", page, re.S)
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(<td>.*?)</tr>", table, re.S)]
    assert [layer for _, layer, _, _ in rows] == _network_order(), rows
    assert {it for *_, it in rows} == {str(traced)} and all(float(rms) >= 0 for _, _, rms, _ in rows), rows
    assert all(isinstance(r["layer_index"], int) for r in grads), grads[:3]


def test_flow1_diagnose_reads_a_plain_tune_result_json(ray_session, tmp_path, cli_env):
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1").debugging(seed=0).env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=1000, lr=0.05, num_epochs=10))
    tune.Tuner("PPO", param_space=config, run_config=tune.RunConfig(
        storage_path=str(tmp_path), name="plain", stop={"training_iteration": 3}, verbose=0)).fit()
    (result_json,) = tmp_path.glob("plain/*/result.json")

    def diagnose(*args):
        return subprocess.run([sys.executable, "-m", "flow1_ray", "diagnose", *args], capture_output=True,
                              text=True, env=cli_env, timeout=120)

    sick = diagnose(str(result_json))
    assert sick.returncode == 1, sick.stderr
    assert "KL_SPIKE" in sick.stdout and "config.training(lr=" in sick.stdout
    assert "Traceback" not in sick.stderr
    healthy = tmp_path / "healthy.json"
    corpus = Path(__file__).resolve().parents[1] / "data" / "healthy" / "ppo-default" / "results.jsonl"
    healthy.write_text(corpus.read_text())
    ok = diagnose(str(healthy), "--env", "CartPole-v1")
    assert ok.returncode == 0 and "0 finding(s)" in ok.stdout, ok.stdout + ok.stderr
    for bad, text in ((tmp_path / "missing.json", None), (tmp_path / "bad.json", "{not json")):
        if text is not None:
            bad.write_text(text)
        out = diagnose(str(bad))
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr


def test_under_tune_on_fail_stop_ends_the_trial_at_the_first_fail(ray_session, tmp_path):
    from ray import tune

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path / "flow1"), print_events=False, on_fail="stop",
                                     state_actions=False)
    config = _ppo(cb, lr=0.05, num_epochs=10)
    tune.Tuner("PPO", param_space=config, run_config=tune.RunConfig(
        storage_path=str(tmp_path), name="guarded", stop={"training_iteration": 5}, verbose=0)).fit()
    (result_json,) = tmp_path.glob("guarded/*/result.json")
    lines = [json.loads(x) for x in result_json.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["done"] is True
    assert lines[0]["flow1"]["learner"]["stopped_by"] == C.KL_SPIKE
