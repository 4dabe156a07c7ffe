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

The off-policy presets (``sac``: SAC HalfCheetah-v5 with 64-unit layers, ``dqn``: DQN
CartPole, as ``bench_throughput``'s) fill the replay buffer with a few ``train()`` iterations,
then each timed call is ``--updates`` of RLlib's own off-policy updates
(``learner_group.update(episodes=...)`` on a batch sampled from the buffer as DQN's and SAC's
``training_step`` samples it, outside the timer): an update there is a few milliseconds, one per
sampled step, so the tracing's fixed per-update work weighs the most there.

    .venv/bin/python scripts/bench_learner_tracing.py [--rounds 8] [--preset default|light|sac|dqn]
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
#: off-policy learners: (algorithm, env, config methods), bench_throughput's presets
OFF_POLICY = {
    "sac": ("SAC", "HalfCheetah-v5", {"training": {"num_steps_sampled_before_learning_starts": 256},
                                      "rl_module": {"model_config": {"fcnet_hiddens": [64, 64]}}}),
    "dqn": ("DQN", "CartPole-v1", {"training": {"num_steps_sampled_before_learning_starts": 256}}),
}


def _off_policy(name: str, updates: int):
    """(algorithm, one timed call: ``updates`` off-policy updates from the same start)."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.sac import SACConfig

    kind, env, methods = OFF_POLICY[name]
    config = {"SAC": SACConfig, "DQN": DQNConfig}[kind]().environment(env).env_runners(num_env_runners=0)
    for method, kwargs in methods.items():
        config = getattr(config, method)(**kwargs)
    algo = config.debugging(seed=0).build_algo()
    while algo.local_replay_buffer.get_num_timesteps() < 2000:
        algo.train()
    learner, cfg = algo.learner_group._learner, algo.config
    start = learner.get_state()

    def update() -> float:
        learner.set_state(start)
        took = 0.0
        for _ in range(updates):
            episodes = algo.local_replay_buffer.sample(
                num_items=cfg.total_train_batch_size, n_step=cfg.n_step, gamma=cfg.gamma,
                beta=cfg.replay_buffer_config.get("beta"), sample_episodes=True)
            t0 = time.perf_counter()
            algo.learner_group.update(episodes=episodes, timesteps={"num_env_steps_sampled_lifetime": 0})
            took += time.perf_counter() - t0
        return took

    return algo, learner, update


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(OFF_POLICY), default="default")
    ap.add_argument("--updates", type=int, default=200, help="off-policy updates per timed call")
    ap.add_argument("--grad-every", type=int, default=None, help="default: Flow1Options' grad_every")
    args = ap.parse_args()
    logging.disable(logging.WARNING)

    import ray

    from flow1_ray.learner import tracer as T
    from flow1_ray.options import Flow1Options

    grad_every = args.grad_every or Flow1Options().grad_every
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False)
    if args.preset in OFF_POLICY:
        p = {"updates per call": args.updates}
        algo, learner, update = _off_policy(args.preset, args.updates)
    else:
        p = PRESETS[args.preset]
        algo, learner, update = _on_policy(p)
    return _run(args, p, grad_every, algo, learner, update, T)


def _on_policy(p: dict):
    """(algorithm, one timed call: RLlib's PPO update on a fresh copy of the same episodes)."""
    from ray.rllib.algorithms.ppo import PPOConfig

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

    return algo, learner, update


def _run(args, p: dict, grad_every: int, algo, learner, update, T) -> int:
    import ray

    spent: dict[str, list[float]] = {"on": [], "every": []}
    guard: list[tuple[float, float, int]] = []   # the NaN guard's own time in an "on" call, the call's, its updates
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
        before = (tr.spent_s, tr.calls, tr.traces, tr.guard.spent_s, tr.guard.updates) if tr is not None else None
        took = update()
        if tr is not None:
            spent[name].append((tr.spent_s - before[0]) / took)   # the tracing's own time, as a share
            if name == "on":
                guard.append((tr.guard.spent_s - before[3], took, tr.guard.updates - before[4]))
            info[name] = (tr.calls - before[1], tr.traces - before[2])
        return took

    arm("off"), arm("on")  # warm-up: first-call costs of both paths
    names = ("off", "on", "every")
    times: dict[str, list[float]] = {n: [] for n in names}
    spent["on"].clear()
    spent["every"].clear()
    guard.clear()
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
    g_share = statistics.median(g / t for g, t, _ in guard)
    g_us = 1e6 * sum(g for g, _, _ in guard) / max(1, sum(n for _, _, n in guard))
    print(f"{'of which the NaN guard':>24}: {g_share:.4%} of the call (every update checked: {g_us:.1f} us an "
          f"update, {sum(n for _, _, n in guard)} updates)")
    algo.stop()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
