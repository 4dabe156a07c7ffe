"""The multi-node scenario, run as its own process (its own Ray: a ``ray.cluster_utils.Cluster``
of a head without CPUs and three 1-CPU worker nodes on this machine, each node with its own
lock directory and its own probe). First ``flow1 whatif``'s branch runs spread over the worker
nodes; then 4 runners of a run hit a rare-state crash and hang, whose dumps must reach the
driver's run directory and replay; then a run's runners are killed, hung and their nodes removed. Prints one JSON object:
what flow1 reported and what really happened (one cluster for both: a cluster's start is the
dearest part of each).

    python tests/jobs/multinode_job.py OUTPUT_DIR
"""

import json
import os
import signal
import sys
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


def main(out_dir: str) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": 80 * 1024**2})
    nodes = [cluster.add_node(num_cpus=1, object_store_memory=80 * 1024**2) for _ in range(3)]
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    from ray.rllib.algorithms.ppo import PPOConfig

    whatif = _whatif(out_dir)
    rare = _rare(out_dir)

    from flow1_ray import Flow1Callbacks, load_events
    from flow1_ray.common.names import hub_name

    cb = Flow1Callbacks.with_options(output_dir=out_dir, print_events=False, state_actions=False,
                                     stall_timeout_s=3.0, heartbeat_interval_s=0.5)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb)
            .env_runners(num_env_runners=3, sample_timeout_s=8)
            .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True)
            .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=1)).build_algo()
    result = algo.train()
    run_dir = result["flow1"]["run_dir"]
    hub = ray.get_actor(hub_name(run_dir.rstrip("/").rsplit("/", 1)[-1]), namespace="flow1")
    runners = {i: (pid, node) for i, pid, node in algo.env_runner_group.foreach_env_runner(
        lambda er: (er.worker_index, os.getpid(), ray.get_runtime_context().get_node_id()),
        local_env_runner=False, timeout_seconds=20)}
    out = {"runners": {str(i): {"pid": p, "node_id": n} for i, (p, n) in runners.items()},
           "worker_nodes": [n.node_id for n in nodes], "head_node": cluster.head_node.node_id,
           "hub_node": ray.get(hub.status.remote(), timeout=10).get("node_id"),
           "driver_node": ray.get_runtime_context().get_node_id(), "whatif": whatif, "rare": rare}

    def wait(code: str, pid: int | None, timeout: float = 30.0, node_id: str | None = None):
        t0 = time.time()
        while time.time() - t0 < timeout:
            ray.get(hub.flush.remote(), timeout=10)
            for e in load_events(run_dir).to_pylist():
                if e["code"] == code and (e["pid"] == pid if node_id is None else e["node_id"] == node_id):
                    return {**e, "ts": str(e["ts"]), "evidence": json.loads(e["evidence"]),
                            "seconds": round(time.time() - t0, 2)}
            time.sleep(0.3)
        return None

    # 1. runner 1 SIGKILLed: its own node's probe sees the lock released
    pid1, _ = runners[1]
    os.kill(pid1, signal.SIGKILL)
    out["killed"] = wait("WORKER_DIED", pid1)
    # 2. runner 2 hangs inside env.step: its node's probe sees a held lock without progress
    pid2, node2 = runners[2]

    def hang(er):
        inner = er.env.unwrapped.envs[0].unwrapped
        step = inner.step

        def stuck(action):
            time.sleep(600)
            return step(action)
        inner.step = stuck
        return True
    algo.env_runner_group.foreach_env_runner(hang, remote_worker_ids=[2], local_env_runner=False,
                                             timeout_seconds=20)
    threading.Thread(target=lambda: _quietly(algo.train), daemon=True).start()
    out["hung"] = wait("WORKER_STALLED", pid2)
    # 3. the hung runner's node leaves the cluster: its runner is dead, the node named
    (node,) = [n for n in nodes if n.node_id == node2]
    cluster.remove_node(node)
    out["node_removed"] = wait("WORKER_DIED", pid2, timeout=40)
    # 4. runner 3's node is lost without warning (its raylet and processes killed, like a
    # preempted VM): named when its probe falls silent, confirmed when Ray declares it dead
    pid3, node3 = runners[3]
    (node,) = [n for n in nodes if n.node_id == node3]
    cluster.remove_node(node, allow_graceful=False)
    out["node_lost"] = wait("NODE_LOST", None, timeout=30, node_id=node3)
    out["node_lost_confirmed"] = wait("WORKER_DIED", pid3, timeout=60)
    out["other_codes"] = sorted({e["code"] for e in load_events(run_dir).to_pylist() if e["status"] != "PASS"})
    _print(out)
    # a hung train() thread: no ray.shutdown(); end this cluster's processes, then exit
    for n in list(cluster.worker_nodes):
        _quietly(lambda: cluster.remove_node(n, allow_graceful=False))
    _quietly(lambda: cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False))
    # what Cluster.shutdown() does last: forget this cluster's address, or the next
    # `ray.init()` on this machine would try to join the dead cluster
    _quietly(ray._common.utils.reset_ray_address)
    os._exit(0)


def _whatif(out_dir: str) -> dict:
    """4 branch runs of 1 CPU asked 4 at a time on 3 free CPUs: where they ran."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray.whatif.run import run_whatif

    algo = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0).debugging(seed=0)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)).build_algo()
    algo.train()
    checkpoint = os.path.join(out_dir, "ck")
    algo.save_to_path(checkpoint)
    algo.stop()
    o = run_whatif(checkpoint, sets=["lr=0.001"], seeds=2, iterations=1, parallel=4)
    return {"branch_nodes": sorted({r.node for r in o.results}), "failed": [r.error for r in o.failed()],
            "queued": o.queued, "runs": len(o.results)}


def _rare(out_dir: str) -> dict:
    """4 EnvRunners of half a CPU on the worker nodes (none on the driver's: the head has no CPU),
    RareStateFault (tests/envs/replay_envs.py): runner 2 crashes and runner 3 hangs in a rare state
    after 150 steps of their env's life. Their repro/ entries must reach the driver's run
    directory, and ``flow1 replay`` of each must reproduce the crash, and the hang within its step
    timeout."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_events
    from flow1_ray.common.names import hub_name
    from flow1_ray.replay import play
    from replay_envs import RareStateFault

    cb = Flow1Callbacks.with_options(output_dir=out_dir, print_events=False, state_actions=False,
                                     stall_timeout_s=3.0, heartbeat_interval_s=0.5, learner_tracing=False)
    algo = (PPOConfig().environment(RareStateFault, env_config={"at": 150, "crash_on": 2, "hang_on": 3})
            .callbacks(cb).env_runners(num_env_runners=4, num_cpus_per_env_runner=0.5, sample_timeout_s=6)
            .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True)
            .training(train_batch_size_per_learner=800, minibatch_size=200, num_epochs=1)).build_algo()
    result = algo.train()
    run_dir = result["flow1"]["run_dir"]
    hub = ray.get_actor(hub_name(run_dir.rstrip("/").rsplit("/", 1)[-1]), namespace="flow1")
    found: dict = {}
    t0 = time.time()
    while time.time() - t0 < 120 and not {"ENV_CRASHED", "WORKER_STALLED"} <= set(found):
        ray.get(hub.flush.remote(), timeout=10)
        for e in load_events(run_dir).to_pylist():
            ev = json.loads(e["evidence"])
            if e["code"] in ("ENV_CRASHED", "WORKER_STALLED") and ev.get("repro") and e["code"] not in found:
                found[e["code"]] = {"worker_index": e["worker_index"], "node_id": e["node_id"], "repro": ev["repro"],
                                    "pid": e["pid"], "message": e["message"][:400]}
        if not {"ENV_CRASHED", "WORKER_STALLED"} <= set(found):
            _say(f"rare: found {sorted(found)} at {time.time() - t0:.0f} s; one more train()")
            _quietly(algo.train)
    for f in found.values():
        entry = os.path.join(run_dir, f["repro"][0])
        f["entry_on_driver_node"] = os.path.isfile(os.path.join(entry, "manifest.json"))
        t1 = time.time()
        _say(f"rare: replaying {entry}")
        f["replay"] = play(entry, step_timeout_s=3.0)
        f["replay"].pop("stack", None)
        f["replay_s"] = round(time.time() - t1, 1)
    if "WORKER_STALLED" in found:   # the hung runner's step never returns: end it before stop()
        _quietly(lambda: os.kill(found["WORKER_STALLED"]["pid"], signal.SIGKILL))
    where = {i: node for i, node in algo.env_runner_group.foreach_env_runner(
        lambda er: (er.worker_index, ray.get_runtime_context().get_node_id()), local_env_runner=False,
        timeout_seconds=10)}
    _say(f"rare: healthy runners on {where}; stopping")
    _quietly(algo.stop)
    return {"found": found, "runners": {str(i): n for i, n in where.items()},
            "driver_node": ray.get_runtime_context().get_node_id()}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _print(out: dict) -> None:
    print("RESULT " + json.dumps(out, default=str), flush=True)


def _quietly(fn):
    try:
        fn()
    except Exception:
        pass


if __name__ == "__main__":
    main(sys.argv[1])
