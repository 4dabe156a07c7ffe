"""The pipeline half of ``flow1 check --config``: one local EnvRunner built from the user's
config samples with the config's own connectors and RLModule, in calls of the config's rollout
fragment, while the :class:`~.tap.Tap` records what the module saw and emitted; the pipeline rules
(:mod:`flow1_ray.checks.pipeline`) judge the record.

:func:`drive_config` has the signature of :func:`flow1_ray.envcheck.judge.drive`, so the
isolated check's child process (:mod:`flow1_ray.envcheck.isolate`) runs it with the same call
board: the import of the config and the runner's construction are its "make" call (under
``--make-timeout``), and each env step re-arms its "step" call, so that it covers the env's step,
the connectors and the module's forward pass until the next one; a hang past its timeout is ENV_HUNG with the stack, a death ENV_CRASHED.

The runner is the config's, changed only where a check must: sampling in this process
(``num_env_runners=0``), one sub-env (rows in step order), the given seed, the config's own
``explore`` setting. With ``checkpoint`` it takes the checkpoint's EnvRunner state (the RLModule's
weights, the connectors' states such as a MeanStdFilter's statistics).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..checks.findings import Finding
from ..checks.pipeline.module_output import pipeline_findings
from ..checks.pipeline.runner_failure import runner_failed
from ..checks.thresholds import Thresholds
from ..common import codes as C
from ..common.errors import Flow1InputError
from ..envcheck.watch import NO_WATCH, Watch
from .config import ConfigTarget, load_config
from .tap import Tap


def drive_config(target: ConfigTarget, steps: int, seed: int, th: Thresholds, watch: Watch = NO_WATCH,
                 audit_reward: bool = False) -> tuple[str, list[Finding], dict]:
    """Build the config's EnvRunner, sample ``steps`` steps through its pipeline and judge them;
    (name, findings, summary) as :func:`flow1_ray.envcheck.judge.drive` returns them.
    ``audit_reward`` is the env check's, not used here."""
    name = str(target)
    watch.enter("import", 0, 0)
    config = load_config(target.path)
    watch.leave()
    watch.named(name, None)
    t0 = time.perf_counter()
    findings: list[Finding] = []
    summary: dict[str, Any] = {"env": name, "steps_budget": steps, "seed": seed, "steps": 0, "episodes": 0}
    watch.enter("make", 0, 0)
    runner = _build(config, target, seed, findings)
    watch.leave()
    if runner is None:
        summary["stopped_early"] = "the config's EnvRunner could not be built"
        summary["seconds"] = round(time.perf_counter() - t0, 4)
        watch.done(findings, summary)
        return name, findings, summary
    try:
        tap = Tap(runner)
        _sample(runner, tap, steps, findings, summary, watch)
        _judge(runner, config, tap, target, th, findings, summary)
        summary["seconds"] = round(time.perf_counter() - t0, 4)
        watch.done(findings, summary)
    finally:
        watch.enter("close", summary["steps"], summary["episodes"])
        try:
            runner.stop()
        except Exception:
            pass
    return name, findings, summary


def _build(config: Any, target: ConfigTarget, seed: int, findings: list[Finding]) -> Any:
    """The config's EnvRunner in this process; None (and PIPE_RUNNER_FAILED) when its env, a
    connector or its RLModule raised while it was built."""
    if config.is_multi_agent:
        raise Flow1InputError(f"{target.path} is a multi-agent config: flow1 check --config judges single-agent "
                              f"pipelines (check its env with flow1 check --env)")
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from ..liveness.crash_site import crash_site

    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1, gym_env_vectorize_mode="sync").debugging(seed=seed)
    cls = config.env_runner_cls or SingleAgentEnvRunner
    try:
        runner = cls(config=config)
        if target.checkpoint:
            _restore(runner, target.checkpoint)
    except Flow1InputError:
        raise
    except Exception as e:
        findings.append(runner_failed(crash_site(e), "build", 0))
        return None
    return runner


def _restore(runner: Any, checkpoint: str) -> None:
    """The checkpoint's EnvRunner state (an Algorithm checkpoint's ``env_runner`` folder, or an
    EnvRunner's own checkpoint folder)."""
    path = Path(checkpoint)
    for candidate in (path / "env_runner", path):
        if (candidate / "class_and_ctor_args.pkl").is_file() or (candidate / "state.pkl").is_file() \
                or (candidate / "rl_module").is_dir():
            runner.restore_from_path(str(candidate))
            return
    raise Flow1InputError(f"{checkpoint} holds no EnvRunner state (expected an Algorithm checkpoint folder, with "
                          f"env_runner/ in it)")


class _EnvClock:
    """The sub-env's ``reset`` and ``step`` announced to the watch: the board shows "step" from
    each env step to the next, so a hang in the env, a connector or the RLModule's forward pass
    is timed by the step timeout (an isolated check's supervisor), whichever of them hangs."""

    def __init__(self, env: Any, watch: Watch) -> None:
        self.env, self.watch, self.steps, self.episodes = env, watch, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, **kwargs: Any) -> Any:
        self.watch.enter("reset", self.steps, self.episodes)
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        self.watch.enter("step", self.steps, self.episodes)
        out = self.env.step(action)
        self.steps += 1
        self.episodes += bool(out[2] or out[3])
        return out


def _clock(runner: Any, watch: Watch) -> _EnvClock | None:
    vec = getattr(runner.env, "unwrapped", runner.env)
    envs = getattr(vec, "envs", None)
    if not envs:
        return None
    envs[0] = _EnvClock(envs[0], watch)
    return envs[0]


def _sample(runner: Any, tap: Tap, steps: int, findings: list[Finding], summary: dict, watch: Watch) -> None:
    """``steps`` env steps in calls of the config's rollout fragment (as its runners sample); an
    exception is PIPE_RUNNER_FAILED and ends the drive."""
    from ..liveness.crash_site import crash_site

    clock = _clock(runner, watch)
    try:
        fragment = int(runner.config.get_rollout_fragment_length(worker_index=0))
    except Exception:
        fragment = steps
    done_steps = episodes = 0
    while done_steps < steps:
        watch.enter("step", done_steps, episodes)
        try:
            eps = runner.sample(num_timesteps=min(max(fragment, 1), steps - done_steps), random_actions=False)
        except KeyboardInterrupt:
            summary["interrupted"] = True
            summary["stopped_early"] = f"interrupted after {done_steps} steps"
            break
        except Exception as e:
            at = clock.steps if clock is not None else done_steps
            tap.remove()   # the runner's own pipelines back: the site names which one raised
            findings.append(runner_failed(crash_site(e, runner), "sample", at))
            summary["stopped_early"] = f"sampling raised at step {at}"
            break
        finally:
            watch.leave()
        done_steps += max(sum(ep.env_steps() for ep in eps), 1)
        episodes += sum(1 for ep in eps if ep.is_done)
        summary["steps"], summary["episodes"] = done_steps, episodes
    summary["tap_truncated"] = tap.truncated


def _judge(runner: Any, config: Any, tap: Tap, target: ConfigTarget, th: Thresholds, findings: list[Finding],
           summary: dict) -> None:
    from .describe import describe_runner

    sample = tap.sample(**describe_runner(runner, config, trained=bool(target.checkpoint)))
    found, notes = pipeline_findings(sample, th)
    findings.extend(found)
    summary["modules"] = {C.PIPELINE: {"rows": sample.rows, "dist": sample.dist, "pipeline": sample.pipeline(),
                                       "module_to_env": " -> ".join(sample.module_to_env),
                                       "trained": sample.trained, "notes": notes}}
