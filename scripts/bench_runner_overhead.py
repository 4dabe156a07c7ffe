"""What flow1 costs inside an EnvRunner, measured paired: two SingleAgentEnvRunners in one
process (one with Flow1Callbacks, one without, same seed), their ``sample()`` calls
interleaved, each timed by wall clock and by the process's CPU time.

On a shared machine whose speed drifts by tens of percent over minutes (measured here: the
same 10,000 PPO CartPole steps took 8.8 s of runner CPU in one minute and 14.0 s in the
next), arms built one after the other compare two moments of the machine as much as two
programs. Interleaving calls a second apart inside one process compares the programs: the
per-step wrappers, the live contract checks, the state sampling of ``on_sample_end``, the
watchdog thread. What runs outside the runners (the hub process, the driver's hook) is
measured apart by ``bench_throughput.py`` (CPU of the hub, ``result["flow1"]["driver_ms"]``).

    .venv/bin/python scripts/bench_runner_overhead.py [--pairs 40] [--steps 2000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from bench_throughput import ci_of_median  # noqa: E402  (this folder is on sys.path when run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--steps", type=int, default=2000, help="env steps per sample() call")
    ap.add_argument("--sample-rate", type=float, default=0.1, help="flow1's share of contract-checked episodes")
    a = ap.parse_args()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from flow1_ray import Flow1Callbacks

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    base = PPOConfig().environment("CartPole-v1").debugging(seed=0)
    cb = Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False, sample_rate=a.sample_rate,
                                     state_send_interval_s=0.0)
    runners = {"plain": SingleAgentEnvRunner(config=base, worker_index=1),
               "flow1": SingleAgentEnvRunner(config=base.copy(copy_frozen=False).callbacks(cb), worker_index=1)}
    for r in runners.values():
        r.sample(num_timesteps=500)  # warm-up
    wall: dict[str, list[float]] = {n: [] for n in runners}
    cpu: dict[str, list[float]] = {n: [] for n in runners}
    for i in range(a.pairs):
        for name in (("plain", "flow1") if i % 2 == 0 else ("flow1", "plain")):
            t0, c0 = time.perf_counter(), time.process_time()
            steps = sum(len(e) for e in runners[name].sample(num_timesteps=a.steps))
            wall[name].append((time.perf_counter() - t0) / steps)
            cpu[name].append((time.process_time() - c0) / steps)
    for r in runners.values():
        r.stop()
    ray.shutdown()
    print(f"PPO CartPole-v1, one process, {a.pairs} interleaved pairs of sample({a.steps}) calls (ABBA); "
          f"flow1 sample_rate {a.sample_rate}, state sampling on (state_sample_rate 0.25)")
    for label, d in (("wall time per step", wall), ("process CPU per step", cpu)):
        r = [f / p for f, p in zip(d["flow1"], d["plain"])]
        lo, hi = ci_of_median(r)
        print(f"{label:21s}: plain {statistics.median(d['plain']) * 1e6:6.1f} us, flow1 "
              f"{statistics.median(d['flow1']) * 1e6:6.1f} us; flow1 / plain median {statistics.median(r):.3f} "
              f"(95 % CI {lo:.3f}-{hi:.3f}); throughput ratio {1 / statistics.median(r):.3f} "
              f"({1 / hi:.3f}-{1 / lo:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
