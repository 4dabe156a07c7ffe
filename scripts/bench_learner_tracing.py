"""What flow1's Learner tracing costs an update: the same PPO learner updating on the same
episodes with the tracing installed and uninstalled, alternating.

One algorithm (plain, no Flow1Callbacks) in this process, ``num_learners=0``: the Learner
lives here, so installing and uninstalling the tracing (``flow1_ray.learner.tracer``) on it
between arms is exact, and nothing else runs. The episodes are sampled once; each timed
call is ``learner_group.update(episodes=..., num_epochs, minibatch_size)`` -- RLlib's own
update, learner connector (GAE) included, i.e. what ``learner_update_timer`` measures in a
run; every call starts from a fresh copy of the episodes and the same weights and optimizer
state. Arms alternate in ABBA order over ``--rounds``; the figure is the median of per-round
ratios traced / untraced (bootstrap 95 % interval) and the ratio of totals -- and, since this
2-core machine's noise between two identical calls is several percent, the tracing's own
time (its hooks, reductions and logging, timed by the tracer itself) as a share of each
call, which noise cannot hide -- at the default
``grad_every`` and at ``grad_every=1`` (every update traced: the per-trace cost).

    .venv/bin/python scripts/bench_learner_tracing.py [--rounds 8] [--preset default|light]
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_throughput import ci_of_median  # noqa: E402

#: RLlib's PPO defaults (4,000 steps, 30 epochs of 128: ~940 updates per call), and a light
#: learner (one epoch over 2,000 steps in 500s: 4 updates, so a trace is a larger share)
PRESETS = {
    "default": {"train_batch_size_per_learner": 4000, "minibatch_size": 128, "num_epochs": 30},
    "light": {"train_batch_size_per_learner": 2000, "minibatch_size": 500, "num_epochs": 1},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default")
    ap.add_argument("--grad-every", type=int, default=None, help="default: Flow1Options' grad_every")
    args = ap.parse_args()
    logging.disable(logging.WARNING)

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray.learner import tracer as T
    from flow1_ray.options import Flow1Options

    grad_every = args.grad_every or Flow1Options().grad_every
    p = PRESETS[args.preset]
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False)
    algo = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0).debugging(seed=0)
            .training(**p).build_algo())
    learner = algo.learner_group._learner
    episodes = algo.env_runner.sample(num_timesteps=p["train_batch_size_per_learner"], random_actions=False)

    # every timed call gets a fresh copy of the episodes and starts from the same weights and
    # optimizer state: PPO's learner connector extends the episodes it is given in place (one
    # bootstrap step each), so reusing them made a call grow from 6.6 s to 13.8 s over 7 rounds
    # in both arms (measured), and the arms would not do the same work
    start = learner.get_state()

    def update() -> float:
        learner.set_state(start)
        batch = copy.deepcopy(episodes)
        t0 = time.perf_counter()
        algo.learner_group.update(episodes=batch, num_epochs=p["num_epochs"], minibatch_size=p["minibatch_size"],
                                  timesteps={"num_env_steps_sampled_lifetime": 0})
        return time.perf_counter() - t0

    spent: dict[str, list[float]] = {"on": [], "every": []}
    info: dict[str, tuple[int, int]] = {}
    # one tracer per arm for the whole run, attached and detached between calls, so that its
    # grad_every schedule runs on across calls as in a run (a fresh install traces its first update)
    tracers = {"on": T.LearnerTracer(learner, grad_every), "every": T.LearnerTracer(learner, 1)}
    installed: dict[str, bool] = {}

    def arm(name: str) -> float:
        for other in tracers.values():
            other.uninstall()
        tr = tracers.get(name)
        if tr is not None:
            tr.install(trace_first=name not in installed)
            installed[name] = True
        before = (tr.spent_s, tr.calls, tr.traces) if tr is not None else None
        took = update()
        if tr is not None:
            spent[name].append((tr.spent_s - before[0]) / took)   # the tracing's own time, as a share
            info[name] = (tr.calls - before[1], tr.traces - before[2])
        return took

    arm("off"), arm("on")  # warm-up: first-call costs of both paths
    names = ("off", "on", "every")
    times: dict[str, list[float]] = {n: [] for n in names}
    spent["on"].clear()
    spent["every"].clear()
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            times[n].append(arm(n))
        print(f"round {r + 1}: " + "  ".join(f"{n} {times[n][-1]:.3f}s" for n in names), flush=True)
    total = {n: (tracers[n].calls, tracers[n].traces) for n in tracers}
    print(f"\npreset {args.preset} {p}; grad_every={grad_every}; updates (traced) in all: "
          + ", ".join(f"{n} {c} ({t})" for n, (c, t) in total.items()))
    for n in ("on", "every"):
        ratios = [a / b for a, b in zip(times[n], times["off"])]
        lo, hi = ci_of_median(ratios)
        label = f"traced every {grad_every}" if n == "on" else "traced every update"
        print(f"{label:>24}: the tracing's own time / the call = {statistics.median(spent[n]):.4%} "
              f"(max {max(spent[n]):.4%}); wall clock traced / untraced = {statistics.median(ratios):.4f} "
              f"(95% CI {lo:.4f}-{hi:.4f}), totals {sum(times[n]) / sum(times['off']):.4f}")
    algo.stop()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
