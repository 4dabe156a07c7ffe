"""``check_config``: the whole of ``flow1 check --config``, one report.

Two halves, each in its own child process under the same timeouts as ``flow1 check --env``
(:mod:`flow1_ray.envcheck.isolate`): the env the config names, made as RLlib's EnvRunner makes
it, checked with random actions exactly as ``flow1 check --env`` checks an env (its contract);
then one EnvRunner built from the config samples with the config's own connectors and RLModule
(:mod:`.check`), and the pipeline rules judge what the module saw and emitted (module
``PIPELINE``). The pipeline rules judge only what the env did not already break: a NaN the env
sent is the env half's OBS_NAN_INF, never a PIPE_ finding.
"""

from __future__ import annotations

import uuid

from ..checks.thresholds import DEFAULT, Thresholds
from ..common import codes as C
from ..common.errors import Flow1InputError
from ..envcheck.api import CheckInterrupted, build_report
from ..report.model import Report
from .config import ConfigEnv, ConfigTarget

#: what a pipeline half that stopped before its end could not judge
PIPELINE_NOT_RUN = ("PIPELINE rules over the whole sample (PIPE_OBS_CLIPPED, PIPE_OBS_INVENTED, PIPE_FRAME_ORDER, "
                    "PIPE_POLICY_COLLAPSED, PIPE_ACTION_CLIPPED): the EnvRunner's sampling did not finish")


def check_config(config: str, *, checkpoint: str | None = None, steps: int = 1000, seed: int = 0,
                 thresholds: Thresholds | dict | None = None, run_id: str | None = None,
                 make_timeout_s: float | None = None, reset_timeout_s: float | None = None,
                 step_timeout_s: float | None = None, start_method: str | None = None) -> Report:
    """Check what an RLlib config's EnvRunner does between the env and the loss.

    Args:
        config: ``"module:function"``, a function returning an RLlib ``AlgorithmConfig`` (or the
            name of one), imported in the check's child processes.
        checkpoint: an Algorithm checkpoint folder (``algo.save_to_path``): the EnvRunner takes its
            RLModule weights and its connectors' states (a MeanStdFilter's statistics); None: the
            RLModule as initialised, which the initial-policy rule (PIPE_POLICY_COLLAPSED) judges.
        steps: env steps for each half; at least 1.
        seed: seeds the env check's resets and random actions, and the EnvRunner (``config.debugging(seed=)``).
        thresholds: a :class:`Thresholds`, or a dict of overrides of its defaults.
        run_id: the events' run id; None: ``check-`` and 8 random hex digits.
        make_timeout_s: seconds for importing the config and building the env (and the EnvRunner);
            None: the default of :data:`flow1_ray.envcheck.isolate.DEFAULT_TIMEOUTS`; 0: no limit.
        reset_timeout_s: seconds for one ``reset()``; None and 0 as above.
        step_timeout_s: seconds for one step: the env's ``step()`` (the env half), or the env's step with
            the connectors and the RLModule's forward pass around it (the pipeline half); None and 0 as above.
        start_method: "fork" or "spawn" for the child processes; None: as ``check_env(isolate=True)``.

    Returns:
        One :class:`Report` of both halves.

    Raises:
        Flow1InputError: a config path that cannot be imported or does not give an AlgorithmConfig, a
            multi-agent config, a checkpoint with no EnvRunner state, ``steps`` < 1.
        CheckInterrupted: Ctrl-C (with the partial report).
    """
    from ..envcheck.isolate import run_isolated
    from .check import drive_config

    if steps < 1:
        raise Flow1InputError(f"steps must be >= 1, got {steps}")
    th = thresholds if isinstance(thresholds, Thresholds) else DEFAULT.with_overrides(thresholds)
    run_id = run_id or f"check-{uuid.uuid4().hex[:8]}"
    timeouts = {"make": make_timeout_s, "reset": reset_timeout_s, "step": step_timeout_s}
    _, env_findings, env_summary = run_isolated(ConfigEnv(config), steps, seed, th, timeouts, start_method)
    if env_summary.get("interrupted"):
        raise CheckInterrupted(build_report(config, env_findings, env_summary, run_id))
    name, findings, summary = run_isolated(ConfigTarget(config, checkpoint), steps, seed, th, timeouts, start_method,
                                           drive_fn=drive_config)
    merged = {**env_summary, "env": config, "pipeline": {k: v for k, v in summary.items() if k != "modules"}}
    merged["modules"] = {**env_summary.get("modules", {}), **summary.get("modules", {})}
    if summary.get("interrupted"):
        merged["interrupted"] = True
    merged["not_run"] = list(env_summary.get("not_run") or []) + (
        [PIPELINE_NOT_RUN] if summary.get("not_run") or summary.get("stopped_early") else [])
    report = build_report(name, env_findings + findings, merged, run_id, extra_modules=(C.PIPELINE,))
    if merged.get("interrupted"):
        raise CheckInterrupted(report)
    return report
