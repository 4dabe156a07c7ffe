"""The leak sentinel's sensitivity: planted leaks of 0, 10 KB, 100 KB and 1 MB per 1,000 steps.

Each arm is a fresh process (one alive at a time, same seed) stepping CartPole with random
actions and keeping ``rate`` bytes a step in a growing buffer (RLlib's MemoryLeakingEnv keeps
~10 KB per 1,000 steps). Every 2,000 steps it reads its RSS and feeds both judges:
``now`` is MEMORY_LEAK_SUSPECTED's trend (:class:`flow1_ray.checks.leak.LeakTrend`, judged
every 20,000 steps as the hub does every 10 s), ``before`` the rule it replaced (a linear fit
over the last 120 readings, > 1 MB per 1,000 steps with R^2 >= 0.8). Printed: the first step
each judge named the leak (``-`` never, within the arm's budget) and the MB/night it claimed.

    .venv/bin/python scripts/bench_leak_sentinel.py [--steps 1500000] [--seconds 90]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

RATES = (0, 10, 100, 1000)        # bytes kept per step: 0, 10 KB, 100 KB, 1 MB per 1,000 steps


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


def _arm(rate: int, steps: int, seconds: float, out) -> None:
    import gymnasium as gym

    from flow1_ray.checks.leak import LeakTrend

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.action_space.seed(0)
    kept = bytearray()
    chunk = b"x" * rate
    trend, points = LeakTrend(), []
    found = {"now": None, "before": None, "night_mb": None}
    t0 = time.monotonic()
    n = 0
    while n < steps and time.monotonic() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
        kept += chunk
        n += 1
        if n % 2000 == 0:
            now = time.monotonic()
            trend.add(n, _rss(), now)
            points.append((n, _rss()))
            if found["before"] is None and _before(points):
                found["before"] = n
            if found["now"] is None and n % 20000 == 0:
                v = trend.judge()
                if v is not None:
                    found["now"], found["night_mb"] = n, round(v.mb_per_night)
    found.update(steps=n, seconds=round(time.monotonic() - t0, 1), steps_per_s=round(n / (time.monotonic() - t0)))
    out.put(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_500_000)
    ap.add_argument("--seconds", type=float, default=90.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    rows = []
    for rate in RATES:
        q = ctx.Queue()
        p = ctx.Process(target=_arm, args=(rate, a.steps, a.seconds, q))
        p.start()
        r = q.get()
        p.join()
        rows.append({"leak_per_1000_steps_kb": rate, **r})
    print(f"{'leak / 1000 steps':>18} {'steps run':>10} {'steps/s':>8} {'found (now)':>12} {'MB/night':>9} "
          f"{'found (before)':>15}")
    for r in rows:
        def f(x):
            return "-" if x is None else f"{x:,}"
        print(f"{str(r['leak_per_1000_steps_kb']) + ' KB':>18} {r['steps']:>10,} {r['steps_per_s']:>8,} "
              f"{f(r['now']):>12} {f(r['night_mb']):>9} {f(r['before']):>15}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
