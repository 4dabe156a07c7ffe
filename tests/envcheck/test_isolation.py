"""flow1 check runs the env in a child process: hangs, crashes, prints and Ctrl-C, through
the real CLI with real child processes and real signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import zoo
from flow1_ray import Flow1InputError, check_env
from flow1_ray.common import codes as C
from flow1_ray.envcheck.api import CheckInterrupted

#: short per-call timeouts: every zoo env's calls take microseconds, its hangs forever
TIMEOUTS = ["--step-timeout", "2", "--reset-timeout", "2"]


def flow1(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "flow1_ray", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def check_json(cli_env, target, *extra):
    """Run ``flow1 check --json -`` on a zoo env; (exit code, report dict, stderr)."""
    r = flow1("check", "--env", target, "--json", "-", *TIMEOUTS, *extra, env=cli_env)
    assert "Traceback" not in r.stderr, r.stderr  # tracebacks only as evidence, inside the JSON
    return r.returncode, json.loads(r.stdout), r.stderr


def events(report, code):
    return [e for e in report["events"] if e["code"] == code]


@pytest.mark.parametrize("target,call,step,frame,stops", [
    ("zoo:ResetHangs", "reset", 40, "_sleep_forever", "interrupted"),
    ("zoo:StepSleepsForever", "step", 30, "_sleep_forever", "interrupted"),
    ("zoo:StepSpinsForever", "step", 30, "_spin_forever", "interrupted"),
    ("zoo:StepHoldsGilInC", "step", 30, "_hold_gil_in_c", "killed"),
], ids=["reset-sleeps", "step-sleeps", "step-spins-holding-the-gil", "step-holds-the-gil-in-c"])
def test_a_hung_call_is_env_hung_with_the_envs_stack(cli_env, target, call, step, frame, stops):
    code, report, _ = check_json(cli_env, target)
    assert code == 1
    (hung,) = events(report, C.ENV_HUNG)
    assert hung["status"] == C.FAIL and hung["env_step"] == step
    ev = hung["evidence"]
    assert ev["call"] == call and ev["timeout_s"] == 2.0 and ev["first_step"] == step
    assert ev["frame"].startswith(f"{frame} (zoo.py:")
    assert f"{call}() did not return within 2 s (the {call} timeout)" in hung["message"]
    assert f"the env was in {frame} (zoo.py:" in hung["message"]
    assert f'zoo.py", line' in ev["stack"] and f"in {frame}" in ev["stack"]
    s = report["summary"]
    assert s["steps"] == step - 1 if call == "step" else s["steps"] == step
    assert "interrupted" not in s and s["stopped_early"].startswith(f"{call}() did not return within 2 s")
    if stops == "interrupted":  # the env was interrupted in Python: the steps seen were judged as a whole
        assert "not_run" not in s and {e["module"] for e in events(report, C.CHECKS_PASSED)} >= {C.REWARD_STATS}
    else:  # a C call holding the GIL runs no Python signal handler: killed, the rules listed as not run
        assert s["stopped_early"].endswith("and was killed")
        assert any("REWARD_NAN" in line for line in s["not_run"]) and report["not_assessable"] == s["not_run"]


@pytest.mark.parametrize("target,signal_name,exit_code,step,frame", [
    ("zoo:DtypeFaultThenSegfault", "SIGSEGV", None, 50, "_read_null (zoo.py:"),
    ("zoo:AbortsInStep", "SIGABRT", None, 10, "step (zoo.py:"),
    ("zoo:OsExitInStep", None, 3, 10, None),
], ids=["segfault", "abort", "os._exit"])
def test_a_dead_env_process_is_env_crashed_and_earlier_findings_are_kept(cli_env, target, signal_name, exit_code,
                                                                          step, frame):
    code, report, _ = check_json(cli_env, target)
    assert code == 1  # never 139, 134 or 3
    (crash,) = events(report, C.ENV_CRASHED)
    ev = crash["evidence"]
    assert ev["call"] == "step" and ev["first_step"] == step and crash["env_step"] == step
    assert ev["signal"] == signal_name and ev["exit_code"] == exit_code
    if signal_name:
        assert f"killed by {signal_name} in step() at step {step}" in crash["message"]
        assert ev["frame"].startswith(frame) and f", in {ev['frame']}" in crash["message"]
        assert "Fatal Python error" in ev["traceback_tail"] and 'zoo.py", line' in ev["traceback_tail"]
    else:
        assert f"exited with code 3 in step() at step {step}" in crash["message"] and "os._exit()" in crash["message"]
        assert ev["frame"] is None
    s = report["summary"]
    assert s["steps"] == step - 1 and s["stopped_early"].startswith("the env's process")
    assert any("STEP_DURATION_OUTLIER" in line for line in s["not_run"])
    assert not events(report, C.CHECKS_PASSED) or {e["module"] for e in events(report, C.CHECKS_PASSED)} == {
        C.IMPORT_RESOLVE}  # no PASS row for a module whose whole-rollout rules did not run
    if target == "zoo:DtypeFaultThenSegfault":  # the dtype fault from step 6, found before the crash
        (dtype,) = events(report, C.OBS_DTYPE_MISMATCH)
        assert dtype["env_step"] == 6 and "expected float32, actual float64 (first at step 6)" in dtype["message"]


def test_sys_exit_in_step_is_caught_with_its_traceback(cli_env):
    code, report, _ = check_json(cli_env, "zoo:SysExitInStep")
    assert code == 1
    (crash,) = events(report, C.ENV_CRASHED)
    assert crash["message"].startswith("step() called sys.exit(3) in step (zoo.py:")
    assert crash["evidence"]["exit_code"] == 3 and "sys.exit(3)" in crash["evidence"]["traceback_tail"]
    s = report["summary"]
    assert s["steps"] == 9 and s["stopped_early"] == "step() called sys.exit(3)" and "not_run" not in s
    # the same in this process: check_env catches SystemExit too, the results are the same
    inproc = check_env(zoo.SysExitInStep)
    (same,) = [e for e in inproc.events if e.code == C.ENV_CRASHED]
    assert same.message == crash["message"]


def test_an_env_module_that_segfaults_at_import_does_not_kill_the_cli(cli_env):
    code, report, _ = check_json(cli_env, "zoo_crash_on_import:Env")
    assert code == 1
    (crash,) = events(report, C.ENV_CRASHED)
    assert crash["evidence"]["call"] == "import" and crash["evidence"]["signal"] == "SIGSEGV"
    assert crash["evidence"]["frame"].startswith("<module> (zoo_crash_on_import.py:")
    assert report["summary"]["steps"] == 0 and report["target"] == "zoo_crash_on_import:Env"


def test_what_the_env_prints_never_reaches_json_on_stdout(cli_env):
    code, report, stderr = check_json(cli_env, "zoo:PrintsEveryStep", "--steps", "50")
    assert code == 0 and report["status"] == C.PASS and report["summary"]["steps"] == 50
    assert "step 50: action" in stderr and "resetting the simulator" in stderr


def test_input_errors_found_in_the_child_are_one_line_exit_2(cli_env):
    r = flow1("check", "--env", "zoo:CastToFloat64", env=cli_env)
    assert r.returncode == 2 and r.stderr.startswith("flow1: error: zoo:CastToFloat64 needs argument(s) env")
    assert len(r.stderr.strip().splitlines()) == 1
    r = flow1("check", "--env", "CartPole-v1", "--step-timeout", "-1", env=cli_env)
    assert r.returncode == 2
    assert r.stderr == "flow1: error: --step-timeout must be >= 0 seconds (0: no limit), got -1.0\n"


def test_help_states_the_timeouts(cli_env):
    from flow1_ray.cli.parser import DEFAULT_TIMEOUTS as cli_defaults
    from flow1_ray.envcheck.isolate import DEFAULT_TIMEOUTS

    assert cli_defaults == DEFAULT_TIMEOUTS
    out = " ".join(flow1("check", "--help", env=cli_env).stdout.split())
    for call, seconds in DEFAULT_TIMEOUTS.items():
        assert f"--{call}-timeout S seconds" in out and f"(default {seconds:g}; 0: no limit)" in out


def _interrupt(cli_env, tmp_path, target, marker, *extra):
    """Start flow1 check, wait until the env says it got there, send SIGINT to the CLI."""
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**cli_env, "FLOW1_TEST_MARKERS": str(markers)}
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "flow1_ray", "check", "--env", target, "--json",
                             str(tmp_path / "report.json"), "--output-dir", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            # a terminal's CLI: a shell that runs the tests in the background starts
                            # them with SIGINT ignored, and Python then keeps it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (markers / marker).exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the env never got there"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr, stderr
    report = json.loads((tmp_path / "report.json").read_text())
    return proc.returncode, report, out, stdout + stderr


@pytest.mark.parametrize("target,marker,extra", [
    ("zoo:StepSleepsForever", "hanging", []),
    ("zoo:RunsSlowly", "running", ["--steps", "1000000"]),
    ("zoo:StepHoldsGilInC", "hanging", []),
], ids=["while-hanging", "while-running", "while-holding-the-gil"])
def test_ctrl_c_writes_the_partial_report_and_exits_130(cli_env, tmp_path, target, marker, extra):
    code, report, out, text = _interrupt(cli_env, tmp_path, target, marker, *extra)
    assert code == 130
    s = report["summary"]
    assert s["interrupted"] is True and s["stopped_early"].startswith("interrupted (Ctrl-C)")
    assert s["steps"] >= (100 if marker == "running" else 29)
    assert json.loads((out / "stop.json").read_text())["how"] == "check interrupted"
    assert json.loads((out / "report.json").read_text())["summary"]["interrupted"] is True
    assert "flow1: interrupted; the partial report was written" in text
    if target == "zoo:StepHoldsGilInC":  # no Python handler can run: killed, with its stack
        assert "was killed" in s["stopped_early"] and "_hold_gil_in_c" in s["stack_when_killed"]
        assert s["not_run"]
    else:  # stopped between or inside env calls: the steps seen were judged as a whole
        assert "not_run" not in s and s["modules"][C.ENV_SPEC]["steps"] == s["steps"]


# --- the library: check_env(isolate=True) ------------------------------------------------------

SAME = [zoo.DtypeTurnsFloat64, zoo.InfoReused, zoo.ObsAliased, zoo.NanRewardAtStep23, zoo.CrashInEpisode3,
        zoo.ResetDrifts, zoo.cast_actions_env, zoo.CleanExoticSpaces]


def _shape(report):
    """A report's content without what depends on time: codes, messages, steps, counts."""
    skip = {C.STEP_DURATION_OUTLIER}
    return sorted((e.code, e.status, e.message, e.env_step) for e in report.events if e.code not in skip
                  and not (e.code == C.CHECKS_PASSED and e.module == C.ENV_SPEC))


@pytest.mark.parametrize("target", SAME, ids=[getattr(t, "__name__", str(t)) for t in SAME])
def test_isolated_and_in_process_checks_give_the_same_report(target):
    a = check_env(target, steps=600, seed=0)
    b = check_env(target, steps=600, seed=0, isolate=True)
    assert _shape(a) == _shape(b)
    assert b.summary["isolated"] in ("fork", "spawn")
    assert {k: v for k, v in a.summary.items() if k not in ("seconds", "modules")} == \
        {k: v for k, v in b.summary.items() if k not in ("seconds", "modules", "isolated")}


@pytest.mark.parametrize("target", ["zoo_multi_agent:AgentDtypeDrift", "zoo_multi_agent:CrashInEpisode2"])
def test_isolated_multi_agent_checks_give_the_same_report(target):
    pytest.importorskip("ray.rllib.env.multi_agent_env")
    a = check_env(target, steps=300, seed=0)
    b = check_env(target, steps=300, seed=0, isolate=True)
    assert a.summary["multi_agent"] is True and _shape(a) == _shape(b) and a.codes() == b.codes() != set()


def test_spawn_start_method_works_and_refuses_what_it_cannot_pickle():
    r = check_env("zoo:DtypeFaultThenSegfault", steps=200, isolate=True, start_method="spawn")
    assert r.summary["isolated"] == "spawn" and {C.ENV_CRASHED, C.OBS_DTYPE_MISMATCH} <= r.codes()
    with pytest.raises(Flow1InputError, match="cannot hand .* to a spawned check process"):
        check_env(lambda: zoo.Base(), steps=10, isolate=True, start_method="spawn")


def test_timeouts_need_isolation():
    with pytest.raises(Flow1InputError, match="step_timeout_s need isolate=True"):
        check_env("CartPole-v1", steps=10, step_timeout_s=5)


class _CtrlCAtStep50(zoo.Base):
    def step(self, action):
        if self.total == 49:
            raise KeyboardInterrupt
        return super().step(action)


def test_in_process_ctrl_c_judges_the_steps_seen_and_carries_the_report():
    with pytest.raises(CheckInterrupted) as e:
        check_env(_CtrlCAtStep50, steps=1000)
    report = e.value.report
    s = report.summary
    assert s["interrupted"] is True and s["steps"] == 49 and s["stopped_early"] == "interrupted after 49 steps"
    assert report.codes() == set() and C.CHECKS_PASSED in report.codes(C.PASS)
    assert isinstance(e.value, KeyboardInterrupt)


def test_the_parent_keeps_no_child_and_no_temporary_files(tmp_path, monkeypatch):
    import multiprocessing

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the check's folder goes
    report = check_env("zoo:AbortsInStep", steps=100, isolate=True)
    assert C.ENV_CRASHED in report.codes()
    assert multiprocessing.active_children() == []
    assert list(tmp_path.iterdir()) == []
