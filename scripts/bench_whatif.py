"""What a ``flow1 whatif`` costs: the sick run of the learner tests (PPO CartPole, lr 0.05,
10 epochs, the guard's checkpoint at its first FAIL), then ``flow1 whatif --from-advice``
(the baseline and one branch per advised knob) at each ``--parallel``, alternated over
``--rounds`` (P1 P2 .. then back), each a fresh CLI process with its own Ray; wall clock of
the whole command and the median time of one branch run (build, restore, read-back,
``--iterations`` iterations), as the command reports them.

    .venv/bin/python scripts/bench_whatif.py [--parallel 1,2] [--seeds 3] [--iterations 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sick_run(out: str) -> str:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2,
             log_to_driver=False, logging_level=logging.ERROR)
    cb = Flow1Callbacks.with_options(output_dir=out, print_events=False, on_fail="checkpoint", state_actions=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
            .env_runners(num_env_runners=1, sample_timeout_s=20)
            .training(train_batch_size_per_learner=1000, lr=0.05, num_epochs=10)).build_algo()
    try:
        run_dir = [algo.train() for _ in range(4)][-1]["flow1"]["run_dir"]
    finally:
        algo.stop()
        ray.shutdown()
    return run_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", default="1,2")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    run_dir = sick_run(tempfile.mkdtemp())
    levels = [int(x) for x in a.parallel.split(",")]
    walls: dict[int, list[float]] = {p: [] for p in levels}
    ones: list[float] = []
    branches = 0
    for r in range(a.rounds):
        for p in (levels if r % 2 == 0 else levels[::-1]):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "flow1_ray", "whatif", run_dir, "--from-advice",
                                   "--seeds", str(a.seeds), "--iterations", str(a.iterations), "--parallel", str(p),
                                   "--json", "-"], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            out = json.loads(proc.stdout)
            doc = json.loads((Path(out["out_dir"]) / "verdicts.json").read_text())
            runs = [x["seconds"] for x in doc["runs"] if not x.get("error")]
            branches = len(doc["branches"])
            ones += runs
            walls[p].append(wall)
            print(f"round {r + 1} --parallel {p}: {wall:.0f} s for {len(runs)} branch runs "
                  f"(one: median {statistics.median(runs):.1f} s, max {max(runs):.1f} s)", flush=True)
    print(f"\n{branches} branches x {a.seeds} seeds x {a.iterations} iterations, PPO CartPole 1,000-step batches, "
          f"10 epochs, {os.cpu_count()} cores; one CLI process per run (Ray start and stop inside)")
    for p in levels:
        print(f"  --parallel {p}: median {statistics.median(walls[p]):.0f} s  (runs: "
              f"{', '.join(f'{x:.0f}' for x in walls[p])})")
    print(f"  one branch run ({a.iterations} iterations, build and restore included): median "
          f"{statistics.median(ones):.1f} s, max {max(ones):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
