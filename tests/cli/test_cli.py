"""The real CLI as a subprocess, on tiny budgets (CleanRL-style smoke tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flow1_ray import load_events


def flow1(*args, env=None):
    return subprocess.run([sys.executable, "-m", "flow1_ray", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_clean_env_exits_0(cli_env):
    r = flow1("check", "--env", "CartPole-v1", env=cli_env)
    assert r.returncode == 0, r.stderr
    assert "| ENV_SPEC | PASS |" in r.stdout and "flow1 check: PASS" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour when not a terminal


def test_fail_fault_exits_1(cli_env):
    r = flow1("check", "--env", "zoo:DtypeTurnsFloat64", "--steps", "200", env=cli_env)
    assert r.returncode == 1
    assert "| ENV_SPEC | FAIL | OBS_DTYPE_MISMATCH obs dtype: expected float32, actual float64" in r.stdout
    # the end screen names where each raised code is explained
    (refs,) = [ln for ln in r.stdout.splitlines() if ln.startswith("what the codes mean (flow1's docs): ")]
    assert "reference/codes.md#obs_dtype_mismatch" in refs.split(": ", 1)[1].split(", ")


def test_fail_on_warn(cli_env):
    assert flow1("check", "--env", "zoo:InfoReused", "--steps", "100", env=cli_env).returncode == 0
    assert flow1("check", "--env", "zoo:InfoReused", "--steps", "100", "--fail-on", "WARN",
                 env=cli_env).returncode == 1


def test_advisory_is_printed_and_never_fails(cli_env):
    r = flow1("check", "--env", "zoo:SparseReward", "--fail-on", "WARN", env=cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| REWARD_STATS | PASS | REWARD_SPARSE advisory: non-zero reward ratio 0.0020" in r.stdout
    assert "REWARD_SPARSE (advisory)" in r.stdout and "flow1 check: PASS (0 FAIL, 0 WARN, 1 advisory)" in r.stdout
    assert "what the codes mean (flow1's docs): reference/codes.md#reward_sparse" in r.stdout


@pytest.mark.parametrize("bad", ["NoSuchEnv-v0", "nosuch:Env", "zoo:Missing", "json:decoder"])
def test_bad_env_exits_2_with_one_line(cli_env, bad):
    r = flow1("check", "--env", bad, env=cli_env)
    assert r.returncode == 2
    assert r.stderr.startswith("flow1: error: ") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr + r.stdout


def test_usage_errors_exit_2(cli_env):
    assert flow1("check", env=cli_env).returncode == 2
    assert flow1("check", "--env", "CartPole-v1", "--steps", "0", env=cli_env).returncode == 2
    assert flow1("nosuchcommand", env=cli_env).returncode == 2


def test_json_to_stdout_and_run_dir(cli_env, tmp_path):
    r = flow1("check", "--env", "zoo:NanRewardAtStep23", "--steps", "100", "--json", "-",
              "--output-dir", str(tmp_path), env=cli_env)
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["status"] == "FAIL" and "REWARD_NAN" in {e["code"] for e in report["events"]}
    assert "flow1 check: FAIL" in r.stderr  # the human view moved to stderr
    assert "REWARD_NAN" in load_events(tmp_path).column("code").to_pylist()
    assert (tmp_path / "flow1.log").read_text().count("| REWARD_STATS | FAIL | REWARD_NAN") == 1


def test_json_to_unwritable_path_exits_2(cli_env, tmp_path):
    r = flow1("check", "--env", "CartPole-v1", "--steps", "10", "--json", str(tmp_path / "no" / "dir" / "r.json"),
              env=cli_env)
    assert r.returncode == 2 and "cannot write JSON report" in r.stderr


def test_demo(cli_env):
    r = flow1("check", "--demo", "--steps", "300", env=cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo: the faulty env was caught" in r.stdout and "the clean env passed" in r.stdout


def test_console_script_is_installed():
    import shutil
    exe = shutil.which("flow1", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "the flow1 console script is installed next to the interpreter"
    r = subprocess.run([exe, "check", "--env", "CartPole-v1", "--steps", "50"], capture_output=True, text=True)
    assert r.returncode == 0


def test_report_of_a_missing_or_foreign_dir_exits_2(cli_env, tmp_path):
    assert flow1("report", str(tmp_path / "nope"), env=cli_env).returncode == 2
    r = flow1("report", str(tmp_path), env=cli_env)
    assert r.returncode == 2 and "is not a flow1 run directory" in r.stderr
