"""check_env on CartPole-v1 for 1000 steps against bare stepping of the same env.

Both run in this one process, interleaved (bare, check, bare, check, ...), so machine
drift hits both alike; the figure to quote is the median of the per-pair ratios.
Bare stepping = gym.make + reset(seed) + 1000 steps of sampled actions with resets,
which is what check_env does at the least, minus its checks.

    .venv/bin/python scripts/bench_check.py [--reps 20] [--steps 1000] [--env CartPole-v1]

``--isolation``: what the child process of ``flow1 check`` costs: ``check_env(...,
isolate=True)`` (fork, the env made, driven and judged in the child, findings back over a
pipe) against ``check_env(...)`` in this process, interleaved pairs, the median ratio.

``--memory``: peak RSS of ``python -m flow1_ray check`` on 4 MiB and 100 MiB observations
(a (1024, 1024) and a (5120, 5120) float32 Box, 500-step episodes), each command in a
fresh process whose RUSAGE_CHILDREN max RSS is the largest of the CLI and its child.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

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


def checked(env_id: str, steps: int, seed: int = 0, isolate: bool = False) -> float:
    t0 = time.perf_counter()
    check_env(env_id, steps=steps, seed=seed, isolate=isolate)
    return time.perf_counter() - t0


def _line(label: str, xs: list[float]) -> str:
    return (f"{label:<15}median {statistics.median(xs) * 1e3:8.2f} ms  (min {min(xs) * 1e3:.2f}, "
            f"max {max(xs) * 1e3:.2f})")


def overhead(a: argparse.Namespace) -> None:
    bare(a.env, a.steps), checked(a.env, a.steps)  # warm-up: imports, first-call caches
    b, c = [], []
    for _ in range(a.reps):
        b.append(bare(a.env, a.steps))
        c.append(checked(a.env, a.steps))
    ratios = [ci / bi for bi, ci in zip(b, c)]
    print(f"env {a.env}, {a.steps} steps, {a.reps} interleaved pairs")
    print(_line("bare stepping", b))
    print(_line("check_env", c))
    print(f"ratio check/bare: median {statistics.median(ratios):.2f}x  (min {min(ratios):.2f}, max {max(ratios):.2f})"
          f"  goal <= 5x; check_env < 2 s: {'yes' if max(c) < 2.0 else 'NO'}")


def isolation(a: argparse.Namespace) -> None:
    checked(a.env, a.steps), checked(a.env, a.steps, isolate=True)  # warm-up
    inproc, iso = [], []
    for _ in range(a.reps):
        inproc.append(checked(a.env, a.steps))
        iso.append(checked(a.env, a.steps, isolate=True))
    ratios = [i / p for p, i in zip(inproc, iso)]
    from flow1_ray.envcheck.isolate import default_start_method

    print(f"env {a.env}, {a.steps} steps, {a.reps} interleaved pairs, start method {default_start_method()}")
    print(_line("in-process", inproc))
    print(_line("isolated", iso))
    print(f"ratio isolated/in-process: median {statistics.median(ratios):.2f}x  (min {min(ratios):.2f}, "
          f"max {max(ratios):.2f})  goal <= 2x")


class BigObservation(gym.Env):
    """Clean float32 frames of ``side`` x ``side`` in 500-step episodes."""

    side = 1024
    horizon = 500

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (self.side, self.side), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((self.side, self.side), np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full((self.side, self.side), (self.t % 100) / 100.0, np.float32)
        return obs, 1.0, False, self.t >= self.horizon, {}


class Obs4MB(BigObservation):
    side = 1024


class Obs100MB(BigObservation):
    side = 5120


_PEAK = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, round(time.perf_counter() - t0, 1))
sys.stderr.write(r.stderr[-2000:])
"""


def memory(a: argparse.Namespace) -> None:
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    for cls in (Obs4MB, Obs100MB):
        cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "flow1_ray", "check", "--env",
               f"bench_check:{cls.__name__}", "--steps", str(a.steps)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        try:
            code, kib, seconds = out.stdout.split()
        except ValueError:
            print(f"{cls.__name__}: no figure ({out.stderr[-500:]})")
            continue
        mib = cls.side * cls.side * 4 / 2**20
        print(f"{mib:6.1f} MiB observations, {a.steps} steps: exit {code}, peak RSS {int(kib) / 1024:8.1f} MiB, "
              f"{seconds} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--env", default="CartPole-v1")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--isolation", action="store_true", help="isolated vs in-process check_env, side by side")
    mode.add_argument("--memory", action="store_true", help="peak RSS of flow1 check on 4 MiB / 100 MiB observations")
    a = ap.parse_args()
    (isolation if a.isolation else memory if a.memory else overhead)(a)


if __name__ == "__main__":
    main()
