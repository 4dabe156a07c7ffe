"""What a SIGKILLed driver loses: the rows of a run that never reach its run directory.

The hub (Recorder, monitor) is owned by the Algorithm's process, so a driver killed with
SIGKILL (an OOM kill, a preempted pod, ``kill -9``) takes the hub with it: whatever the
Recorder held in memory and had not flushed is gone. The Recorder flushes every
``flush_interval_s`` (2 s) and within MIN_FLUSH_GAP_S (0.5 s) of each metric row and each
WARN/FAIL, so the loss should be bounded by that gap, not by the interval.

Each trial starts a driver (``--job``: PPO on CartPole with an env that raises on EnvRunner 1,
``flow1 train --inject crash``'s set-up) that prints ``ITER i`` after each ``train()``; the
trial kills it with SIGKILL a random time into an iteration after the third, waits for Ray
to end the hub, and compares what the driver had seen with what the run directory holds:
iterations with a metrics row, FAIL events, when the hub's last heartbeat was written
relative to the kill, and what ``flow1 report`` says of the run's life.

    python scripts/bench_driver_kill.py [--trials 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def job(out_dir: str, iterations: int) -> None:
    """The driver: prints ``RUN <run_dir>`` once, then ``ITER i <events FAIL> <time>`` per iteration."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks
    from flow1_ray.envcheck.demo import FaultyCartPole

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             configure_logging=False)
    cb = Flow1Callbacks.with_options(output_dir=out_dir, print_events=False, state_actions=False)
    algo = (PPOConfig().environment(FaultyCartPole, env_config={"crash_worker": 1, "crash_at_step": 400})
            .callbacks(cb).env_runners(num_env_runners=2, sample_timeout_s=10)
            .training(train_batch_size_per_learner=1000, minibatch_size=128, num_epochs=3)
            .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=2.0)).build_algo()
    for i in range(iterations):
        r = algo.train()
        if i == 0:
            print(f"RUN {r['flow1']['run_dir']}", flush=True)
        print(f"ITER {r['training_iteration']} {r['flow1']['events'].get('FAIL', 0)} {time.time():.3f}", flush=True)
    algo.stop()


def trial(seed: int, kill_after: int = 3) -> dict:
    """One driver, killed a random share of an iteration after ``kill_after``."""
    from flow1_ray import load_events, load_metrics
    from flow1_ray.report.rundir import load_run_report

    out = tempfile.mkdtemp(prefix="f1kill-")
    proc = subprocess.Popen([sys.executable, __file__, "--job", out], stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    run_dir, seen, durations, last_t = None, [], [], None
    rng = random.Random(seed)
    for line in proc.stdout:
        if line.startswith("RUN "):
            run_dir = line.split(" ", 1)[1].strip()
        elif line.startswith("ITER "):
            _, it, fails, t = line.split()
            seen.append((int(it), int(fails)))
            if last_t is not None:
                durations.append(float(t) - last_t)
            last_t = float(t)
            if int(it) >= kill_after:
                break
    delay = rng.uniform(0.0, max(durations) if durations else 1.0)
    time.sleep(delay)
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:   # what the driver printed before it died, still in the pipe
        if line.startswith("ITER "):
            _, it, fails, _t = line.split()
            seen.append((int(it), int(fails)))
    time.sleep(5.0)   # Ray ends the dead driver's actors (its hub) within a few seconds
    rows = load_metrics(run_dir).column("iteration").to_pylist()
    events = load_events(run_dir).to_pylist()
    beat = json.loads((Path(run_dir) / "heartbeat.json").read_text())
    from datetime import datetime

    beat_after = datetime.fromisoformat(beat["ts"]).timestamp() - killed_at
    report = load_run_report(run_dir, now=time.time() + 60)
    return {"iterations_seen": seen[-1][0], "fail_seen": seen[-1][1], "killed_into_s": round(delay, 2),
            "rows_on_disk": max(rows) if rows else 0, "fail_on_disk": sum(e["status"] == "FAIL" for e in events),
            "last_heartbeat_after_kill_s": round(beat_after, 2), "life": report.completeness.get("state"),
            "unclean_stop_record": (report.completeness.get("stop") or {}).get("clean") is False,
            "verdict": report.verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", metavar="OUT_DIR")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.job:
        job(args.job, args.iterations)
        return
    results = [trial(args.seed + i) for i in range(args.trials)]
    for r in results:
        print(json.dumps(r))
    lost_rows = [r["iterations_seen"] - r["rows_on_disk"] for r in results]
    lost_fail = [r["fail_seen"] - r["fail_on_disk"] for r in results]
    ages = [r["last_heartbeat_after_kill_s"] for r in results]
    print(f"{len(results)} trials: metric rows lost (iterations the driver saw end, not on disk): "
          f"max {max(lost_rows)}, {sum(x > 0 for x in lost_rows)} trial(s) lost any; FAIL events lost: max "
          f"{max(lost_fail)}; the last heartbeat (the hub's last flush) came {min(ages):+.2f} .. {max(ages):+.2f} s "
          f"after the kill (median {sorted(ages)[len(ages) // 2]:+.2f} s); an unclean stop.json written by the hub in "
          f"{sum(r['unclean_stop_record'] for r in results)}/{len(results)}; life read back: "
          f"{sorted({r['life'] for r in results})}")


if __name__ == "__main__":
    main()
