"""Sampling throughput of PPO CartPole with 2 EnvRunners, with Flow1Callbacks and without.

Both algorithms live in one Ray instance and are sampled in turn (A B A B ...), each call a
synchronous ``sample(num_timesteps=N)`` on both EnvRunners at once, so the figure is the
EnvRunners' own throughput with flow1's hooks, wrappers, live checks and sends inside it.
The figure to quote is the median of the per-pair ratios (with / without).

    .venv/bin/python scripts/bench_throughput.py [--reps 10] [--steps 4000] [--sample-rate 0.1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def build(callbacks, tmp: str):
    from ray.rllib.algorithms.ppo import PPOConfig

    # the same seed for both: identical initial policies and env streams, so both sample the
    # same episodes (a different policy's episode lengths alone move throughput by 10 %)
    config = (PPOConfig().environment("CartPole-v1").debugging(seed=0)
              .env_runners(num_env_runners=2, sample_timeout_s=60)
              .training(train_batch_size_per_learner=1000, minibatch_size=128, num_epochs=1))
    if callbacks is not None:
        config = config.callbacks(callbacks)
    return config.build_algo()


def sample_rate_of(algo, steps: int) -> float:
    t0 = time.perf_counter()
    got = algo.env_runner_group.foreach_env_runner(
        lambda w: sum(len(e) for e in w.sample(num_timesteps=steps, random_actions=False)),
        local_env_runner=False, timeout_seconds=300)
    return sum(got) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=4000, help="env steps per EnvRunner per call")
    ap.add_argument("--sample-rate", type=float, default=0.1)
    a = ap.parse_args()
    import logging
    import ray

    from flow1_ray import Flow1Callbacks

    # one torch thread per process: 4 EnvRunners on 2 cores with 2 threads each is mostly noise
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    tmp = tempfile.mkdtemp()
    cb = Flow1Callbacks.with_options(output_dir=tmp, print_events=False, sample_rate=a.sample_rate)
    plain, flow1 = build(None, tmp), build(cb, tmp)
    sample_rate_of(plain, 500), sample_rate_of(flow1, 500)  # warm-up
    with_, without = [], []
    for i in range(a.reps):  # ABBA order: a linear drift of the machine cancels out
        if i % 2 == 0:
            without.append(sample_rate_of(plain, a.steps))
            with_.append(sample_rate_of(flow1, a.steps))
        else:
            with_.append(sample_rate_of(flow1, a.steps))
            without.append(sample_rate_of(plain, a.steps))
    ratios = [w / p for w, p in zip(with_, without)]
    print(f"PPO CartPole-v1, 2 EnvRunners, {a.steps} steps per runner per call, {a.reps} interleaved pairs, "
          f"sample_rate {a.sample_rate}")
    print(f"without flow1: median {statistics.median(without):8.0f} steps/s (min {min(without):.0f}, "
          f"max {max(without):.0f})")
    print(f"with flow1:    median {statistics.median(with_):8.0f} steps/s (min {min(with_):.0f}, max {max(with_):.0f})")
    print(f"throughput ratio with/without: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}); ratio of totals {sum(with_) / sum(without):.3f}  goal >= 0.97")
    flow1.stop()
    plain.stop()
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
