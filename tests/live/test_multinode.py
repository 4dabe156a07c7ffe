"""Multi-node Ray on a real multi-node cluster (``ray.cluster_utils.Cluster``: a head without
CPUs and three 1-CPU worker nodes on this machine, each with its own lock directory and probe),
in its own process (tests/jobs/multinode_job.py, run once for the module): ``flow1 whatif``'s
branch runs spread over the worker nodes; a SIGKILLed runner and a hung runner are each found
by their own node's probe and reported with that node's id; a node removed from the cluster
gives WORKER_DIED for its runner with the node named, not a hang; a node lost without warning
(``remove_node(allow_graceful=False)``) is NODE_LOST within 3 s, confirmed by Ray later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def cluster_job(tmp_path_factory) -> dict:
    """tests/jobs/multinode_job.py run once: its JSON object. Session-scoped (a subprocess's
    output, nothing held open): a module-scoped one was torn down and run again (~70 s each) when
    pytest-xdist ran another module's test between this module's two."""
    from conftest import WORKER_PATH

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*WORKER_PATH, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, str(TESTS / "jobs" / "multinode_job.py"), str(tmp_path_factory.mktemp("nodes"))],
                          env=env, capture_output=True, text=True, timeout=400)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_on_a_cluster_the_whatif_branches_spread_over_the_nodes(cluster_job):
    """4 branch runs asked 4 at a time run on every worker node (the head has no CPU), 3 at a
    time: the rest waits in Ray's queue, said."""
    out = cluster_job["whatif"]
    assert out["runs"] == 4 and not out["failed"], out
    assert out["branch_nodes"] == sorted(cluster_job["worker_nodes"]), out
    assert "1 wait in Ray's queue" in out["queued"], out


def test_a_rare_state_crash_and_hang_on_remote_nodes_reach_the_driver_and_replay(cluster_job):
    """4 runners on the worker nodes (RareStateFault): runner 2 crashes, runner 3 hangs, each in a
    rare state after 150 steps of its env's life. Each dump is sent to the driver's run directory
    (the head: no runner there) and replays here: the same exception at the same step, and a
    hang at the same step said within the 3 s step timeout."""
    rare = cluster_job["rare"]
    found = rare["found"]
    assert set(found) == {"ENV_CRASHED", "WORKER_STALLED"}, rare
    crash, hang = found["ENV_CRASHED"], found["WORKER_STALLED"]
    nodes = set(rare["runners"].values()) | {crash["node_id"], hang["node_id"]}   # the healthy 1 and 4, and 2 and 3
    assert len(nodes) >= 2 and rare["driver_node"] not in nodes and set(rare["runners"]) == {"1", "4"}, rare
    assert crash["worker_index"] == 2 and crash["entry_on_driver_node"], crash
    assert hang["worker_index"] == 3 and hang["entry_on_driver_node"], hang
    out = crash["replay"]
    assert out["result"] == "reproduced" and out["step"] >= 150, crash
    assert "FloatingPointError: pole solver diverged at life step" in out["exception"], crash
    out = hang["replay"]
    assert out["result"] == "reproduced" and out["hang"] and out["step"] >= 150, hang
    assert "within 3 s, as in the run" in out["why"] and hang["replay_s"] < 60, hang


def test_each_nodes_probe_names_its_own_runners(cluster_job):
    out = cluster_job
    runners = out["runners"]
    workers = set(out["worker_nodes"])
    # the runners live on the three worker nodes, one each; flow1's hub stays with the driver
    assert {runners["1"]["node_id"], runners["2"]["node_id"], runners["3"]["node_id"]} == workers
    assert out["hub_node"] == out["driver_node"] == out["head_node"]
    killed, hung, gone = out["killed"], out["hung"], out["node_removed"]
    assert killed and killed["status"] == "FAIL" and killed["node_id"] == runners["1"]["node_id"]
    assert killed["evidence"]["exit_signal"] == "SIGKILL" and killed["seconds"] < 10
    assert hung and hung["node_id"] == runners["2"]["node_id"] and "stuck" in hung["evidence"]["stack"]
    assert gone and gone["node_id"] == runners["2"]["node_id"] and gone["evidence"]["node_lost"] is True
    assert "left the cluster" in gone["message"] and gone["status"] == "FAIL"
    # a node lost without warning: named within 3 s of the removal (its probe silent, its raylet
    # refusing connections), with its runner; Ray's verdict (~14 s) confirms it as a PASS row
    lost, confirmed = out["node_lost"], out["node_lost_confirmed"]
    assert lost and lost["status"] == "FAIL" and lost["node_id"] == runners["3"]["node_id"], lost
    assert lost["seconds"] < 3.0, lost
    gone_with = [w["pid"] for w in lost["evidence"]["workers"]]
    # the node's processes are killed one by one: its probe may see the runner die first
    # (then WORKER_DIED, and NODE_LOST names it as having died just before)
    assert gone_with + [w["pid"] for w in lost["evidence"]["died_before"]] == [runners["3"]["pid"]], lost
    assert confirmed, out
    if gone_with:
        assert confirmed["status"] == "PASS" and "confirmed" in confirmed["message"], confirmed
