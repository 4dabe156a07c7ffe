"""One check of an env in this process: resolve what the user named, make the env, drive it
with random actions for a budget of steps and judge every step (:func:`drive`).

``check_env`` (:mod:`flow1_ray.envcheck.api`) runs it in place, or in a child process
watched by :mod:`flow1_ray.envcheck.isolate`, which runs this same function and adds per-call
timeouts; a :class:`~flow1_ray.envcheck.watch.Watch` is how the drive tells that watcher
where it is.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import time
from typing import TYPE_CHECKING, Any, Callable

import gymnasium as gym

from ..checks.env.env_spec import crash_finding
from ..checks.env.import_resolve import gym_alias_findings
from ..checks.env.reward_logic import RewardLogicAudit
from ..checks.env.reward_random_level import random_level_findings
from ..checks.findings import Finding
from ..checks.thresholds import Thresholds
from ..common import codes as C
from ..common.errors import Flow1InputError
from .drive import internal_error
from .drive_multi import is_multi_agent, multi_agent_driver
from .drive_single import single_agent_driver
from .watch import NO_WATCH, Watch

if TYPE_CHECKING:
    from ..report.model import Report

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
        drv.audit = RewardLogicAudit(getattr(instance.unwrapped, "action_space", instance.action_space))
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
    for ending in (drv.episode_finding(), drv.time_limit_finding()):
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
    if drv.leak is not None and not drv.leak.not_run:   # the same steps: a reward level paid at random
        try:
            found, note = random_level_findings(drv.leak.rows, drv.th)
        except Exception as e:
            msg, ev = internal_error(e, drv.rc.steps)
            findings.append(Finding(C.FLOW1_INTERNAL, msg, ev))
            return
        findings.extend(found)
        if note:
            modules.setdefault(C.REWARD_STATS, {}).setdefault("notes", []).append(note)


def _mask_probe_note(tried: int, rejected: int) -> str:
    """What the env did with the masked-out actions sent to it after the run: rejecting them is
    the convention; accepting them is a design (the mask advises, the env does not enforce it),
    said so the user knows an unmasked policy will take them."""
    if rejected == tried:
        return f"step() rejected {rejected}/{tried} masked-out actions: the env enforces its action mask"
    return (f"step() accepted {tried - rejected}/{tried} masked-out actions: the env does not enforce its "
            f"action mask, only a masking policy keeps to it")
