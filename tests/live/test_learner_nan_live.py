"""A PPO whose value head produces inf on one planted observation (tests/envs/nan_learner.py),
on a real Learner actor: the NaN guard catches the update whose loss is NaN, LEARNER_NONFINITE
names its repro/ entry (sent from the Learner's process to the driver's run directory), and
``flow1 replay`` runs the update again on the CPU and names the layer that made the inf, the
row it made it on and the line of code; the spike, outside the env's declared Box, is
OBS_OUT_OF_BOUNDS too, whose dump replays the sub-env's life to that step. Unit half: tests/checks/test_learner_curves.py (the
rule) and tests/rundir/test_repro.py (the entry read as untrusted input)."""

from __future__ import annotations

import json
import re
import time

import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C
from test_rllib_callbacks import Run

pytestmark = pytest.mark.slow


def test_a_value_head_that_overflows_on_a_planted_observation_replays_to_its_layer(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from nan_learner import CoshValuePPO, PlantedObs

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    config = (PPOConfig().environment(PlantedObs, env_config={"episode": 1, "at": 5, "value": 1e5}).callbacks(cb)
              .rl_module(rl_module_spec=RLModuleSpec(module_class=CoshValuePPO,
                                                     model_config={"fcnet_activation": "relu"}))
              .env_runners(num_env_runners=0).learners(num_learners=1)
              .training(train_batch_size_per_learner=200, minibatch_size=64, num_epochs=1))
    algo = config.build_algo()
    try:
        result = algo.train()   # the first episode (checked by the live checks on every runner) carries the spike
        run = Run(result)
        evs = run.wait_events(lambda e: {C.LEARNER_NONFINITE, C.OBS_OUT_OF_BOUNDS} <= {x["code"] for x in e},
                              timeout=30)
    finally:
        algo.stop()
    (f,) = [e for e in evs if e["code"] == C.LEARNER_NONFINITE]
    ev = json.loads(f["evidence"])
    assert f["status"] == C.FAIL and ev["loss_updates"] >= 1 and ev["repro"].startswith("repro/learner0-pid")
    assert C.GRADIENT_EXPLODING not in {e["code"] for e in evs}   # one cause, said once
    entry = run.dir / ev["repro"]
    t0 = time.time()
    while not (entry / "manifest.json").exists() and time.time() - t0 < 20:   # sent fire-and-forget
        time.sleep(0.2)
    man = json.loads((entry / "manifest.json").read_text())
    assert man["kind"] == "learner" and man["failure"]["loss"] == {"default_policy": "nan"}
    assert man["learner"]["modules"]["default_policy"]["class"] == "nan_learner:CoshValuePPO"
    assert man["node_id"] and man["pid"] != __import__("os").getpid()   # made in the Learner actor's process

    from flow1_ray.replay import REPRODUCED, play

    out = play(entry)
    assert out["result"] == REPRODUCED and out["unit"] == "update" and out["step"] == 1, out
    up = out["upstream"]   # the advantages came in NaN: GAE on the train batch, where the spike is
    assert up["op"] == "torch.cosh" and up["layer"] == "vf.1" and up["rows"] and up["inputs_max"] > 100, up
    assert "forward (nan_learner.py" in up["frame"] and "torch.cosh(x)" in up["frame"]
    assert any("batch column advantages came into the update NaN/inf" in s for s in out["came_in"]), out
    assert re.search(r"module 'default_policy''s loss is nan; .*advantages came into the update NaN/inf.*"
                     r"torch.cosh in layer vf.1 made a NaN/inf from finite inputs", out["nonfinite"])
    # the env side of the same spike: outside the declared Box, its sub-env's life replays to it
    (oob,) = [e for e in evs if e["code"] == C.OBS_OUT_OF_BOUNDS]
    (env_entry,) = json.loads(oob["evidence"])["repro"]
    out = play(run.dir / env_entry)
    assert out["result"] == REPRODUCED and out["step"] == 5, out
    assert "the observation of step 5 is outside the observation space: 9.999e+04 beyond the bounds" in \
        out["nonfinite"], out
    # one diagnosis: the env's spike first, the Learner's NaN following from it, and how to replay it
    from flow1_ray.report.rundir import load_run_report

    d = load_run_report(run.dir).diagnosis()
    assert d["primary"]["code"] == C.OBS_OUT_OF_BOUNDS, d["primary"]
    assert d["reproduce"] == f"flow1 replay {run.dir}/{env_entry}", d
    assert C.LEARNER_NONFINITE in json.dumps(d), d


def test_a_nan_gradient_under_a_finite_loss_is_caught_on_a_traced_update_and_replays_to_its_backward(
        ray_session, tmp_path):
    """A value-consistency penalty whose RMS is exactly 0 (tests/envs/nan_learner.py): every loss
    is finite, the gradient is NaN. The traced first update finds it, LEARNER_NONFINITE names the
    dump, and the replay backpropagates under autograd's anomaly detection: the square's backward
    (``sqrt``'s inf times 0) returned NaN, named with its forward line."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from nan_learner import RmsPenaltyPPO

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    config = (PPOConfig().environment("CartPole-v1").callbacks(cb)
              .rl_module(rl_module_spec=RLModuleSpec(module_class=RmsPenaltyPPO))
              .env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1))
    algo = config.build_algo()
    try:
        run = Run(algo.train())
        evs = run.wait_events(lambda e: any(x["code"] == C.LEARNER_NONFINITE for x in e), timeout=30)
    finally:
        algo.stop()
    (f,) = [e for e in evs if e["code"] == C.LEARNER_NONFINITE]
    ev = json.loads(f["evidence"])
    assert ev["loss_updates"] == 0 and ev["grad_updates"] >= 1, ev
    entry = run.dir / ev["repro"]
    t0 = time.time()
    while not (entry / "manifest.json").exists() and time.time() - t0 < 20:
        time.sleep(0.2)
    man = json.loads((entry / "manifest.json").read_text())
    assert man["failure"]["nonfinite"] == "gradient" and man["failure"]["loss"] == {}, man["failure"]
    assert any(p.startswith("vf.") for p in man["failure"]["grads"]["default_policy"]), man["failure"]

    from flow1_ray.replay import REPRODUCED, play

    out = play(entry)
    assert out["result"] == REPRODUCED and out["loss"] == {} and out["first"] is None, out
    # sqrt's backward at 0 returns inf; the square's backward multiplies it by 0: the first NaN
    assert out["anomaly"]["backward"] == "PowBackward0", out
    assert "nan_learner.py" in out["anomaly"]["forward_line"], out
    assert "the backward of PowBackward0 returned NaN (its forward: compute_values (nan_learner.py:" in out["nonfinite"]
    from flow1_ray.report.rundir import load_run_report

    d = load_run_report(run.dir).diagnosis()
    assert d["primary"]["code"] == C.LEARNER_NONFINITE and d["reproduce"] == f"flow1 replay {run.dir}/{ev['repro']}", d
    assert "nonfinite_update" in json.dumps(d), d
