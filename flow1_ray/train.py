"""``flow1 train``: PPO with Flow1Callbacks on an embedded local Ray, the main demo job.

With ``--inject crash|hang`` the built-in FaultyCartPole makes EnvRunner 1 raise inside
``env.step`` (then Ray restarts it) or hang there (then flow1 kills it, stall_action="kill");
the exit code then says whether flow1 named the injected fault (0) or missed it (1).
Without ``--inject``: 0 when the run has no FAIL, 1 otherwise.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

from . import codes as C
from .errors import Flow1InputError

INJECT = {
    "none": ({}, None),
    "crash": ({"crash_worker": 1, "crash_at_step": 400}, C.ENV_CRASHED),
    "hang": ({"hang_worker": 1, "hang_at_step": 400, "hang_s": 3600}, C.WORKER_STALLED),
}


def _env_for_rllib(env: str, inject: str) -> tuple[Any, dict]:
    """What to hand to ``config.environment``; user mistakes become Flow1InputError."""
    from .demo import FaultyCartPole

    faults, _ = INJECT[inject]
    if inject != "none":
        if env != "CartPole-v1":
            raise Flow1InputError("--inject uses the built-in FaultyCartPole; leave --env at CartPole-v1")
        return FaultyCartPole, dict(faults)
    from .envcheck import resolve_env

    target, _ = resolve_env(env)
    if isinstance(target, str) or ":" not in env:
        return env, {}
    from ray.tune.registry import register_env

    name = f"flow1-{env.replace(':', '-')}"
    register_env(name, lambda cfg: target() if callable(target) else target)
    return name, {}


def run_training(env: str, iterations: int, env_runners: int, inject: str, output_dir: str | None,
                 stall_timeout_s: float, quiet: bool = False, learner_gpus: float = 0.0) -> tuple[Any, str]:
    """Train; returns (Report of the run directory, expected code or None). On a cluster
    (``RAY_ADDRESS`` set, as in a RayJob) it joins the cluster instead of starting a local Ray."""
    if iterations < 1 or env_runners < 0 or learner_gpus < 0:
        raise Flow1InputError("--iterations must be >= 1, --env-runners and --learner-gpus >= 0")
    env_spec, env_config = _env_for_rllib(env, inject)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .callbacks import Flow1Callbacks
    from .report.render import console, print_run_report
    from .report.rundir import load_run_report

    con = console()
    logging.getLogger("ray").setLevel(logging.ERROR)
    if not ray.is_initialized() and os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False, configure_logging=False, logging_level=logging.ERROR)
    elif not ray.is_initialized():
        ray.init(address="local", num_cpus=max(2, env_runners), include_dashboard=False, object_store_memory=150 * 1024**2,
                 log_to_driver=False, configure_logging=False, logging_level=logging.ERROR)
    cb = Flow1Callbacks.with_options(
        output_dir=output_dir or "", stall_timeout_s=stall_timeout_s,
        stall_action="kill" if inject == "hang" else "report")
    config = (
        PPOConfig().environment(env_spec, env_config=env_config).callbacks(cb)
        .env_runners(num_env_runners=env_runners, sample_timeout_s=max(10.0, 2 * stall_timeout_s))
        .training(train_batch_size_per_learner=1000, minibatch_size=128, num_epochs=3)
        .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=2.0)
    )
    if learner_gpus > 0:
        config = config.learners(num_learners=1, num_gpus_per_learner=learner_gpus)
    con.print(f"flow1 train: PPO on {env}{'' if inject == 'none' else f' with an injected {inject}'}, "
              f"{env_runners} EnvRunner(s), {iterations} iterations")
    algo = config.build_algo()
    run_dir = None
    try:
        with Progress(TextColumn("[bold]iter"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=con, disable=quiet) as progress:
            task = progress.add_task("", total=iterations)
            for _ in range(iterations):
                r = algo.train()
                f = r.get("flow1", {})
                run_dir = f.get("run_dir", run_dir)
                w = f.get("worker", {})
                ev = f.get("events", {})
                ret = r.get("env_runners", {}).get("episode_return_mean", float("nan"))
                progress.update(task, advance=1, description=(
                    f"steps {r.get('num_env_steps_sampled_lifetime', 0)}  return {float(ret):6.1f}  workers "
                    f"alive {w.get('alive', 0)} dead {w.get('dead', 0)} stalled {w.get('stalled', 0)}  "
                    f"FAIL {ev.get(C.FAIL, 0)} WARN {ev.get(C.WARN, 0)}"))
    finally:
        t0 = time.time()
        algo.stop()
        ray.shutdown()
    if run_dir is None:
        raise RuntimeError("the run produced no flow1 result (Flow1Callbacks did not start)")
    report = load_run_report(run_dir)
    report.write_summary(run_dir)
    print_run_report(con, report)
    from .store import REPORT_JSON, Location

    con.print(f"report: {Location(run_dir) / REPORT_JSON} (stopped in {time.time() - t0:.1f} s)")
    return report, INJECT[inject][1]
