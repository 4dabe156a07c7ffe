"""``flow1 check --config``: a real EnvRunner built from an RLlib config samples with the config's
connectors and RLModule (no Ray: the runner samples in the test's process, as the check's child
does), and the PIPELINE rules name each planted fault (tests/envs/pipeline_faults.py) with its
code and stay silent on its correct twin and on RLlib's own set-ups of CartPole, Pendulum,
Hopper and Pong. The CLI half (its child processes, exit codes, bad input) at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from flow1_ray.checks.thresholds import DEFAULT
from flow1_ray.common import codes as C
from flow1_ray.common.errors import Flow1InputError
from flow1_ray.pipeline.check import drive_config
from flow1_ray.pipeline.config import ConfigTarget

#: a real RLlib EnvRunner samples in every test here: the live tier (conftest.py), not the fast one
pytestmark = pytest.mark.live

STEPS = 400


def _drive(path: str, steps: int = STEPS):
    _, findings, summary = drive_config(ConfigTarget(path), steps, 0, DEFAULT)
    return findings, summary


def _pipe(findings):
    return [f for f in findings if f.module == C.PIPELINE and f.status != C.PASS]


@pytest.mark.parametrize("path, code, pattern", [
    ("pipeline_faults:clip_tight", C.PIPE_OBS_CLIPPED,
     r"features reach the RLModule pinned at a bound: feature \d is at -?0\.05 .* on \d+% of \d+ steps where the env "
     r"gave \d+ distinct values .*ClipObservations"),
    ("pipeline_faults:stack_newest_first", C.PIPE_FRAME_ORDER,
     r"\(StackVectors\) stacks 4 frames newest first \(lags \[0, 1, 2, 3\]"),
    ("pipeline_faults:logits_scaled", C.PIPE_POLICY_COLLAPSED,
     r"the initial policy has already chosen: its median entropy is \d+\.\d% of the maximum \(log 2\)"),
    ("pipeline_faults:mean_unsquashed", C.PIPE_ACTION_CLIPPED,
     r"\d+% of the action components reached the env clipped at a bound of \[-1\] \.\. \[1\].*the Gaussian's mean "
     r"itself lies beyond the bounds on \d+% of them: the mean head has no squash"),
    ("pipeline_faults:undeclared_shape", C.PIPE_OBS_SHAPE,
     r"\(AppendsBias\) declares observations of shape \(4,\), .* but hands it \(5,\)"),
])
def test_a_planted_pipeline_fault_is_named_with_its_code(path, code, pattern):
    findings, _ = _drive(path)
    hits = [f for f in findings if f.code == code]
    assert hits and re.search(pattern, hits[0].message), [(f.code, f.message) for f in findings]
    # the fault is what is named: no other PIPELINE warning beside it (the shape's crash is its consequence)
    assert {f.code for f in _pipe(findings)} <= {code, C.PIPE_RUNNER_FAILED}


@pytest.mark.parametrize("path", ["pipeline_faults:clip_loose", "pipeline_faults:stack_oldest_first",
                                  "pipeline_faults:logits_plain", "pipeline_faults:mean_squashed",
                                  "pipeline_faults:mean_std_constant"])
def test_the_correct_twin_is_silent(path):
    findings, summary = _drive(path)
    assert _pipe(findings) == [], [(f.code, f.message) for f in findings]
    assert summary["steps"] == STEPS and summary["modules"][C.PIPELINE]["rows"] >= STEPS
    if "stack" in path:   # silent because the frames were read, not because they could not be
        assert not any("frames not judged" in n for n in summary["modules"][C.PIPELINE]["notes"])


@pytest.mark.parametrize("path", ["rllib_setups:ppo_cartpole", "rllib_setups:dqn_cartpole",
                                  "rllib_setups:ppo_pendulum", "rllib_setups:sac_pendulum",
                                  "rllib_setups:ppo_hopper", "rllib_setups:appo_pong"])
def test_rllibs_own_setups_are_silent(path):
    pytest.importorskip("cv2", reason="RLlib's Atari wrapper resizes frames with OpenCV") if "pong" in path else None
    findings, summary = _drive(path)
    assert [f for f in findings if f.status != C.PASS] == [], [(f.code, f.message) for f in findings]
    notes = summary["modules"][C.PIPELINE]["notes"]
    if "pong" in path:   # RLlib's FrameStacking read and found in RLlib's own order
        assert summary["modules"][C.PIPELINE]["pipeline"] == "FrameStacking" and not notes, notes


def test_an_rlmodule_rllib_cannot_build_for_the_space_is_named_at_its_setup():
    """RLlib's default RLModule on highway-env's 5x5 kinematics observation (no default encoder
    for a 2-D non-image space): the build fails, named as the RLModule's, not the env's."""
    pytest.importorskip("highway_env")
    findings, summary = _drive("rllib_setups:ppo_highway")
    (f,) = [f for f in findings if f.code == C.PIPE_RUNNER_FAILED]
    assert re.search(r"building the config's EnvRunner: the RLModule \(DefaultPPOTorchRLModule\) raised ValueError: "
                     r"No default encoder config for obs space=Box\(.*during setup\(\)", f.message), f.message
    assert summary["stopped_early"] == "the config's EnvRunner could not be built"


def test_a_connector_that_raises_is_named_with_its_pipeline_and_frame():
    findings, summary = _drive("pipeline_faults:raising_connector")
    (f,) = [f for f in findings if f.code == C.PIPE_RUNNER_FAILED]
    assert re.search(r"sampling at step \d+: the env-to-module connector RaisesAt raised KeyError: .*'speed' "
                     r"missing.* in __call__ \(pipeline_faults\.py:\d+\)", f.message), f.message
    assert summary["stopped_early"].startswith("sampling raised at step")
    assert f.evidence["component"] == "env-to-module connector" and f.evidence["user_frame"] is True


# --- the command -------------------------------------------------------------------------------


def _flow1(*args, env):
    return subprocess.run([sys.executable, "-m", "flow1_ray", "check", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_flow1_check_config_judges_the_env_and_its_pipeline_in_one_report(cli_env, tmp_path):
    r = _flow1("--config", "pipeline_faults:clip_tight", "--steps", "300", "--json", "-", "--fail-on", "WARN",
               "--output-dir", str(tmp_path / "run"), env=cli_env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]   # a WARN, and --fail-on WARN
    out = json.loads(r.stdout)
    rows = {(e["module"], e["code"], e["status"]) for e in out["events"]}
    assert (C.PIPELINE, C.PIPE_OBS_CLIPPED, C.WARN) in rows
    assert (C.OBS_FLOW, C.CHECKS_PASSED, C.PASS) in rows   # the env's own contract, checked first
    assert (tmp_path / "run" / "report.json").is_file()


@pytest.mark.parametrize("args, says", [
    (["--config", "no_such_module:cfg"], "cannot import module 'no_such_module'"),
    (["--env", "CartPole-v1", "--checkpoint", "x"], "--checkpoint needs --config"),
])
def test_bad_input_on_the_command_line_is_one_line_and_exit_2(cli_env, args, says):
    r = _flow1(*args, "--steps", "20", env=cli_env)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (r.returncode, r.stderr[-1500:])


@pytest.mark.parametrize("path, checkpoint, says", [
    ("pipeline_faults:ClipObservations", None, "expected an RLlib AlgorithmConfig"),
    ("pipeline_faults", None, "expected 'module:function'"),
    ("rllib_setups:ppo_multi_agent", None, "is a multi-agent config"),
    ("rllib_setups:ppo_cartpole", "/nonexistent", "holds no EnvRunner state"),
])
def test_what_cannot_be_judged_is_an_input_error(path, checkpoint, says):
    """Raised in the check's child, these reach the command as its one line and exit 2 (above)."""
    with pytest.raises(Flow1InputError, match=re.escape(says)):
        drive_config(ConfigTarget(path, checkpoint), 20, 0, DEFAULT)
