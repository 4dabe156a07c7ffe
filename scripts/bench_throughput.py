"""What flow1 costs a user: an algorithm's throughput with and without Flow1Callbacks, one
algorithm alive at a time.

Each arm builds its own algorithm (same ``.debugging(seed=...)``: identical initial policies
and env streams), trains untimed warm-up iterations (at least ``--warmup-iterations``, and
until the runners have ended two episodes per sub-env, at most ``--warmup-s``), then is timed
by wall clock. What the warm-up leaves out are flow1's one-off costs: each sub-env's first
episode is always contract-checked (printed apart: "flow1 in runners in warm-up, s"), and the
first state snapshot at iteration 10 fits its clusters from scratch and draws the first
heatmap. On Pong's 500-step iterations and 800-step episodes, a 3-iteration window right
after one warm-up iteration held both and read 0.80; steady, 1.05 (BENCHMARKS.md). The timed
window is ``--iterations`` (default 10, one steady snapshot) on

- ``algo.train()``: ``--iterations`` iterations, env steps sampled per second of wall time
  -- sampling, learning, flow1's hooks, its per-iteration round trips and its background
  actors (probe, monitor, recorder, clusterer) all inside;
- direct ``sample()``: synchronous ``sample(num_timesteps=--steps)`` calls on every remote
  EnvRunner at once (``--calls`` at least, and for ``--sample-s`` seconds at least), env
  steps per second -- the runners' own throughput with flow1's wrappers, live checks, state
  sampling and sends inside;

and is stopped before the next arm is built, so that no arm's actors run during another's
turn. Each arm runs in a fresh process of its own (its own driver and Ray): one driver
building algorithm after algorithm keeps what the earlier ones left alive, and its garbage
collections grow with it (measured on the sac preset: the driver's collections took 9.3 ms
per env step in the first arm and 12.7-16.4 in the later ones, whichever arm), a tax on
whichever arm comes later. The driver's collections are printed per arm ("driver gc",
"driver full gc": ms per 1,000 steps; the full collections and the objects tracked at the
end). Arms alternate in ABBA order over ``--rounds`` rounds (a drift of the machine
cancels out); the figures are the median of the per-round ratios flow1 / plain and the
ratio of totals. RLlib's ``env_runner_sampling_timer`` is not used: ``MetricsLogger.log_time``
reduces it as an EMA across iterations (``reduce="ema"`` in Ray's
rllib/utils/metrics/metrics_logger.py), so rates computed from it stay dominated by the
first, slower iterations.

    .venv/bin/python scripts/bench_throughput.py [--rounds 3] [--iterations 10] [--warmup-iterations 11]
        [--preset default|light|vector|hopper|sac|dqn|atari|multi-agent]

The atari preset needs OpenCV for RLlib's Atari wrapper: ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def ci_of_median(ratios: list[float], reps: int = 5000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the median of paired ratios: how far this machine's noise
    leaves the figure from what repeating the benchmark would give."""
    import numpy as np

    r = np.asarray(ratios, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(r), (reps, len(r)))
    meds = np.median(r[idx], axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def geomean_ci(ratios: list[float], reps: int = 5000, seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of paired ratios and its 95 % bootstrap interval: every round
    weighs in (the median uses the middle ones), so where the rounds' spread is symmetric in
    log it needs fewer rounds for the same width."""
    import numpy as np

    lr = np.log(np.asarray(ratios, dtype=np.float64))
    idx = np.random.default_rng(seed).integers(0, len(lr), (reps, len(lr)))
    means = lr[idx].mean(axis=1)
    return (float(np.exp(lr.mean())), float(np.exp(np.percentile(means, 2.5))),
            float(np.exp(np.percentile(means, 97.5))))

#: Set-ups: (algorithm, env, config methods and their arguments). ``default`` is RLlib's PPO
#: (a learner-heavy iteration), ``light`` one epoch over a 2,000-step batch; the others are
#: where flow1's costs weigh the most: cheap vectorised steps, continuous control, off-policy
#: learners with short iterations, an image env with a CNN.
PRESETS: dict[str, tuple[str, str, dict]] = {
    "default": ("PPO", "CartPole-v1", {}),
    "light": ("PPO", "CartPole-v1", {"training": {"train_batch_size_per_learner": 2000, "minibatch_size": 500,
                                                  "num_epochs": 1}}),
    "vector": ("PPO", "CartPole-v1", {"env_runners": {"num_envs_per_env_runner": 16},
                                      "training": {"train_batch_size_per_learner": 8000}}),
    "hopper": ("PPO", "Hopper-v5", {"training": {"train_batch_size_per_learner": 1000, "minibatch_size": 250,
                                                 "num_epochs": 2}}),
    "sac": ("SAC", "HalfCheetah-v5", {"env_runners": {"num_env_runners": 1},
                                      "training": {"num_steps_sampled_before_learning_starts": 256},
                                      "rl_module": {"model_config": {"fcnet_hiddens": [64, 64]}}}),
    "dqn": ("DQN", "CartPole-v1", {"env_runners": {"num_env_runners": 1},
                                   "training": {"num_steps_sampled_before_learning_starts": 256}}),
    "atari": ("PPO", "pong64", {"training": {"train_batch_size_per_learner": 500, "minibatch_size": 250,
                                             "num_epochs": 1},
                                "rl_module": {"model_config": {"conv_filters": [[16, 4, 2], [32, 4, 2], [64, 4, 2],
                                                                                [128, 4, 2]],
                                                               "conv_activation": "relu",
                                                               "head_fcnet_hiddens": [256]}}}),
    "multi-agent": ("PPO", "ma_cartpole2", {"multi_agent": {"policies": {"p0", "p1"},
                                                            "policy_mapping_fn": "bench_throughput:_agent_policy"}}),
}


def _agent_policy(agent_id, *args, **kwargs) -> str:
    """The multi-agent preset's mapping: agent i to policy p<i>."""
    return f"p{agent_id}"


def _ma_cartpole2(cfg: dict):
    """RLlib's MultiAgentCartPole with two agents (one RLModule each)."""
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return MultiAgentCartPole({"num_agents": 2})


def register(env: str) -> None:
    """The presets' registered envs (pong64, ma_cartpole2)."""
    from ray import tune

    if env == "pong64":
        tune.register_env("pong64", _pong64)
    elif env == "ma_cartpole2":
        tune.register_env("ma_cartpole2", _ma_cartpole2)


def preset_methods(methods: dict) -> dict:
    """A preset's config methods with a mapping function named as ``module:function`` resolved."""
    out = {}
    for method, kwargs in methods.items():
        kwargs = dict(kwargs)
        fn = kwargs.get("policy_mapping_fn")
        if isinstance(fn, str):
            kwargs["policy_mapping_fn"] = globals()[fn.split(":")[1]]
        out[method] = kwargs
    return out


def _pong64(cfg: dict):
    """RLlib's Atari preprocessing (64x64 grey, 4 frames stacked, frameskip 4) on ALE's Pong."""
    import ale_py  # noqa: F401  (registers the ALE/ ids)
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    return wrap_atari_for_new_api_stack(gym.make("ale_py:ALE/Pong-v5", frameskip=1), dim=64, framestack=4)


def describe(preset: str) -> str:
    algo, env, methods = PRESETS[preset]
    return f"{algo} {env} {methods or '(RLlib defaults)'}"


def arms(output_dir: str) -> dict:
    """The callbacks of each arm (None: no flow1)."""
    from flow1_ray import Flow1Callbacks

    common = dict(output_dir=output_dir, print_events=False)
    return {name: None if opts is None else Flow1Callbacks.with_options(**opts, **common)
            for name, opts in ARMS.items()}


#: the arms: None, no flow1; else the Flow1Options that differ from the defaults (variants
#: isolate one part of flow1)
ARMS: dict[str, dict | None] = {
    "plain": None,
    "plain-again": None,   # an A/A control: the spread of the method when nothing differs
    "flow1": {},
    "flow1-no-states": {"state_actions": False},
    "flow1-no-live-checks": {"sample_rate": 0.0},
    "flow1-no-tracing": {"learner_tracing": False},
    "flow1-no-driver-watch": {"driver_watch": False},
}


def build(callbacks, preset: str, seed: int):
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig

    algo, env, methods = PRESETS[preset]
    register(env)
    config = ({"PPO": PPOConfig, "SAC": SACConfig, "DQN": DQNConfig}[algo]()
              .environment(env).debugging(seed=seed).env_runners(num_env_runners=2, sample_timeout_s=120))
    for method, kwargs in preset_methods(methods).items():
        config = getattr(config, method)(**kwargs)
    if callbacks is not None:
        config = config.callbacks(callbacks)
    return config.build_algo()


def busy_jiffies() -> int:
    """CPU time of every process on the machine so far (user+nice+system+irq+softirq), in
    clock ticks: a second figure, less noisy than wall time on a shared machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


def process_cpu() -> dict[str, float]:
    """CPU seconds so far of this run's processes by role: the EnvRunners, flow1's actors
    (``Flow1*``, ``NodeProbe``, ``StateClusterer``), this driver (which also hosts the
    local Learner). Differences over the timed window say where flow1's cost lands."""
    import psutil

    out = {"runners": 0.0, "flow1 actors": 0.0, "driver": 0.0}
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            t = p.info["cpu_times"].user + p.info["cpu_times"].system
        except (psutil.Error, TypeError, AttributeError):
            continue
        if p.info["pid"] == me:
            out["driver"] += t
        elif cmd.startswith("ray::") and "EnvRunner" in cmd.split()[0]:
            out["runners"] += t
        elif cmd.startswith(("ray::Flow1", "ray::NodeProbe", "ray::StateClusterer")):
            out["flow1 actors"] += t
    return out


def _runner_own_s(result: dict) -> float:
    """flow1's own measured time in all runners so far (``result["flow1"]["runner_cost"]``)."""
    return float(((result.get("flow1") or {}).get("runner_cost") or {}).get("flow1_s") or 0.0)


def _tracing_s(result: dict) -> float:
    """The Learner tracing's own time in this iteration (``learners/__all_modules__/flow1``)."""
    learners = result.get("learners") or {}
    v = float(((learners.get("__all_modules__") or {}).get("flow1") or {}).get("tracing_s") or 0.0)
    return v if v == v else 0.0


def settle(max_s: float = 10.0, quiet: float = 0.5) -> None:
    """Wait until the machine is quiet (all cores together use < ``quiet`` of one core for a
    second): Ray starts and ends worker processes around an algorithm's build and stop,
    which would land in whichever arm is timed next."""
    import psutil

    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        if psutil.cpu_percent(interval=1.0) * psutil.cpu_count() / 100.0 < quiet:
            return


def warm_up(algo, a: argparse.Namespace) -> dict:
    """Untimed iterations: actor start-up, the first weights sync, torch's first calls, and
    each sub-env's first episode (always contract-checked by flow1, whatever the check rate:
    a one-off cost); the same for every arm. Returns the last result."""
    cfg = algo.config
    sub_envs = max(1, int(cfg.num_env_runners or 0)) * max(1, int(cfg.num_envs_per_env_runner or 1))
    t0, i = time.monotonic(), 0
    while True:
        last = algo.train()
        i += 1
        episodes = int((last.get("env_runners") or {}).get("num_episodes_lifetime") or 0)
        if i >= a.warmup_iterations and (episodes >= 2 * sub_envs or time.monotonic() - t0 >= a.warmup_s):
            return last


class GcTimer:
    """The driver's garbage collections over a window (``gc.callbacks``): their time. The
    driver hosts the local Learner, whose off-policy updates allocate many small objects, and
    flow1's driver state; more objects alive make each full collection longer."""

    def __init__(self) -> None:
        self.s, self.full_s, self.full, self._t0 = 0.0, 0.0, 0, 0.0
        self.tracked = 0   # objects the collector tracks at the end: what a full collection walks

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            d = time.perf_counter() - self._t0
            self.s += d
            if info.get("generation") == 2:
                self.full_s += d
                self.full += 1

    def __enter__(self) -> "GcTimer":
        import gc

        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        import gc

        gc.callbacks.remove(self)
        self.tracked = len(gc.get_objects())


def measure(callbacks, a: argparse.Namespace) -> tuple[float, float, float, dict[str, float]]:
    """(train() env steps/s, direct sample() env steps/s, machine CPU ms per 1000 env steps
    in train(), CPU ms per 1000 env steps in train() by process role) of one freshly built
    algorithm."""
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    algo = build(callbacks, a.preset, a.seed)
    try:
        last = warm_up(algo, a)
        settle()
        steps, t0, j0, p0 = 0, time.perf_counter(), busy_jiffies(), process_cpu()
        own0 = _runner_own_s(last)
        warm_own_s = own0   # flow1's own time in the runners during the warm-up: the one-off first episodes' checks
        hook_ms, tracing_s = [], 0.0
        with GcTimer() as gct:
            for _ in range(a.iterations):
                result = algo.train()
                steps += int(result["env_runners"]["num_env_steps_sampled"])
                if "flow1" in result:
                    hook_ms.append(float(result["flow1"].get("driver_ms", 0.0)))
                    tracing_s += _tracing_s(result)
        train_s = time.perf_counter() - t0
        train_rate = steps / train_s
        busy_ms = (busy_jiffies() - j0) * tick_ms
        cpu_ms = busy_ms / steps * 1000.0
        cpu = process_cpu()
        roles = {k: (v - p0.get(k, 0.0)) * 1e6 / steps for k, v in cpu.items()}
        roles["driver gc"], roles["driver full gc"] = gct.s * 1e6 / steps, gct.full_s * 1e6 / steps
        roles["driver full gcs"], roles["driver gc-tracked objects, k"] = gct.full, gct.tracked / 1e3
        if hook_ms:  # flow1's driver hook per iteration, as a share of the iteration's wall time
            roles["hook % of train()"] = sum(hook_ms) / 1e3 / train_s * 100
            # flow1's CPU by its own accounting: its actors' processes, the driver hook, its
            # measured time inside the runners and the Learner's tracing; as a share of all the
            # machine's busy CPU
            runners_ms, tracing_ms = (_runner_own_s(result) - own0) * 1e3, tracing_s * 1e3
            own_ms = (cpu["flow1 actors"] - p0["flow1 actors"]) * 1e3 + sum(hook_ms) + runners_ms + tracing_ms
            roles["flow1 % of CPU"] = own_ms / busy_ms * 100
            # its parts apart, per 1000 env steps: the runners' own accounting, the Learner tracing
            roles["flow1 in runners"] = runners_ms / steps * 1000.0
            roles["flow1 tracing"] = tracing_ms / steps * 1000.0
            roles["flow1 in runners in warm-up, s"] = warm_own_s
        group = algo.env_runner_group
        sampled, calls, t0 = 0, 0, time.perf_counter()
        while calls < a.calls or time.perf_counter() - t0 < a.sample_s:
            calls += 1
            got = group.foreach_env_runner(lambda w, n=a.steps: sum(len(e) for e in w.sample(num_timesteps=n)),
                                           local_env_runner=False, timeout_seconds=300)
            sampled += sum(got)
        sample_rate = sampled / (time.perf_counter() - t0)
    finally:
        algo.stop()
    settle()
    return train_rate, sample_rate, cpu_ms, roles


def _fmt(key: str, value: float) -> str:
    """A role's figure: shares and seconds with two decimals, milliseconds whole."""
    if "%" in key or key.endswith(", s"):
        return f"{key} {value:.2f}"
    return f"{key} {value:.0f}"


def child(a: argparse.Namespace) -> int:
    """One arm in this fresh process: its own Ray and driver, measured, printed as JSON."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    try:
        print(json.dumps(measure(arms(tempfile.mkdtemp())[a.child], a)))
    finally:
        ray.shutdown()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10,
                    help="timed train() iterations per arm and round (10: flow1's heatmap_every, one steady snapshot)")
    ap.add_argument("--calls", type=int, default=5, help="timed sample() calls per arm and round, at least")
    ap.add_argument("--sample-s", type=float, default=5.0,
                    help="... and until this many seconds of them (a fast vectorised env's call takes ~0.1 s)")
    ap.add_argument("--steps", type=int, default=2000, help="env steps per EnvRunner per sample() call")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup-iterations", type=int, default=11,
                    help="untimed train() iterations at least (11: past flow1's first state snapshot, its refit "
                         "and first heatmap, a one-off at iteration 10)")
    ap.add_argument("--warmup-s", type=float, default=60.0,
                    help="... and until two episodes per sub-env ended, at most this long")
    ap.add_argument("--arms", default="plain,flow1", help="comma-separated, first is the baseline")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    names = a.arms.split(",")
    unknown = set(names) - set(ARMS)
    if unknown:
        print(f"unknown arm(s) {sorted(unknown)}; known: {sorted(ARMS)}", file=sys.stderr)
        return 2
    train: dict[str, list[float]] = {n: [] for n in names}
    sample: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    roles: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    settle()
    for r in range(a.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            p = subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--child", name],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{name}: failed\n{p.stderr[-3000:]}", file=sys.stderr)
                return 1
            t, s, c, by_role = json.loads(p.stdout.strip().splitlines()[-1])
            train[name].append(t)
            sample[name].append(s)
            cpu[name].append(c)
            roles[name].append(by_role)
            print(f"round {r + 1} {name:22s} train() {t:7.0f} steps/s   sample() {s:7.0f} steps/s   "
                  f"CPU {c:6.0f} ms / 1000 steps (train): "
                  + ", ".join(_fmt(k, v) for k, v in by_role.items()), flush=True)
    base = names[0]
    print(f"\npreset {a.preset}: {describe(a.preset)}, 2 EnvRunners unless said, seed {a.seed}, "
          f"{a.rounds} rounds (ABBA), {a.iterations} timed train() iterations and {a.calls}+ sample() calls "
          f"({a.sample_s:g} s at least) of {a.steps} steps per runner per arm and round; one algorithm alive at a time; wall clock")
    for n in names[1:]:
        for label, d in (("algo.train()", train), ("direct sample()", sample), ("CPU per step", cpu)):
            r = [x / y for x, y in zip(d[n], d[base])]
            lo, hi = ci_of_median(r)
            print(f"{n} / {base} {label:16s}: median {statistics.median(r):.3f} (95 % CI {lo:.3f}-{hi:.3f}; min "
                  f"{min(r):.3f}, max {max(r):.3f}); ratio of totals {sum(d[n]) / sum(d[base]):.3f}")
    print("\nCPU ms per 1000 env steps in train(), by process role, and flow1's driver hook (median over rounds):")
    for n in names:
        med = {k: statistics.median(x.get(k, 0.0) for x in roles[n]) for k in roles[n][0]}
        print(f"  {n:22s} " + ", ".join(_fmt(k, v) for k, v in med.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
