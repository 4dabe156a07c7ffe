"""How often ``flow1 whatif`` says "held" (or "harmful") for a knob that should change
nothing: a healthy run (RLlib's PPO on CartPole, 1,000-step batches, seed 0, 3 iterations,
``save_to_path``), then ``--repeats`` what-ifs of ``--set lr=<lr x --factor>`` (a 1 % change
of the step: the runs diverge, the learning does not change in expectation), each with its
own seeds (``first_seed`` = 100 x repeat), judged on the return. The verdicts' counts and
the share said "held" / "harmful", with a Wilson 95 % upper bound, against the test's stated
rate (0.05 each).

    .venv/bin/python scripts/whatif_null.py [--repeats 20] [--seeds 3] [--iterations 3] [--factor 1.01]
"""

from __future__ import annotations

import argparse
import collections
import logging
import math
import os
import sys
import tempfile
import time


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + half) / (1 + z * z / n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--factor", type=float, default=1.01)
    a = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray.whatif.run import run_whatif
    from flow1_ray.whatif.verdict import ALPHA, HARMFUL, HELD

    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2,
             log_to_driver=False, logging_level=logging.ERROR)
    work = tempfile.mkdtemp()
    config = (PPOConfig().environment("CartPole-v1").debugging(seed=0).env_runners(num_env_runners=1)
              .training(train_batch_size_per_learner=1000))
    algo = config.build_algo()
    for _ in range(3):
        algo.train()
    checkpoint = os.path.join(work, "healthy")
    algo.save_to_path(checkpoint)
    algo.stop()
    knob = f"lr={config.lr * a.factor!r}"
    counts: collections.Counter = collections.Counter()
    t0 = time.monotonic()
    for r in range(a.repeats):
        o = run_whatif(checkpoint, sets=[knob], seeds=a.seeds, iterations=a.iterations, parallel=2,
                       first_seed=100 * r, output_dir=os.path.join(work, "whatif"))
        (v,) = o.verdicts
        counts[v["verdict"]] += 1
        print(f"repeat {r + 1}: {v['verdict']}: {v['why']}", flush=True)
    ray.shutdown()
    n = a.repeats
    print(f"\n{knob} (x{a.factor} of {config.lr!r}) on a healthy PPO CartPole checkpoint, {a.seeds} seeds a side, "
          f"{a.iterations} iterations, {n} what-ifs in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    for said in (HELD, HARMFUL):
        k = counts.get(said, 0)
        print(f"  said {said!r}: {k} of {n} ({k / n:.2f}; Wilson 95 % upper bound {wilson_upper(k, n):.2f}); "
              f"the test's stated rate {ALPHA:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
