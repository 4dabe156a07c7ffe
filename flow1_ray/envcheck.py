"""``check_env``: drive an env for a budget of steps and judge every one of them.

The checkers people use today (gymnasium's ``check_env`` and ``PassiveEnvChecker``,
Stable-Baselines3's ``check_env``) look at the first reset and step. Faults that appear
at step 6 or in episode 3 pass them. This driver runs several episodes with random
actions and feeds every reset and step to :class:`~flow1_ray.checks.rollout.RolloutChecker`,
the same object the EnvRunner callbacks feed with live samples. An RLlib MultiAgentEnv is
driven with per-agent random actions and judged by
:class:`~flow1_ray.checks.multi_agent.MultiAgentRolloutChecker` (one RolloutChecker per agent,
plus the multi-agent contract).

:func:`drive` is the whole check: resolving what the user named, making the env, driving
and judging it. ``check_env`` runs it in this process, or (``isolate=True``, as ``flow1
check`` does) in a child process watched by :mod:`flow1_ray.isolate`, which adds per-call
timeouts and survives an env that crashes its process; a :class:`Watch` is how the drive
tells that watcher where it is.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import time
import uuid
from typing import Any, Callable

import gymnasium as gym

from . import codes as C
from .checks.env_spec import crash_finding
from .checks.findings import Finding
from .checks.import_resolve import gym_alias_findings
from .checks.thresholds import DEFAULT, Thresholds
from .checks.reward_logic import RewardLogicAudit
from .envdrive import NO_WATCH, Watch, internal_error, is_multi_agent, multi_agent_driver, single_agent_driver
from .errors import Flow1InputError
from .events import Event
from .report import Report

#: Modules whose checks ``check_env`` runs; each clean one gets a PASS row.
CHECKED_MODULES = (C.IMPORT_RESOLVE, C.ENV_SPEC, C.OBS_FLOW, C.ACTION_PIPE, C.REWARD_STATS, C.REWARD_LOGIC)
#: modules whose checks run only when asked for (a PASS row only then)
OPT_IN_MODULES = (C.REWARD_LOGIC,)
#: the one parameter of an RLlib env class or creator, called with ``{}`` when nothing else is required
RLLIB_CONFIG_ARGS = ("config", "env_config")

EnvLike = Any  # gym.Env | str | Callable[[], gym.Env]
_ENV_API = ("reset", "step", "observation_space", "action_space")


# --- resolving what the user named ------------------------------------------------------


def _import_attr(path: str) -> Any:
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise Flow1InputError(f"bad import path {path!r}: expected 'module:attr'")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise Flow1InputError(f"cannot import module {mod_name!r} (from {path!r}): {e}") from None
    except (Exception, SystemExit) as e:  # the module itself is broken (or exits when imported)
        raise Flow1InputError(f"importing module {mod_name!r} failed: {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            if attr in gym.registry or path in gym.registry:  # gymnasium's "module:EnvId" form
                return path if path in gym.registry else attr
            raise Flow1InputError(f"module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve_env(env: EnvLike) -> tuple[Callable[[], gym.Env] | gym.Env, str]:
    """What to check and its name. Returns an Env instance or a zero-argument factory.

    Errors the user made (unknown id, bad import path, missing attribute, a value that is
    no env) raise :class:`Flow1InputError`; errors of the env's own constructor do not
    happen here: they are the env's fault and are reported as ENV_CRASHED.
    """
    if isinstance(env, gym.Env):
        return env, _name(env)
    if isinstance(env, str):
        target: Any = env
        if ":" in env:
            target = _import_attr(env)
        if isinstance(target, str):
            try:
                gym.spec(target)
            except gym.error.Error as e:
                raise Flow1InputError(f"unknown env id {target!r}: {e}") from None
            return (lambda: gym.make(target, disable_env_checker=True)), target
        if isinstance(target, gym.Env):
            return target, env
        if callable(target):
            return _zero_arg(target, env), env
        raise Flow1InputError(f"{env!r} is a {type(target).__name__}, expected an Env class, instance or factory")
    if callable(env):
        name = getattr(env, "__qualname__", None) or repr(env)
        return _zero_arg(env, name), name
    raise Flow1InputError(f"expected a gymnasium.Env, an env id, 'module:attr' or a factory, actual {type(env).__name__}")


def _zero_arg(factory: Callable, name: str) -> Callable:
    """The factory itself, once sure it can be called with no arguments. A class or factory
    whose one required parameter is RLlib's ``config`` (``env_config``) gets an empty dict,
    as ``PPOConfig().environment(MyEnv)`` does with no ``env_config``."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: let the call decide
        return factory
    required = [p.name for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if len(required) == 1 and required[0] in RLLIB_CONFIG_ARGS and \
            sig.parameters[required[0]].kind != inspect.Parameter.KEYWORD_ONLY:
        return functools.partial(factory, {})  # RLlib's env creator convention: env_creator(env_config)
    if required:
        raise Flow1InputError(f"{name} needs argument(s) {', '.join(required)}; expected an env class or factory "
                              f"callable with no arguments")
    return factory


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(getattr(env, "unwrapped", env)).__name__


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``check_env``: a KeyboardInterrupt that carries the partial report
    (``summary["interrupted"]`` is True), so a caller can still write it."""

    def __init__(self, report: Report) -> None:
        super().__init__("check interrupted")
        self.report = report


def drive(env: EnvLike, steps: int, seed: int, th: Thresholds,
          watch: Watch = NO_WATCH, audit_reward: bool = False) -> tuple[str, list[Finding], dict]:
    """Resolve, make and drive the env; (name, findings, summary). The one implementation of
    a check, run in this process by ``check_env`` and in the child of an isolated check.

    Ctrl-C (a KeyboardInterrupt) ends the drive early but not the judging: the steps seen so
    far are judged as a whole, and ``summary["interrupted"]`` is set. ``watch.done`` gets the
    result before the env is closed (an isolated check's parent does not wait for close()).
    """
    watch.enter("import", 0, 0)
    target, name = resolve_env(env)
    watch.leave()
    watch.named(name, None)
    t_start = time.perf_counter()
    findings: list[Finding] = []
    summary: dict[str, Any] = {"env": name, "steps_budget": steps, "seed": seed}
    owned = not isinstance(target, gym.Env)
    instance: gym.Env | None = None
    try:
        try:
            instance = _make(target, owned, name, findings, watch)
            if instance is not None:
                watch.named(name, instance)
                _judge(instance, steps, seed, th, findings, summary, watch, audit_reward)
        except KeyboardInterrupt:
            summary["interrupted"] = True
            summary["stopped_early"] = summary.get("stopped_early") or "interrupted"
        summary["seconds"] = round(time.perf_counter() - t_start, 4)
        watch.done(findings, summary)
    finally:
        if owned and instance is not None:
            watch.enter("close", summary.get("steps", 0), summary.get("episodes", 0))
            try:
                instance.close()
            except Exception:
                pass
    return name, findings, summary


def _make(target: Any, owned: bool, name: str, findings: list[Finding], watch: Watch) -> gym.Env | None:
    """The env instance; None when its constructor raised (an ENV_CRASHED finding)."""
    instance = None
    watch.enter("make", 0, 0)
    try:
        instance = target() if owned else target
    except Flow1InputError:
        raise
    except gym.error.Error as e:
        raise Flow1InputError(f"cannot make env {name!r}: {e}") from None
    except (Exception, SystemExit) as e:
        findings.append(crash_finding("make", e, 0, 0))
    watch.leave()
    if instance is not None and not all(hasattr(instance, a) for a in _ENV_API):
        raise Flow1InputError(f"{name!r} gave a {type(instance).__name__}, expected a gymnasium.Env")
    findings.extend(gym_alias_findings(instance))
    return instance


def _judge(instance: gym.Env, steps: int, seed: int, th: Thresholds, findings: list[Finding], summary: dict,
           watch: Watch, audit_reward: bool = False) -> None:
    """Drive the instance for the budget and judge it; the results go into findings/summary."""
    make_driver = multi_agent_driver if is_multi_agent(instance) else single_agent_driver
    drv = make_driver(instance, steps, seed, th, findings, summary)
    if drv is None:
        return
    drv.watch = watch
    if audit_reward:
        drv.audit = RewardLogicAudit(getattr(instance.unwrapped, "action_space", instance.action_space), seed=seed)
    watch.started(findings, drv)
    try:
        drv.run()
    except KeyboardInterrupt:
        summary["interrupted"] = True
        drv.stopped_early = drv.stopped_early or f"interrupted after {drv.rc.steps} steps"
    try:
        findings.extend(drv.rc.finish(expect_episode_end=False))
    except Exception as e:  # a Ctrl-C that landed inside the checker can leave it half-way through a step
        if not summary.get("interrupted"):
            raise
        msg, ev = internal_error(e, drv.rc.steps)
        findings.append(Finding(C.FLOW1_INTERNAL, msg, ev))
    ending = drv.episode_finding()
    if ending is not None:
        findings.append(ending)
    summary.update({"steps": drv.rc.steps, "episodes": drv.rc.episodes, "crashes": drv.crashes,
                    "stopped_early": drv.stopped_early or None, "modules": drv.rc.summary()})
    _judge_audits(drv, findings, summary["modules"])
    if drv.masked_steps:   # the random actions honoured the env's action mask (RLlib's convention)
        summary["action_mask_steps"] = drv.masked_steps
    if drv.mask_probe:
        summary["action_mask_probe"] = drv.mask_probe
        env_stats = summary["modules"].setdefault(C.ENV_SPEC, {})
        env_stats.setdefault("notes", []).append(_mask_probe_note(**drv.mask_probe))


def _judge_audits(drv: Any, findings: list[Finding], modules: dict) -> None:
    """OBS_LEAKAGE and (asked for) REWARD_UNEARNED on the whole drive; what each read goes
    into its module's PASS row. A failure of flow1's own is FLOW1_INTERNAL, never the check's end."""
    for watch, module in ((drv.leak, C.OBS_FLOW), (drv.audit, C.REWARD_LOGIC)):
        if watch is None:
            if module == C.OBS_FLOW and modules.get(C.OBS_FLOW) is not None and is_multi_agent(drv.env):
                modules[C.OBS_FLOW].setdefault("notes", []).append("leakage: not run on a multi-agent env")
            continue
        try:
            found, said = watch.findings()
        except Exception as e:
            msg, ev = internal_error(e, drv.rc.steps)
            findings.append(Finding(C.FLOW1_INTERNAL, msg, ev))
            continue
        findings.extend(found)
        stats = modules.setdefault(module, {})
        stats.setdefault("notes", []).extend(f"{v}" for v in said.values())


def _mask_probe_note(tried: int, rejected: int) -> str:
    """What the env did with the masked-out actions sent to it after the run: rejecting them is
    the convention; accepting them is a design (the mask advises, the env does not enforce it),
    said so the user knows an unmasked policy will take them."""
    if rejected == tried:
        return f"step() rejected {rejected}/{tried} masked-out actions: the env enforces its action mask"
    return (f"step() accepted {tried - rejected}/{tried} masked-out actions: the env does not enforce its "
            f"action mask, only a masking policy keeps to it")


def build_report(name: str, findings: list[Finding], summary: dict, run_id: str) -> Report:
    """The report of a check: its findings as events, one PASS row per clean module (when
    the module's whole-rollout rules ran), ordered by module then severity."""
    events = [f.to_event(run_id=run_id) for f in findings]
    bad_modules = {e.module for e in events if e.status != C.PASS}
    module_stats = summary.get("modules", {})
    for m in CHECKED_MODULES:
        if m in OPT_IN_MODULES and m not in module_stats:
            continue
        if m not in bad_modules and (m == C.IMPORT_RESOLVE or module_stats):
            notes = module_stats.get(m, {}).get("notes")
            events.append(Event(code=C.CHECKS_PASSED, module=m, status=C.PASS,
                                message=f"{m} checks passed on {summary.get('steps', 0)} steps"
                                + (f" ({'; '.join(notes)})" if notes else ""),
                                evidence=module_stats.get(m, {}), run_id=run_id))
    order = {m: i for i, m in enumerate(CHECKED_MODULES)}
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

    ``audit_reward=True`` also reads the env's attributes around every step and judges
    whether the reward jumps with changes no action caused (REWARD_UNEARNED,
    :mod:`flow1_ray.checks.reward_logic`): it costs a snapshot of ``env.unwrapped`` a step.

    ``env`` is a ``gymnasium.Env``, a registered id, a ``"module:attr"`` path (a class, a
    factory or an instance) or a zero-argument callable. Returns a :class:`Report`;
    raises :class:`Flow1InputError` only for input the user got wrong, and
    :class:`CheckInterrupted` (a KeyboardInterrupt, with the partial report) on Ctrl-C.

    ``isolate=True`` runs the env in a child process (``flow1 check`` does): the import,
    the constructor and every call are watched there, so an env that hangs past a timeout
    (``make_timeout_s`` covers import and construction, ``reset_timeout_s``,
    ``step_timeout_s``; None: the defaults of :data:`flow1_ray.isolate.DEFAULT_TIMEOUTS`;
    0: no limit) is ENV_HUNG with its stack, and one that dies (a signal, an exit) is
    ENV_CRASHED, with every finding made before. The results are those of the in-process
    check: one implementation (:func:`drive`) runs in both. ``start_method``: "fork"
    (the default on POSIX when this process runs one thread) or "spawn" (else; the env
    must then be picklable: an id, "module:attr", a class or a top-level function).
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
