"""``flow1 train``: PPO with Flow1Callbacks on an embedded local Ray, the main demo job.

With ``--inject crash|hang`` the built-in FaultyCartPole makes EnvRunner 1 raise inside
``env.step`` (then Ray restarts it) or hang there (then flow1 kills it, stall_action="kill");
the exit code then says whether flow1 named the injected fault (0) or missed it (1).
Without ``--inject``: 0 when the run has no FAIL, 1 otherwise.

The terminal gets flow1's lines and one line per iteration; Ray's own output (its and
RLlib's logging, the worker lines it forwards, warnings, its C++ log) goes to
``<run dir>/ray.log`` (:mod:`flow1_ray.rundir.raylog`), on the terminal too with ``verbose``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from typing import Any

from ..common import codes as C
from ..common.schema import ALL_MODULES, ENTROPY, MEAN_KL
from ..common.errors import Flow1InputError

INJECT = {
    "none": ({}, None),
    "crash": ({"crash_worker": 1, "crash_at_step": 400}, C.ENV_CRASHED),
    "hang": ({"hang_worker": 1, "hang_at_step": 400, "hang_s": 3600}, C.WORKER_STALLED),
}


def _env_for_rllib(env: str, inject: str) -> tuple[Any, dict]:
    """What to hand to ``config.environment``; user mistakes become Flow1InputError."""
    from ..envcheck.demo import FaultyCartPole

    faults, _ = INJECT[inject]
    if inject != "none":
        if env != "CartPole-v1":
            raise Flow1InputError("--inject uses the built-in FaultyCartPole; leave --env at CartPole-v1")
        return FaultyCartPole, dict(faults)
    from ..envcheck.judge import resolve_env

    target, _ = resolve_env(env)
    if isinstance(target, str) or ":" not in env:
        return env, {}
    from ray.tune.registry import register_env

    name = f"flow1-{env.replace(':', '-')}"
    register_env(name, lambda cfg: target() if callable(target) else target)
    return name, {}


def _start_ray(env_runners: int) -> None:
    """A local Ray of our own, or the cluster of ``RAY_ADDRESS`` (a RayJob). Workers' output
    is forwarded (into ray.log); ``configure_logging=False``: Ray's loggers keep the handlers
    they bound at import, which write into ray.log."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=True, configure_logging=False)
    else:
        ray.init(address="local", num_cpus=max(2, env_runners), include_dashboard=False,
                 object_store_memory=150 * 1024**2, log_to_driver=True, configure_logging=False)


def _config(cb: Any, env_spec: Any, env_config: dict, env_runners: int, stall_timeout_s: float,
            learner_gpus: float) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig().environment(env_spec, env_config=env_config).callbacks(cb)
        .env_runners(num_env_runners=env_runners, sample_timeout_s=max(10.0, 2 * stall_timeout_s))
        .training(train_batch_size_per_learner=1000, minibatch_size=128, num_epochs=3)
        .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=2.0)
    )
    if learner_gpus > 0:
        config = config.learners(num_learners=1, num_gpus_per_learner=learner_gpus)
    return config


def iteration_line(i: int, n: int, result: dict, t0: float) -> str:
    """One line per iteration: what an RL engineer watches (steps, return) and what flow1
    adds (the workers' states, the findings so far)."""
    f = result.get("flow1", {})
    w, ev = f.get("worker", {}), f.get("events", {})
    ret = result.get("env_runners", {}).get("episode_return_mean", float("nan"))
    steps = result.get("num_env_steps_sampled_lifetime", 0)
    steps = int(steps) if isinstance(steps, (int, float)) and steps == steps else 0
    return (f"iter {i}/{n}  steps {steps:,}  return {float(ret):6.1f}  {_policy_numbers(result)}  "
            f"workers alive {w.get('alive', 0)} dead {w.get('dead', 0)} stalled {w.get('stalled', 0)}  "
            f"FAIL {ev.get(C.FAIL, 0)} WARN {ev.get(C.WARN, 0)}  {time.monotonic() - t0:.0f} s")


def _policy_numbers(result: dict) -> str:
    """``entropy 0.67 KL 0.012``: the policy's entropy and KL this iteration, the mean over its
    RLModules (``-`` where the iteration trained none: an asynchronous learner's)."""
    learners = result.get("learners") if isinstance(result.get("learners"), dict) else {}
    mods = [v for k, v in learners.items() if k != ALL_MODULES and isinstance(v, dict)]

    def mean(key: str) -> str:
        xs = [float(v[key]) for v in mods if isinstance(v.get(key), (int, float)) and not isinstance(v.get(key), bool)]
        return f"{sum(xs) / len(xs):.3g}" if xs else "-"
    return f"entropy {mean(ENTROPY)} KL {mean(MEAN_KL)}"


def _train(algo: Any, iterations: int, con: Any, quiet: bool, log: Any) -> str | None:
    """The iterations; the run directory the results name."""
    from ..report.render import plain

    run_dir, t0 = None, time.monotonic()
    for i in range(1, iterations + 1):
        r = algo.train()
        log.adopt()   # a logger Ray or RLlib set up during the iteration
        run_dir = r.get("flow1", {}).get("run_dir", run_dir)
        if not quiet:
            con.print(plain(iteration_line(i, iterations, r, t0)))
    return run_dir


def _ray_log_path(run_dir: Any) -> str:
    """Where Ray's log is written while it runs: in the run directory when it is local,
    else (object storage) a local file uploaded at the end."""
    from ..rundir.raylog import RAY_LOG

    if not run_dir.local:
        fd, path = tempfile.mkstemp(prefix="flow1-ray-", suffix=".log")
        os.close(fd)
        return path
    try:
        run_dir.mkdir()
    except OSError as e:
        raise Flow1InputError(f"cannot write the run directory {run_dir}: {e.strerror or e}") from None
    return str(run_dir / RAY_LOG)


def _keep_ray_log(path: str, run_dir: Any) -> str:
    """The log's place in the run directory (uploaded there when the run is not local)."""
    from ..rundir.raylog import RAY_LOG

    if run_dir.local:
        return path
    dest = run_dir / RAY_LOG
    try:
        with open(path, "rb") as f:
            dest.write_bytes(f.read())
        os.unlink(path)
        return str(dest)
    except OSError as e:
        print(f"flow1: Ray's log stays at {path}: it could not be written to {dest}: {e}", file=sys.stderr,
              flush=True)
        return path


def run_training(env: str, iterations: int, env_runners: int, inject: str, output_dir: str | None,
                 stall_timeout_s: float, quiet: bool = False, learner_gpus: float = 0.0,
                 verbose: bool = False) -> tuple[Any, str]:
    """Train; returns (Report of the run directory, expected code or None). On a cluster
    (``RAY_ADDRESS`` set, as in a RayJob) it joins the cluster instead of starting a local Ray."""
    if iterations < 1 or env_runners < 0 or learner_gpus < 0:
        raise Flow1InputError("--iterations must be >= 1, --env-runners and --learner-gpus >= 0")
    env_spec, env_config = _env_for_rllib(env, inject)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # RLlib's import warns of what it finds installed (dm_control without a display: a GLFW
    # warning): Ray's words, held here and replayed into ray.log once it is open
    with warnings.catch_warnings(record=True) as early:
        warnings.simplefilter("always")
        from ..driver.run import new_run_id
        from ..callbacks import Flow1Callbacks
    from ..rundir.raylog import RayLog
    from ..report.render import console, plain, print_run_report
    from ..report.rundir import load_run_report
    from ..rundir.store import REPORT_JSON, Location

    con = console()
    cb = Flow1Callbacks.with_options(
        output_dir=output_dir or "", stall_timeout_s=stall_timeout_s, run_id=new_run_id(),
        stall_action="kill" if inject == "hang" else "report")
    planned = Location(cb.OPTIONS.resolved_output_dir()) / cb.OPTIONS.run_id
    log_path = _ray_log_path(planned)
    con.print(plain(f"flow1 train: PPO on {env}{'' if inject == 'none' else f' with an injected {inject}'}, "
                    f"{env_runners} EnvRunner(s), {iterations} iterations; Ray's log: {planned / 'ray.log'}"))
    with RayLog(log_path, verbose=verbose) as log:
        for w in early:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        import ray

        _start_ray(env_runners)
        algo = None
        try:
            config = _config(cb, env_spec, env_config, env_runners, stall_timeout_s, learner_gpus)
            log.adopt()   # the loggers RLlib's and Tune's imports set up
            algo = config.build_algo()
            log.adopt()
            run_dir = _train(algo, iterations, con, quiet, log)
        finally:
            t0 = time.time()
            if algo is not None:
                algo.stop()
            with log.ray_speaks():   # the worker lines Ray held back, printed by this thread
                ray.shutdown()
    log_path = _keep_ray_log(log_path, planned)
    if run_dir is None:
        raise RuntimeError("the run produced no flow1 result (Flow1Callbacks did not start)")
    report = load_run_report(run_dir)
    report.write_summary(run_dir)
    print_run_report(con, report)
    con.print(f"report: {Location(run_dir) / REPORT_JSON} (stopped in {time.time() - t0:.1f} s)")
    return report, INJECT[inject][1]
