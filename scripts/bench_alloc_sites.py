"""What an allocation-site window costs a runner: a PPO SingleAgentEnvRunner's CPU per env step
while tracemalloc traces 1, 2, 3 and 6 frames, against the same runner not tracing, arms
alternated in one process (runner/alloc_sites.py traces ``NFRAMES`` frames for ~5 s when a
runner's RSS grows). Printed: steps/s and the thread's CPU per step per arm, and each arm's
ratio to the untraced arms around it.

    .venv/bin/python scripts/bench_alloc_sites.py [--rounds 3] [--steps 1200]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternations of every arm")
    ap.add_argument("--steps", type=int, default=1200, help="env steps per arm and round")
    ap.add_argument("--env", default="CartPole-v1")
    a = ap.parse_args()
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from flow1_ray.runner.alloc_sites import NFRAMES

    r = SingleAgentEnvRunner(config=PPOConfig().environment(a.env).env_runners(num_envs_per_env_runner=1))
    r.sample(num_timesteps=2000)   # warm-up
    arms = (0, 1, 2, 3, 6)
    cpu: dict[int, list[float]] = {k: [] for k in arms}
    rate: dict[int, list[float]] = {k: [] for k in arms}
    for _ in range(a.rounds):
        for nf in arms:
            if nf:
                tracemalloc.start(nf)
            t, c = time.perf_counter(), time.thread_time()
            r.sample(num_timesteps=a.steps)
            cpu[nf].append((time.thread_time() - c) / a.steps * 1e6)
            rate[nf].append(a.steps / (time.perf_counter() - t))
            if nf:
                tracemalloc.stop()
    base = statistics.median(cpu[0])
    print(f"{a.env}, {a.rounds} rounds x {a.steps} steps per arm (flow1 traces {NFRAMES} frames)")
    print("| frames traced | steps/s | CPU us/step | CPU ratio to not tracing |")
    print("|---|---|---|---|")
    for nf in arms:
        print(f"| {nf or 'none'} | {statistics.median(rate[nf]):.0f} | {statistics.median(cpu[nf]):.0f} | "
              f"{statistics.median(cpu[nf]) / base:.2f} |")


if __name__ == "__main__":
    main()
