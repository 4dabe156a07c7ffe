"""A restarted hub counts nothing twice and leaves no restart unexplained.

The hub process (Recorder, monitor, its node's probe) is SIGKILLed for real in the middle of
a run whose EnvRunner 1 raises in ``env.step`` again and again (each time Ray restarts it).
Unkilled, such a run gives one ENV_CRASHED FAIL per crash, and each death and restart that
follows is a PASS row of that incident; killed, it must give the same, plus one
HUB_RESTARTED that says what was rebuilt.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from flow1_ray.common import codes as C
from flow1_ray import load_events
from test_rllib_callbacks import Run, build

pytestmark = pytest.mark.slow


def test_a_sigkilled_hub_rebuilds_its_state_and_counts_nothing_twice(ray_session, tmp_path):
    import ray

    algo = build(tmp_path, env_config={"crash_worker": 1, "crash_at_step": 300}, state_actions=False)
    try:
        results = [algo.train() for _ in range(2)]
        run = Run(results[-1])
        first = ray.get(run.hub.status.remote(), timeout=10)
        os.kill(first["pid"], signal.SIGKILL)
        # train on until EnvRunner 1 has crashed again after the restart (each restarted process
        # crashes at its own step 300), at most 8 iterations
        for _ in range(8):
            results.append(algo.train())
            if sum(e["code"] == C.ENV_CRASHED and e["status"] == C.FAIL for e in run.events()) >= 2 and \
                    results[-1]["flow1"]["worker"]["dead"] == 0:
                break
        second = ray.get(run.hub.status.remote(), timeout=10)
        events = run.events()
    finally:
        algo.stop()
    assert second["pid"] != first["pid"]
    events = load_events(run.dir).to_pylist()
    (restart,) = [e for e in events if e["code"] == C.HUB_RESTARTED]
    ev = json.loads(restart["evidence"])
    assert ev["previous_pid"] == first["pid"] and ev["pid"] == second["pid"] and ev["keys"] == 2, ev
    crashes = [e for e in events if e["code"] == C.ENV_CRASHED and e["status"] == C.FAIL]
    assert len(crashes) >= 2 and len({e["pid"] for e in crashes}) == len(crashes)
    loud = [(e["status"], e["code"]) for e in events if e["status"] != C.PASS and e["code"] != C.ENV_CRASHED]
    assert loud == [], loud   # no WORKER_DIED FAIL, no unexplained WORKER_RESTARTED WARN
    deaths = [e for e in events if e["code"] == C.WORKER_DIED]
    assert deaths and {e["pid"] for e in deaths} <= {e["pid"] for e in crashes}
    # the run's numbers went on from the rebuilt state (the crash before the kill still counted)
    # and count each crash once (a crash after the last result is not in it yet)
    counted = results[-1]["flow1"]["events"][C.FAIL]
    assert 2 <= counted <= len(crashes), (results[-1]["flow1"]["events"], len(crashes))
