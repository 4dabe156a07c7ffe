"""``check_env``: drive an env for a budget of steps and judge every one of them.

The checkers people use today (gymnasium's ``check_env`` and ``PassiveEnvChecker``,
Stable-Baselines3's ``check_env``) look at the first reset and step. Faults that appear
at step 6 or in episode 3 pass them. This driver runs several episodes with random
actions and feeds every reset and step to :class:`~flow1_ray.checks.env.rollout.RolloutChecker`,
the same object the EnvRunner callbacks feed with live samples. An RLlib MultiAgentEnv is
driven with per-agent random actions and judged by
:class:`~flow1_ray.checks.env.multi_agent.MultiAgentRolloutChecker` (one RolloutChecker per agent,
plus the multi-agent contract).

:func:`~flow1_ray.envcheck.judge.drive` is the whole check: resolving what the user named,
making the env, driving and judging it. ``check_env`` runs it in this process, or
(``isolate=True``, as ``flow1 check`` does) in a child process watched by
:mod:`flow1_ray.envcheck.isolate`, which adds per-call timeouts and survives an env that
crashes its process.
"""

from __future__ import annotations

import uuid

from ..checks.findings import Finding
from ..checks.thresholds import DEFAULT, Thresholds
from ..common import codes as C
from ..common.errors import Flow1InputError
from ..common.events import Event
from ..report.model import Report
from .judge import CheckInterrupted, EnvLike, drive

#: Modules whose checks ``check_env`` runs; each clean one gets a PASS row.
CHECKED_MODULES = (C.IMPORT_RESOLVE, C.ENV_SPEC, C.OBS_FLOW, C.ACTION_PIPE, C.REWARD_STATS, C.REWARD_LOGIC)
#: modules whose checks run only when asked for (a PASS row only then)
OPT_IN_MODULES = (C.REWARD_LOGIC,)


def build_report(name: str, findings: list[Finding], summary: dict, run_id: str,
                 extra_modules: tuple[str, ...] = ()) -> Report:
    """The report of a check: its findings as events, one PASS row per clean module (when
    the module's whole-rollout rules ran), ordered by module then severity; ``extra_modules``:
    modules judged beside the env's (``flow1 check --config``'s PIPELINE), each with its PASS
    row when its statistics are in ``summary["modules"]``."""
    events = [f.to_event(run_id=run_id) for f in findings]
    bad_modules = {e.module for e in events if e.status != C.PASS}
    module_stats = summary.get("modules", {})
    checked = CHECKED_MODULES + tuple(m for m in extra_modules if m in module_stats)
    for m in checked:
        if m in OPT_IN_MODULES and m not in module_stats:
            continue
        if m not in bad_modules and (m == C.IMPORT_RESOLVE or module_stats):
            notes = module_stats.get(m, {}).get("notes")
            events.append(Event(code=C.CHECKS_PASSED, module=m, status=C.PASS,
                                message=f"{m} checks passed on {summary.get('steps', 0)} steps"
                                + (f" ({'; '.join(notes)})" if notes else ""),
                                evidence=module_stats.get(m, {}), run_id=run_id))
    order = {m: i for i, m in enumerate(checked)}
    events.sort(key=lambda e: (order.get(e.module, 99), -C.STATUS_RANK[e.status]))
    report = Report(target=name, events=events, summary=summary)
    report.not_assessable = list(summary.get("not_run") or [])
    if summary.get("interrupted") and not summary.get("steps") and report.status != C.FAIL:
        report.not_judged = "interrupted before the first step"
    return report


def check_env(env: EnvLike, *, steps: int = 1000, seed: int = 0,
              thresholds: Thresholds | dict | None = None, run_id: str | None = None,
              isolate: bool = False, make_timeout_s: float | None = None, reset_timeout_s: float | None = None,
              step_timeout_s: float | None = None, start_method: str | None = None,
              audit_reward: bool = False) -> Report:
    """Check an env's contracts on every step of ``steps`` random-action steps.

    Args:
        env: a ``gymnasium.Env`` (an RLlib MultiAgentEnv too), a registered id, a ``"module:attr"``
            path (a class, a factory or an instance) or a zero-argument callable (or one taking RLlib's
            ``env_config``: it gets ``{}``).
        steps: how many steps to take, over as many episodes as they make; at least 1.
        seed: seeds the env's resets and the random actions (NONDETERMINISTIC_RESET resets twice with it).
        thresholds: a :class:`Thresholds`, or a dict of overrides of its defaults; None: the defaults.
        run_id: the events' run id; None: ``check-`` and 8 random hex digits.
        isolate: run the env in a child process (``flow1 check`` does): a call that hangs past its timeout
            is ENV_HUNG with its stack, one that dies (a signal, an exit) ENV_CRASHED, with every finding
            made before; the results otherwise those of the in-process check (one implementation, :func:`drive`).
        make_timeout_s: ``isolate`` only: seconds for the import and construction of the env (None: the
            default of :data:`flow1_ray.envcheck.isolate.DEFAULT_TIMEOUTS`; 0: no limit).
        reset_timeout_s: ``isolate`` only: seconds for one ``reset()``; None and 0 as above.
        step_timeout_s: ``isolate`` only: seconds for one ``step()``; None and 0 as above.
        start_method: ``isolate`` only: "fork" or "spawn" (the env must then be picklable: an id,
            "module:attr", a class or a top-level function); None: "fork" on POSIX but macOS while this
            process runs one thread, else "spawn".
        audit_reward: also read the env's attributes around every step and judge whether the reward jumps
            with changes no action caused (REWARD_UNEARNED, :mod:`flow1_ray.checks.env.reward_logic`):
            it costs a walk of ``env.unwrapped``'s objects at each reset and a read of the numbers found
            at each step. With ``isolate``, its reads and copies run under the step timeout and a hang or
            a crash of its own is its WATCHER_OFF (the env is checked again without it).

    Returns:
        The :class:`Report`.

    Raises:
        Flow1InputError: input the user got wrong (an env that cannot be resolved, ``steps`` < 1, a
            timeout or ``start_method`` without ``isolate``...).
        ValueError: an unknown name in a ``thresholds`` dict.
        CheckInterrupted: Ctrl-C (a KeyboardInterrupt, with the partial report).
    """
    if steps < 1:
        raise Flow1InputError(f"steps must be >= 1, got {steps}")
    th = thresholds if isinstance(thresholds, Thresholds) else DEFAULT.with_overrides(thresholds)
    run_id = run_id or f"check-{uuid.uuid4().hex[:8]}"
    timeouts = {"make": make_timeout_s, "reset": reset_timeout_s, "step": step_timeout_s}
    if isolate:
        from .isolate import run_isolated

        name, findings, summary = run_isolated(env, steps, seed, th, timeouts, start_method, audit_reward)
    else:
        given = [f"{k}_timeout_s" for k, v in timeouts.items() if v is not None] + (
            ["start_method"] if start_method else [])
        if given:
            raise Flow1InputError(f"{', '.join(given)} need isolate=True: an env call cannot be timed out "
                                  f"in this process")
        name, findings, summary = drive(env, steps, seed, th, audit_reward=audit_reward)
    report = build_report(name, findings, summary, run_id)
    if summary.get("interrupted"):
        raise CheckInterrupted(report)
    return report
