"""The live half of ``tests/hub/test_blind.py`` (real Ray and RLlib runs). flow1 is never silently
blind: every watcher that turns off says so (WATCHER_OFF), in the run directory and in
``result["flow1"]``, so that the verdict can never be a plain PASS. (A squatted predictable temp
path, which used to blind a run, is tests/live/test_run_life.py's.)"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from flow1_ray.common import codes as C
from flow1_ray.report.rundir import load_run_report
from test_rllib_callbacks import Run, build, runner_pids

as_root = pytest.mark.skipif(os.getuid() != 0, reason="a directory really owned by another uid needs root")


@pytest.mark.slow
@as_root
def test_a_lock_directory_that_cannot_be_used_is_said_never_silent(ray_session, tmp_path):
    """The job's published lock directory replaced by one of another uid: the runner and
    the probe refuse it and say what is not watched; a SIGKILLed runner then goes unnamed,
    and the run's verdict says so instead of PASS."""
    import ray
    from ray.experimental import internal_kv

    from flow1_ray.common.names import NAMESPACE
    from flow1_ray.liveness.lockdir import KV_LOCK_DIR

    ctx = ray.get_runtime_context()
    key = f"{KV_LOCK_DIR}{ctx.get_job_id()}:{ctx.get_node_id()}"
    before = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    internal_kv._internal_kv_put(key, str(theirs), overwrite=True, namespace=NAMESPACE)
    try:
        algo = build(tmp_path / "runs", runners=1, state_actions=False)
        try:
            result = algo.train()
            run = Run(result)
            events = run.wait_events(lambda e: {json.loads(x["evidence"]).get("watcher") for x in e
                                                if x["code"] == C.WATCHER_OFF} >= {"liveness", "probe"}, timeout=30,
                                     algo=algo)   # training goes on: a runner sends what waits with its next sample()
            result = algo.train()
            assert any("liveness" in w for w in result["flow1"]["watchers_off"]), result["flow1"]
            os.kill(runner_pids(algo)[1], signal.SIGKILL)
            time.sleep(2.0)   # a watched run would have named the death by now (0.2 s probe period)
        finally:
            algo.stop()
    finally:
        if before is None:
            internal_kv._internal_kv_del(key, namespace=NAMESPACE)
        else:
            internal_kv._internal_kv_put(key, before, overwrite=True, namespace=NAMESPACE)
    off = [e for e in events if e["code"] == C.WATCHER_OFF]
    assert all(e["status"] == C.WARN and "\n" not in e["message"] for e in off), off
    liveness = next(e for e in off if json.loads(e["evidence"])["watcher"] == "liveness")
    assert "owned by uid 65534" in liveness["message"] and liveness["worker_index"] == 1
    assert "its death or hang will not be named" in liveness["message"]
    tb = json.loads(liveness["evidence"])["traceback_file"]
    assert "LockDirError" in (run.dir / tb).read_text()
    report = load_run_report(run.dir)
    assert not any(e.code == C.WORKER_DIED for e in report.events)
    assert report.blind and report.exit_code() == 1 and report.exit_code(allow_blind=True, allow_short=True) == 0


