"""The leak sentinel's sensitivity: planted leaks of 0, 10 KB, 100 KB and 1 MB per 1,000 steps.

Each arm is a fresh process (one alive at a time, same seed) stepping CartPole with random
actions and keeping ``rate`` bytes a step in a growing buffer; a last arm steps RLlib's own
MemoryLeakingEnv (one dict entry per episode: ~10 KB per 1,000 steps) with nothing planted. Every 2,000 steps it reads its RSS and feeds both judges:
``now`` is MEMORY_LEAK_SUSPECTED's trend (:class:`flow1_ray.checks.run.leak.LeakTrend`, judged
every 100,000 steps, the hub every 10 s); the loop is held to 10,000 steps/s (a fast env
under RLlib), since the rule judges time as well as steps, ``before`` the rule it replaced (a linear fit
over the last 120 readings, > 1 MB per 1,000 steps with R^2 >= 0.8). Printed: the first step
each judge named the leak (``-`` never, within the arm's budget) and the MB/night it claimed.

    .venv/bin/python scripts/bench_leak_sentinel.py [--steps 10000000] [--seconds 150]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

RATES = (0, 10, 100, 1000)        # bytes kept per step: 0, 10 KB, 100 KB, 1 MB per 1,000 steps
RLLIB = "rllib"                   # the last arm: RLlib's own MemoryLeakingEnv, nothing planted by us
MAX_KEPT = 1 << 30                # an arm ends once it has kept 1 GiB


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _before(points: list) -> bool:
    pts = points[-120:]
    if len(pts) < 10 or pts[-1][0] - pts[0][0] < 5000:
        return False
    s = np.array([p[0] for p in pts], float)
    m = np.array([p[1] for p in pts], float) / 1e6
    slope, icpt = np.polyfit(s, m, 1)
    resid = m - (slope * s + icpt)
    ss = float(np.sum((m - m.mean()) ** 2))
    r2 = 1 - float(np.sum(resid ** 2)) / ss if ss > 0 else 0.0
    return slope * 1000 > 1.0 and r2 >= 0.8


def _arm(rate: int, steps: int, seconds: float, out, steps_per_s: float = 10_000.0) -> None:
    import gymnasium as gym

    from flow1_ray.checks.run.leak import LeakTrend

    if rate == RLLIB:   # one dict entry per episode (a uuid key): ~10 KB per 1,000 steps by tracemalloc
        from ray.rllib.examples.envs.classes.memory_leaking_env import MemoryLeakingEnv

        env = MemoryLeakingEnv({"observation_space": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
                                "action_space": gym.spaces.Discrete(2)})
    else:
        env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.action_space.seed(0)
    kept = bytearray()
    chunk = b"x" * (rate if rate != RLLIB else 0)
    trend, points = LeakTrend(), []
    found = {"now": None, "now_s": None, "before": None, "night_mb": None}
    t0 = time.monotonic()
    n = 0
    while n < steps and time.monotonic() - t0 < seconds and len(kept) < MAX_KEPT:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
        kept += chunk
        n += 1
        if n % 100 == 0:   # an RLlib runner with a fast env: ~10,000 steps/s, not this loop's 80,000
            ahead = t0 + n / steps_per_s - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        if n % 2000 == 0:
            now = time.monotonic()
            trend.add(n, _rss(), now)
            points.append((n, _rss()))
            if found["before"] is None and _before(points):
                found["before"] = n
            if found["now"] is None and n % 100_000 == 0:
                v = trend.judge()
                if v is not None:
                    found["now"], found["night_mb"] = n, round(v.mb_per_night)
                    found["now_s"] = round(now - t0, 1)
            if found["now"] is not None and found["before"] is not None:
                break
    found.update(steps=n, seconds=round(time.monotonic() - t0, 1), steps_per_s=round(n / (time.monotonic() - t0)))
    out.put(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=float, default=150.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    rows = []
    for rate in (*RATES, RLLIB):
        q = ctx.Queue()
        p = ctx.Process(target=_arm, args=(rate, a.steps, a.seconds, q))
        p.start()
        r = q.get()
        p.join()
        rows.append({"leak_per_1000_steps_kb": rate, **r})
    print(f"{'leak / 1000 steps':>18} {'steps run':>10} {'steps/s':>8} {'found (now)':>12} {'after s':>8} "
          f"{'MB/night':>9} {'found (before)':>15}")
    for r in rows:
        def f(x):
            return "-" if x is None else f"{x:,}"
        name = "MemoryLeakingEnv" if r['leak_per_1000_steps_kb'] == RLLIB else f"{r['leak_per_1000_steps_kb']} KB"
        print(f"{name:>18} {r['steps']:>10,} {r['steps_per_s']:>8,} "
              f"{f(r['now']):>12} {f(r['now_s']):>8} {f(r['night_mb']):>9} {f(r['before']):>15}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
