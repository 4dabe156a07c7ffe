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

    .venv/bin/python scripts/bench_runner_overhead.py [--pairs 40] [--steps 2000] [--env CartPole-v1]
        [--envs-per-runner 1] [--preset vector|hopper|sac|dqn|atari|multi-agent|default] [--arms plain-again,flow1] [--profile]

``--profile`` runs cProfile over the flow1 runner's calls and prints flow1's functions by
their own time, as a share of the profiled ``sample()`` time: where a runner's cost goes.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# as in an EnvRunner actor: Ray sets OMP_NUM_THREADS to the actor's num_cpus (1), so torch
# runs its forward on one thread (two threads spinning on a 16-row forward made the process's
# speed drift by 15 % from one process to the next)
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_throughput import ci_of_median  # noqa: E402  (this folder is on sys.path when run)


#: flow1's options per arm beside "plain" (no flow1): the parts of a runner's cost apart;
#: None: no flow1 (``plain-again``, an A/A control: the method's own spread and bias).
ARMS: dict[str, dict | None] = {
    "plain-again": None,
    "flow1": {},
    "no-states": {"state_actions": False},
    "no-checks": {"sample_rate": 0.0},
    "wrappers-only": {"sample_rate": 0.0, "state_actions": False},
    "no-flight": {"flight_recorder": False},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--steps", type=int, default=2000, help="env steps per sample() call")
    ap.add_argument("--sample-rate", type=float, default=0.1, help="flow1's share of contract-checked episodes")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--algo", choices=("PPO", "SAC", "DQN"), default="PPO", help="whose RLModule samples")
    ap.add_argument("--envs-per-runner", type=int, default=1, help="num_envs_per_env_runner (a vectorised env)")
    ap.add_argument("--arms", default="flow1", help=f"comma-separated, each against plain; known: {', '.join(ARMS)}")
    ap.add_argument("--preset", default=None, help="bench_throughput.py's set-up (vector, hopper, sac, dqn, atari, "
                                                   "multi-agent, default): overrides --algo, --env and --envs-per-runner")
    ap.add_argument("--warmup-s", type=float, default=6.0, help="untimed sampling per runner before the pairs")
    ap.add_argument("--profile", action="store_true", help="cProfile the flow1 runner: flow1's share per function")
    a = ap.parse_args()
    import ray
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from flow1_ray import Flow1Callbacks

    names = a.arms.split(",")
    if set(names) - set(ARMS):
        print(f"unknown arm(s) {sorted(set(names) - set(ARMS))}; known: {sorted(ARMS)}", file=sys.stderr)
        return 2
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    methods = {}
    if a.preset:   # the runners of bench_throughput.py's set-up (its algorithm, env, sub-envs and RLModule)
        from bench_throughput import PRESETS, preset_methods, register

        a.algo, a.env, methods = PRESETS[a.preset]
        methods = preset_methods(methods)
        a.envs_per_runner = methods.get("env_runners", {}).get("num_envs_per_env_runner", a.envs_per_runner)
        register(a.env)
    base = ({"PPO": PPOConfig, "SAC": SACConfig, "DQN": DQNConfig}[a.algo]().environment(a.env).debugging(seed=0)
            .env_runners(num_envs_per_env_runner=a.envs_per_runner))
    for method, kwargs in methods.items():
        if method != "env_runners":
            base = getattr(base, method)(**kwargs)
    if "multi_agent" in methods:
        from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner as Runner
    else:
        Runner = SingleAgentEnvRunner
    runners = {"plain": Runner(config=base, worker_index=1)}
    for name in names:
        if ARMS[name] is None:
            runners[name] = Runner(config=base, worker_index=1)
            continue
        opts = {"sample_rate": a.sample_rate, **ARMS[name]}
        cb = Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False,
                                         state_send_interval_s=0.0, **opts)
        runners[name] = Runner(config=base.copy(copy_frozen=False).callbacks(cb), worker_index=1)
    # warm-up: past the check budget's first adjustments and the first judgement of the
    # checked episodes; then one full collection, so that the one-off collection that the
    # imports of the first calls (flow1's checks import SciPy) make due does not land in
    # whichever runner is timed when it comes (measured: a 0.3 s pause, 3 % of a 10 s arm)
    for r in runners.values():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < a.warmup_s:
            r.sample(num_timesteps=a.steps)
            r.get_metrics()
    gc.collect()
    full_collections = [0]
    gc.callbacks.append(lambda phase, info: full_collections.__setitem__(
        0, full_collections[0] + (phase == "start" and info["generation"] == 2)))
    wall: dict[str, list[float]] = {n: [] for n in runners}
    cpu: dict[str, list[float]] = {n: [] for n in runners}
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
    order = list(runners)
    # the profiled arm: the first one with flow1 (profiling an A/A arm would say nothing of flow1's parts)
    profiled = next((n for n in names if ARMS[n] is not None), None)
    for i in range(a.pairs):
        for name in (order if i % 2 == 0 else order[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            if prof is not None and name == profiled:
                prof.enable()
            steps = sum(len(e) for e in runners[name].sample(num_timesteps=a.steps))
            if prof is not None and name == profiled:
                prof.disable()
            wall[name].append((time.perf_counter() - t0) / steps)
            cpu[name].append((time.process_time() - c0) / steps)
            runners[name].get_metrics()   # untimed, as an Algorithm reads them each iteration (else RLlib's grow)
    from flow1_ray.runner.cost import account

    own = {}   # each flow1 runner's own accounting (RunnerAgent.cost): what it measures of itself
    accounts = {}   # ... and its CPU account per feature (flow1_ray/runner/cost.py)
    for name, r in runners.items():
        for agent in (ag for c in getattr(r, "_callbacks", []) for ag in getattr(c, "_agents", {}).values()):
            own[name] = (agent.budget.checks_s, agent.hooks_s, agent.sample_s, agent.budget.rate)
            accounts[name] = account([agent.cost()["cost"]])
    for r in runners.values():
        r.stop()
    ray.shutdown()
    print(f"{a.algo} {a.env} x {a.envs_per_runner} sub-envs, one process, {a.pairs} interleaved rounds of "
          f"sample({a.steps}) calls (ABBA) after {a.warmup_s:g} s of warm-up each; flow1 sample_rate {a.sample_rate}, "
          f"state_sample_rate 0.25; full garbage collections while timed: {full_collections[0]}")
    for name in names:
        for label, d in (("wall time per step", wall), ("process CPU per step", cpu)):
            r = [f / p for f, p in zip(d[name], d["plain"])]
            lo, hi = ci_of_median(r)
            print(f"{name:14s} {label:21s}: plain {statistics.median(d['plain']) * 1e6:6.1f} us, {name} "
                  f"{statistics.median(d[name]) * 1e6:6.1f} us; ratio median {statistics.median(r):.3f} "
                  f"(95 % CI {lo:.3f}-{hi:.3f}); throughput ratio {1 / statistics.median(r):.3f} "
                  f"({1 / hi:.3f}-{1 / lo:.3f})")
    for name, (checks, hooks, total, rate) in own.items():
        print(f"{name:14s} its own accounting: checks {checks / total:.2%} (rate now {rate:.3f}), per-sample() hooks "
              f"{hooks / total:.2%} of its sample() time (warm-up included; the vector step's wrapper not counted)")
    for name, acc in accounts.items():
        if not acc:
            continue
        print(f"{name:14s} its CPU account (thread CPU, after the runner's first 2,000 steps): runner "
              f"{acc['runner_us_per_step']:.1f} us per step without flow1, flow1 {acc['flow1_share']:.2%} of it"
              + (f"; over budget: {', '.join(acc['over_budget'])}" if acc["over_budget"] else ""))
        for feature, f in acc["features"].items():
            print(f"{'':14s}   {feature:9s} {f['us_per_step']:8.3f} us/step  {f['share']:7.3%}  (budget {f['budget']:.1%})")
    if prof is not None and profiled is not None:
        print(f"profiled: {profiled} (its timings above include cProfile's overhead)")
        print_flow1_share(prof)
        if os.environ.get("FLOW1_PROFILE_OUT"):
            prof.dump_stats(os.environ["FLOW1_PROFILE_OUT"])
    return 0


WRAPPERS = ("wrapped_sample", "wrapped", "checked_step", "wrapped_reset")   # flow1's closures around RLlib's calls


def print_flow1_share(prof) -> None:
    """flow1's inclusive time as a share of the profiled sample() time: every flow1 function
    entered from outside flow1 (RLlib calling a hook, the vector env calling a wrapper), with
    what runs inside it, less the wrapped calls themselves (the env's step and reset, RLlib's
    sample()). The profiler inflates every Python call alike, so shares compare, not seconds."""
    import pstats

    st = pstats.Stats(prof)

    def ours(func) -> bool:
        return "flow1_ray" in func[0]

    top = max(v[3] for k, v in st.stats.items() if k[2] == "wrapped_sample")
    entered = wrapped = 0.0
    parts: dict[str, float] = {}
    for func, (_, _, _, _, callers) in st.stats.items():
        if ours(func):
            # a call from outside flow1 (or from before the profiler started: no caller recorded)
            t = sum(c[3] for caller, c in callers.items() if not ours(caller)) if callers else st.stats[func][3]
            entered += t
            name = f"{os.path.basename(func[0])}:{func[1]}:{func[2]}"
            if t:
                parts[name] = parts.get(name, 0.0) + t
        elif func[0] != "~":   # a Python function outside flow1 called by one of flow1's wrappers
            t = sum(c[3] for caller, c in callers.items() if ours(caller) and caller[2] in WRAPPERS)
            wrapped += t
            if t:
                parts["(wrapped) " + func[2]] = parts.get("(wrapped) " + func[2], 0.0) - t
    own = entered - wrapped
    print(f"flow1's inclusive time: {own / top * 100:.2f} % of the profiled sample() time "
          f"({own:.3f} s of {top:.3f} s)")
    for name, t in sorted(parts.items(), key=lambda kv: -abs(kv[1]))[:12]:
        print(f"  {t / top * 100:+7.2f} %  {name}")

if __name__ == "__main__":
    sys.exit(main())
