"""check_env on CartPole-v1 for 1000 steps against bare stepping of the same env.

Both run in this one process, interleaved (bare, check, bare, check, ...), so machine
drift hits both alike; the figure to quote is the median of the per-pair ratios.
Bare stepping = gym.make + reset(seed) + 1000 steps of sampled actions with resets,
which is what check_env does at the least, minus its checks.

    .venv/bin/python scripts/bench_check.py [--reps 20] [--steps 1000] [--env CartPole-v1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

from flow1_ray import check_env


def bare(env_id: str, steps: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    env = gym.make(env_id, disable_env_checker=True)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()
    return time.perf_counter() - t0


def checked(env_id: str, steps: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    check_env(env_id, steps=steps, seed=seed)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--env", default="CartPole-v1")
    a = ap.parse_args()
    bare(a.env, a.steps), checked(a.env, a.steps)  # warm-up: imports, first-call caches
    b, c = [], []
    for _ in range(a.reps):
        b.append(bare(a.env, a.steps))
        c.append(checked(a.env, a.steps))
    ratios = [ci / bi for bi, ci in zip(b, c)]
    print(f"env {a.env}, {a.steps} steps, {a.reps} interleaved pairs")
    print(f"bare stepping  median {statistics.median(b) * 1e3:8.2f} ms  (min {min(b) * 1e3:.2f}, max {max(b) * 1e3:.2f})")
    print(f"check_env      median {statistics.median(c) * 1e3:8.2f} ms  (min {min(c) * 1e3:.2f}, max {max(c) * 1e3:.2f})")
    print(f"ratio check/bare: median {statistics.median(ratios):.2f}x  (min {min(ratios):.2f}, max {max(ratios):.2f})"
          f"  goal <= 5x; check_env < 2 s: {'yes' if max(c) < 2.0 else 'NO'}")


if __name__ == "__main__":
    main()
