"""Time from a kill to WORKER_DIED and from a hang to WORKER_STALLED, on real EnvRunners.

PPO CartPole with 2 EnvRunners and Flow1Callbacks. Kills: SIGKILL and SIGSEGV in turn on
an idle runner, from outside, each followed by Ray's restart; the figure is the event's
timestamp (the probe's scan that saw the lock released or the fatal-signal report) minus
the kill time, and when its line was in the run's ``flow1.log`` (read every 5 ms, no flush
asked for: what a user tailing the log sees) minus the kill time: the report's latency, which
a wait for Ray's exit detail would lengthen, not the timestamp. Hangs: the built-in FaultyCartPole blocks EnvRunner 1 inside ``env.step``
and writes when the hang began; flow1 kills the hung process (stall_action="kill"), Ray
restarts it and it hangs again; the figure is WORKER_STALLED's timestamp minus the hang's
start, against ``stall_timeout_s``.

    .venv/bin/python scripts/bench_detection.py [--kills 6] [--hangs 3] [--stall-timeout 3] [--busy 2]

``--busy N``: N processes spin on the CPU through the kills (a busy 2-core machine: the GCS
then records a death late, which a report waiting for Ray's exit detail would wait for).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def build(tmp: str, env_config: dict, stall_timeout: float):
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks
    from flow1_ray.envcheck.demo import FaultyCartPole

    cb = Flow1Callbacks.with_options(output_dir=tmp, print_events=False, stall_timeout_s=stall_timeout,
                                     stall_action="kill")
    return (PPOConfig().environment(FaultyCartPole, env_config=env_config).callbacks(cb)
            .env_runners(num_env_runners=2, sample_timeout_s=2 * stall_timeout + 5)
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)
            .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0)
            ).build_algo()


def events(run_dir: Path, recorder) -> list[dict]:
    import ray

    from flow1_ray import load_events
    ray.get(recorder.flush.remote(), timeout=10)
    return load_events(run_dir).to_pylist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--hangs", type=int, default=3)
    ap.add_argument("--stall-timeout", type=float, default=3.0)
    ap.add_argument("--busy", type=int, default=0, help="CPU-spinning processes through the kills")
    a = ap.parse_args()
    import logging

    import ray

    from flow1_ray.common.names import hub_name

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    tmp = tempfile.mkdtemp()

    # -- kills ---------------------------------------------------------------------------
    algo = build(tmp, {}, a.stall_timeout)
    r = algo.train()
    run_dir = Path(r["flow1"]["run_dir"])
    mon = rec = ray.get_actor(hub_name(run_dir.name), namespace="flow1")  # monitor and Recorder: the hub
    import subprocess
    import sys

    # a spinner ends with this script, even one a timeout killed (its parent changes then)
    spin = "import os, time\np = os.getppid()\nend = time.time() + 3600\nwhile time.time() < end and os.getppid() == p: pass"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(a.busy)]
    lat = {"SIGKILL": [], "SIGSEGV": []}
    seen = {"SIGKILL": [], "SIGSEGV": []}   # readable in the run directory
    for k in range(a.kills):
        sig = signal.SIGKILL if k % 2 == 0 else signal.SIGSEGV
        t0 = time.time()
        while ray.get(mon.full_status.remote())["alive"] < 2 and time.time() - t0 < 120:
            algo.train()
        pids = dict(algo.env_runner_group.foreach_env_runner(lambda w: (w.worker_index, os.getpid()),
                                                             local_env_runner=False, timeout_seconds=10))
        pid = pids[1 + k % 2]
        os.kill(pid, sig)
        tk = time.time()
        log = run_dir / "flow1.log"
        while time.time() - tk < 15:   # what a user tailing the log sees: no flush asked for
            text = log.read_text() if log.exists() else ""   # written at the Recorder's first flush
            if any("WORKER_DIED" in ln and f"(pid {pid})" in ln for ln in text.splitlines()[-50:]):
                seen[sig.name].append(time.time() - tk)
                break
            time.sleep(0.005)
        died = [e for e in events(run_dir, rec) if e["code"] == "WORKER_DIED" and e["pid"] == pid]
        if died:
            ev = json.loads(died[0]["evidence"])
            lat[sig.name].append(died[0]["ts"].timestamp() - tk)
            assert ev["exit_signal"] == sig.name, ev["exit_signal"]
    for b in burners:
        b.kill()
    algo.stop()
    if burners:
        print(f"with {len(burners)} CPU-spinning processes beside the run")
    for name, xs in lat.items():
        if xs:
            print(f"kill -> WORKER_DIED, {name}: median {statistics.median(xs):.3f} s, max {max(xs):.3f} s "
                  f"over {len(xs)} kills (goal <= 0.5 s)")
            ys = seen[name]
            print(f"kill -> WORKER_DIED readable in the run directory, {name}: median {statistics.median(ys):.3f} s, "
                  f"max {max(ys):.3f} s")
            zs = [y - x for x, y in zip(xs, ys)]
            print(f"  of which detection -> readable (the report path: flow1.log polled every 5 ms), {name}: median "
                  f"{statistics.median(zs):.3f} s, max {max(zs):.3f} s (goal <= 0.1 s median, <= 0.5 s max)")

    # -- hangs ---------------------------------------------------------------------------
    if a.hangs < 1:
        ray.shutdown()
        return
    mark = Path(tmp) / "hangs.txt"
    algo = build(tmp, {"hang_worker": 1, "hang_at_step": 300, "hang_s": 3600, "hang_mark": str(mark)},
                 a.stall_timeout)
    r = algo.train()
    run_dir = Path(r["flow1"]["run_dir"])
    rec = ray.get_actor(hub_name(run_dir.name), namespace="flow1")
    t0 = time.time()
    stalls: dict[int, float] = {}
    while len(stalls) < a.hangs and time.time() - t0 < 300:
        algo.train()
        for e in events(run_dir, rec):
            if e["code"] == "WORKER_STALLED":
                stalls[e["pid"]] = e["ts"].timestamp()
    starts = {}
    for line in mark.read_text().split("\n"):
        if line.strip():
            pid, ts = line.split()
            starts[int(pid)] = float(ts)
    delays = [stalls[p] - starts[p] for p in stalls if p in starts]
    algo.stop()
    print(f"hang -> WORKER_STALLED: median {statistics.median(delays):.3f} s, max {max(delays):.3f} s over "
          f"{len(delays)} hangs, stall_timeout_s {a.stall_timeout:g} (goal <= stall_timeout_s + 1 s)")
    ray.shutdown()


if __name__ == "__main__":
    main()
