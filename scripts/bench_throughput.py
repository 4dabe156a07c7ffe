"""Sampling throughput of PPO CartPole with 2 EnvRunners: without flow1, with Flow1Callbacks
without the StateClusterer, and with it (a snapshot + heatmap every N calls).

All algorithms live in one Ray instance and are sampled in turn, the order rotated each
round (and reversed every other one) so that a drift of the machine cancels out; each
call is a synchronous ``sample(num_timesteps=N)`` on both EnvRunners at once, so the
figure is the EnvRunners' own throughput with flow1's hooks, wrappers, live checks, state
sampling and sends inside it. One call (2 x 2000 steps) is one iteration of PPO's default
4000-step batch. With the StateClusterer, a snapshot is asked for right before every
``--snapshot-every``-th timed call of that algorithm (10 = the default heatmap_every; 1 =
the worst case, heatmap_every=1) and waited for, untimed, after it: its clustering, its
cluster rows and its heatmap PNG are computed while the runners sample. Quote the median
of the per-round ratios and the ratio of totals (which carries the rounds with a snapshot
at their weight).

    .venv/bin/python scripts/bench_throughput.py [--reps 20] [--steps 2000] [--snapshot-every 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def build(callbacks):
    from ray.rllib.algorithms.ppo import PPOConfig

    # the same seed for all: identical initial policies and env streams, so all sample the
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
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=2000, help="env steps per EnvRunner per call")
    ap.add_argument("--sample-rate", type=float, default=0.1)
    ap.add_argument("--snapshot-every", type=int, default=10, help="timed calls per snapshot")
    a = ap.parse_args()
    import logging

    import ray

    from flow1_ray import Flow1Callbacks
    from flow1_ray.names import clusterer_name, recorder_name

    # one torch thread per process: 4 EnvRunners on 2 cores with 2 threads each is mostly noise
    ray.init(num_cpus=6, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    tmp = tempfile.mkdtemp()
    common = dict(output_dir=tmp, print_events=False, sample_rate=a.sample_rate)
    algos = {
        "plain": build(None),
        "flow1": build(Flow1Callbacks.with_options(run_id="bench-nostates", state_actions=False, **common)),
        "flow1+states": build(Flow1Callbacks.with_options(run_id="bench-states", heatmap_every=1, **common)),
    }
    clusterer = ray.get_actor(clusterer_name("bench-states"), namespace="flow1")
    recorder = ray.get_actor(recorder_name("bench-states"), namespace="flow1")
    for algo in algos.values():
        sample_rate_of(algo, 500)  # warm-up
    names = list(algos)
    rates: dict[str, list[float]] = {n: [] for n in names}
    snapshot_s = []
    for i in range(a.reps):
        order = names[i % 3:] + names[:i % 3]
        for name in (order if i % 2 == 0 else order[::-1]):
            snap = name == "flow1+states" and i % a.snapshot_every == 0
            if snap:
                before = ray.get(recorder.status.remote())["heatmaps"]["written"]
                clusterer.snapshot.remote(i + 1)
            rates[name].append(sample_rate_of(algos[name], a.steps))
            if snap:  # untimed: let the snapshot and its heatmap finish
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 30:
                    if ray.get(recorder.status.remote())["heatmaps"]["written"] > before:
                        break
                    time.sleep(0.05)
                snapshot_s.append(ray.get(clusterer.full_status.remote())["last_compute_s"])
    st, rec = ray.get(clusterer.full_status.remote()), ray.get(recorder.status.remote())
    base = rates["plain"]
    print(f"PPO CartPole-v1, 2 EnvRunners, {a.steps} steps per runner per call, {a.reps} rounds, "
          f"sample_rate {a.sample_rate}, state_sample_rate 0.25, a snapshot every {a.snapshot_every} call(s)")
    for n in names:
        print(f"{n:13s} median {statistics.median(rates[n]):7.0f} steps/s (min {min(rates[n]):.0f}, "
              f"max {max(rates[n]):.0f})")

    def ratio(x: list[float], y: list[float], label: str, goal: str) -> None:
        r = [p / q for p, q in zip(x, y)]
        print(f"{label}: median {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f}); "
              f"ratio of totals {sum(x) / sum(y):.3f}  {goal}")

    ratio(rates["flow1"], base, "flow1 without StateClusterer / plain", "goal >= 0.97")
    ratio(rates["flow1+states"], base, "flow1 with StateClusterer / plain", "goal >= 0.97")
    ratio(rates["flow1+states"], rates["flow1"], "with / without StateClusterer", "goal: nothing measurable")
    print(f"snapshots {st['snapshots']} ({st['backend']}, {st['received']} states received, clustering "
          f"median {statistics.median(snapshot_s) * 1e3:.0f} ms), heatmaps written {rec['heatmaps']['written']}, "
          f"dropped {rec['heatmaps']['dropped']}, samples dropped {rec['samples_dropped']}")
    for algo in algos.values():
        algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
