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
import sys
import time
import traceback
import uuid
from typing import Any, Callable

import gymnasium as gym

from . import codes as C
from .checks.env_spec import crash_finding, long_episode_advisory, never_ends_finding
from .checks.findings import Finding
from .checks.import_resolve import gym_alias_findings, old_api_finding
from .checks.multi_agent import MultiAgentRolloutChecker, agent_spaces, validate_agent_spaces
from .checks.rollout import RolloutChecker
from .checks.space_contract import validate_space
from .checks.thresholds import DEFAULT, Thresholds
from .checks.values import values_equal
from .errors import Flow1InputError
from .events import Event
from .report import Report

#: Modules whose checks ``check_env`` runs; each clean one gets a PASS row.
CHECKED_MODULES = (C.IMPORT_RESOLVE, C.ENV_SPEC, C.OBS_FLOW, C.ACTION_PIPE, C.REWARD_STATS)
MAX_CONSECUTIVE_CRASHES = 3
TRACEBACK_TAIL_CHARS = 1500
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


# --- the action probe -------------------------------------------------------------------


class _ActionProbe:
    """Records the action that reaches the innermost env's ``step``.

    Wrappers between the caller and the base env may cast or rescale actions; the probe
    shadows ``unwrapped.step`` on the instance for the duration of the check and restores
    it afterwards. With no wrapper there is nothing in between, so no probe.
    """

    def __init__(self, env: gym.Env) -> None:
        self.received: Any = None
        self._base = getattr(env, "unwrapped", env)
        self._installed = False
        if self._base is env:
            return
        original = self._base.step

        def step(action: Any) -> Any:
            self.received = action
            return original(action)

        try:
            self._base.step = step
            self._installed = True
        except (AttributeError, TypeError):
            pass

    @property
    def active(self) -> bool:
        return self._installed

    def restore(self) -> None:
        if self._installed:
            try:
                del self._base.step
            except AttributeError:
                pass
            self._installed = False


# --- the drive --------------------------------------------------------------------------


class Watch:
    """What the drive tells whoever watches it; this base, the in-process check, does nothing.

    An isolated check (:mod:`flow1_ray.isolate`) runs the drive in a child process whose
    watch writes the env call in progress to memory its parent reads (so a timeout or a
    death names the call and the step) and sends the findings to the parent as they are
    made (so a crash or a hang loses none of them). The hooks cost a few attribute writes
    per step.
    """

    #: set (by a signal handler) when the run must stop at the next step boundary
    stop_requested = False

    def enter(self, call: str, steps: int, episodes: int) -> None:
        """Before ``call`` ("import", "make", "reset", "step", "close"), after ``steps``
        judged steps and ``episodes`` ended episodes. Every finding made so far must reach
        the watcher before the env runs again; a stop asked for is taken here, between two
        env calls, where the checker is never half-way through a step."""

    def leave(self) -> None:
        """The env call returned (or raised): flow1's own checks run until the next one."""

    def named(self, name: str, env: Any) -> None:
        """The target resolved to ``name``; ``env`` is the instance once made (else None)."""

    def started(self, findings: list[Finding], driver: Any) -> None:
        """The drive begins: ``findings`` so far (spaces, gym alias), the driver and its checker."""

    def done(self, findings: list[Finding], summary: dict) -> None:
        """Everything is judged; the env is closed after this."""


NO_WATCH = Watch()


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``check_env``: a KeyboardInterrupt that carries the partial report
    (``summary["interrupted"]`` is True), so a caller can still write it."""

    def __init__(self, report: Report) -> None:
        super().__init__("check interrupted")
        self.report = report


def _internal(exc: BaseException, step: int) -> tuple[str, dict]:
    """(message, evidence) of a FLOW1_INTERNAL finding; built once per exception type."""
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))[-TRACEBACK_TAIL_CHARS:]
    return (f"flow1 failed to judge step {step}: {type(exc).__name__}: {exc}",
            {"exception": type(exc).__name__, "error": str(exc), "first_step": step, "traceback_tail": tail})


class _DriverBase:
    """What every check run shares: the env, the budget, the checker, resets and crashes.

    ``rc`` is a :class:`RolloutChecker` or a :class:`MultiAgentRolloutChecker`; both take
    ``on_reset(obs, info)``, ``record`` and count ``steps`` and ``episodes``.
    """

    def __init__(self, env: gym.Env, steps: int, seed: int, th: Thresholds, rc: Any) -> None:
        self.env, self.budget, self.seed, self.th, self.rc = env, steps, seed, th, rc
        self.watch: Watch = NO_WATCH
        self.crashes = 0
        self.stopped_early = ""
        self.first_end: int | None = None  # the step at which the first episode ended
        self.extension_stop = ""           # "steps" or "time": which cap ended the extension
        self._consecutive = 0               # step() crashes in a row

    def _reset(self, seed: int | None) -> tuple[Any, Any] | None:
        """Reset, tolerating the old API; None when reset raised (or called sys.exit)."""
        self.watch.enter("reset", self.rc.steps, self.rc.episodes)
        try:
            out = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        except (Exception, SystemExit) as e:
            self.watch.leave()
            self.crashes += 1
            self.rc.record(crash_finding("reset", e, self.rc.steps, self.rc.episodes), f"reset:{type(e).__name__}")
            if isinstance(e, SystemExit):
                self.stopped_early = f"reset() called sys.exit({e.code!r})"
            return None
        self.watch.leave()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            return out
        self.rc.record(old_api_finding("reset", "a bare observation" if not isinstance(out, tuple)
                                       else f"a {len(out)}-tuple"), "reset")
        return out, {}

    def _start_episode(self, seed: int | None = None) -> bool:
        for _ in range(MAX_CONSECUTIVE_CRASHES):
            got = self._reset(seed)
            if got is not None:
                self.rc.on_reset(*got)
                return True
            if self.stopped_early:  # the env called sys.exit: no retry
                return False
        self.stopped_early = f"reset() raised {MAX_CONSECUTIVE_CRASHES} times in a row"
        return False

    def _determinism(self) -> bool:
        first = self._reset(self.seed)
        if first is None:
            return not self.stopped_early and self._start_episode()
        second = self._reset(self.seed)
        if second is None:
            return not self.stopped_early and self._start_episode()
        if not values_equal(first[0], second[0]):
            self.rc.record(Finding(C.NONDETERMINISTIC_RESET,
                                   f"reset(seed={self.seed}) twice gave different observations: expected equal; "
                                   f"seed the env's RNG from reset's seed (super().reset(seed=seed), self.np_random)",
                                   {"seed": self.seed, "first": repr(first[0])[:200], "second": repr(second[0])[:200]}))
        self.rc.on_reset(*second)
        return True

    def _step_crashed(self, exc: Exception) -> bool:
        """step() raised: an ENV_CRASHED finding, then a new episode; False to stop the run."""
        self.crashes += 1
        self._consecutive += 1
        self.rc.record(crash_finding("step", exc, self.rc.steps + 1, self.rc.episodes), f"step:{type(exc).__name__}")
        if self._consecutive >= MAX_CONSECUTIVE_CRASHES:
            self.stopped_early = f"step() raised {self._consecutive} times in a row"
            return False
        return self._start_episode()

    def _unreadable_step(self, out: Any) -> bool:
        """step() answered with no tuple the checker can read: say so, start over; False to stop."""
        got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
        self.rc.record(old_api_finding("step", got), "step")
        return self._start_episode()

    def _judged(self, on_step: Callable[[], bool], fallback: Callable[[], bool]) -> bool:
        """Feed one step to the checker; flow1's own fault is FLOW1_INTERNAL, and the check goes on."""
        try:
            return on_step()
        except Exception as e:
            rc = self.rc
            rc.log.hit(C.FLOW1_INTERNAL, type(e).__name__, lambda err=e: _internal(err, rc.steps), rc.steps)
            return fallback()

    def _ended(self, ended: bool) -> bool:
        """After a judged step: a new episode if it ended; False when the run must stop."""
        if not ended:
            return True
        if self.first_end is None:
            self.first_end = self.rc.steps
        return self._start_episode()

    # -- the drive: the budget, then (if no episode ended) a bounded extension -------------
    def _prepare(self) -> bool:
        """Before the first reset (seeding the action spaces); False to stop."""
        return True

    def _step(self) -> bool:
        """One random-action step, timed and fed to the checker; False when the run must stop.
        The watch's "step" call covers the action's sampling too (a custom space's code)."""
        w = self.watch
        w.enter("step", self.rc.steps, self.rc.episodes)
        action = self._action()
        t0 = time.perf_counter()
        try:
            out = self.env.step(action)
        except SystemExit as e:  # the env wanted the process gone: a crash, and the end of the run
            w.leave()
            self.crashes += 1
            self.rc.record(crash_finding("step", e, self.rc.steps + 1, self.rc.episodes), "step:SystemExit")
            self.stopped_early = f"step() called sys.exit({e.code!r})"
            return False
        except Exception as e:
            w.leave()
            return self._step_crashed(e)
        dt = time.perf_counter() - t0
        w.leave()
        self._consecutive = 0
        return self._judge_step(action, out, dt)

    def _action(self) -> Any:
        """The random action (or per-agent dict of actions) of the next step."""
        raise NotImplementedError

    def _judge_step(self, action: Any, out: Any, dt: float) -> bool:
        """What step() returned, to the checker; False when the run must stop."""
        raise NotImplementedError

    def _cleanup(self) -> None:
        pass

    def run(self) -> None:
        """Drive the budget; if no episode ended in it, step on until one does (bounded)."""
        try:
            if not self._prepare() or not self._determinism():
                return
            self._consecutive = 0
            for _ in range(self.budget):
                if not self._step():
                    return
            if self.first_end is None:
                self._extend()
        finally:
            self._cleanup()

    def _extend(self) -> None:
        """EPISODE_NEVER_ENDS is about the env, not the budget: step on, every step judged
        as before, until one episode ends, up to ``episode_extension_factor`` x the budget
        (at most ``episode_extension_max_steps``) and ``episode_extension_max_s`` seconds."""
        th = self.th
        limit = min(th.episode_extension_factor * self.budget, th.episode_extension_max_steps)
        deadline = time.perf_counter() + th.episode_extension_max_s
        self.extension_stop = "steps"
        for i in range(self.budget, limit):
            if i % 64 == 0 and time.perf_counter() > deadline:
                self.extension_stop = "time"
                return
            if not self._step():
                return
            if self.first_end is not None:
                return

    def episode_finding(self) -> Finding | None:
        """EPISODE_NEVER_ENDS: a WARN when none ended even within the extension, an
        advisory when the first one ended after the budget, nothing otherwise."""
        if self.stopped_early or self.rc.steps == 0:
            return None
        if self.first_end is None:
            max_steps, has_limit = self._time_limit()
            return never_ends_finding(self.rc.steps, self.budget, self.extension_stop, max_steps, has_limit)
        if self.first_end > self.budget:
            return long_episode_advisory(self.budget, self.first_end, self.rc.steps)
        return None

    def _time_limit(self) -> tuple[int | None, bool]:
        """(spec.max_episode_steps, whether a TimeLimit wrapper is on the env)."""
        spec_steps = getattr(getattr(self.env, "spec", None), "max_episode_steps", None)
        w: Any = self.env
        for _ in range(64):  # down the wrapper chain, bounded
            if isinstance(w, gym.wrappers.TimeLimit):
                return spec_steps or getattr(w, "_max_episode_steps", None), True
            w = getattr(w, "env", None)
            if w is None:
                break
        return spec_steps, False


class _Driver(_DriverBase):
    """One single-agent check run: random actions from the action space, the action probe."""

    def __init__(self, env: gym.Env, steps: int, seed: int, th: Thresholds) -> None:
        super().__init__(env, steps, seed, th, RolloutChecker(env.observation_space, env.action_space, th))
        self.probe: _ActionProbe | None = None

    def _prepare(self) -> bool:
        """Random actions come from ``action_space.sample()``, for any space that has one."""
        try:
            self.env.action_space.seed(self.seed)
            self.env.action_space.sample()
            self.env.action_space.seed(self.seed)  # the trial draw does not shift the actions
        except Exception as e:
            self.stopped_early = (f"action_space.sample() raised {type(e).__name__}: {e}: no random actions "
                                  f"to drive the env with")
            return False
        self.probe = _ActionProbe(self.env)
        return True

    def _cleanup(self) -> None:
        if self.probe is not None:
            self.probe.restore()

    def _action(self) -> Any:
        return self.env.action_space.sample()

    def _judge_step(self, action: Any, out: Any, dt: float) -> bool:
        rc, probe = self.rc, self.probe
        if type(out) is tuple and len(out) == 5:
            obs, reward, terminated, truncated, info = out
        elif isinstance(out, tuple) and len(out) == 4:
            rc.record(old_api_finding("step", "a 4-tuple (obs, reward, done, info)"), "step")
            obs, reward, terminated, info = out
            truncated = False
        else:
            return self._unreadable_step(out)
        received = probe.received if probe is not None and probe.active else None
        return self._ended(self._judged(
            lambda: rc.on_step(action, obs, reward, terminated, truncated, info, dt, received),
            lambda: terminated is True or truncated is True))


def _is_multi_agent(env: Any) -> bool:
    """Whether ``env`` is an RLlib MultiAgentEnv, without importing RLlib (seconds).

    A MultiAgentEnv subclass has imported ``ray.rllib.env.multi_agent_env`` already: when
    that module is not loaded, no env can be one.
    """
    mod = sys.modules.get("ray.rllib.env.multi_agent_env")
    cls = getattr(mod, "MultiAgentEnv", None)
    return isinstance(cls, type) and isinstance(getattr(env, "unwrapped", env), cls)


def _all_done(terminateds: Any, truncateds: Any) -> bool:
    """``__all__`` as RLlib reads it, for when the checker itself failed on a step."""
    try:
        return any(isinstance(d, dict) and bool(d.get("__all__", False)) for d in (terminateds, truncateds))
    except (TypeError, ValueError):  # an array flag: no truth value
        return False


class _MultiAgentDriver(_DriverBase):
    """One multi-agent check run: each step sends a random action, from that agent's own
    action space, for every agent that got an observation and is not done (as RLlib's
    MultiAgentEnvRunner does with ``random_actions``)."""

    def __init__(self, env: gym.Env, steps: int, seed: int, th: Thresholds, agents: list,
                 obs_spaces: dict, act_spaces: dict) -> None:
        super().__init__(env, steps, seed, th, MultiAgentRolloutChecker(obs_spaces, act_spaces, agents, th))
        self.act_spaces = act_spaces

    def _prepare(self) -> bool:
        for i, space in enumerate({id(sp): sp for sp in self.act_spaces.values()}.values()):
            space.seed(self.seed + i)
        return True

    def _action(self) -> Any:
        return {aid: self.act_spaces[aid].sample() for aid in self.rc.agents_to_act()}

    def _judge_step(self, actions: Any, out: Any, dt: float) -> bool:
        rc = self.rc
        if not (type(out) is tuple and len(out) == 5):
            return self._unreadable_step(out)
        return self._ended(self._judged(lambda: rc.on_step(actions, *out, duration_s=dt),
                                        lambda: _all_done(out[2], out[3])))


def _single_agent_driver(env: gym.Env, steps: int, seed: int, th: Thresholds, findings: list[Finding],
                         summary: dict) -> _Driver | None:
    """The driver for a gymnasium env, once its spaces are valid enough to sample actions."""
    space_findings = validate_space(env.observation_space, "obs") + validate_space(env.action_space, "action")
    findings.extend(space_findings)
    if any(f.evidence.get("role") == "action" for f in space_findings):
        summary["stopped_early"] = "the action space is not a gymnasium space: cannot sample actions"
        return None
    return _Driver(env, steps, seed, th)


def _multi_agent_driver(env: gym.Env, steps: int, seed: int, th: Thresholds, findings: list[Finding],
                        summary: dict) -> _MultiAgentDriver | None:
    """The driver for an RLlib MultiAgentEnv, with each agent's spaces as RLlib finds them."""
    agents, obs_spaces, act_spaces = agent_spaces(env)
    space_findings = validate_agent_spaces(agents, obs_spaces, act_spaces)
    findings.extend(space_findings)
    summary.update({"multi_agent": True, "possible_agents": agents})
    if not agents or any(f.evidence.get("role") == "action" for f in space_findings):
        summary["stopped_early"] = ("no agents declared" if not agents else
                                    "an agent's action space is unsupported: cannot sample actions")
        return None
    return _MultiAgentDriver(env, steps, seed, th, agents, obs_spaces, act_spaces)


def drive(env: EnvLike, steps: int, seed: int, th: Thresholds,
          watch: Watch = NO_WATCH) -> tuple[str, list[Finding], dict]:
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
                _judge(instance, steps, seed, th, findings, summary, watch)
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
           watch: Watch) -> None:
    """Drive the instance for the budget and judge it; the results go into findings/summary."""
    make_driver = _multi_agent_driver if _is_multi_agent(instance) else _single_agent_driver
    drv = make_driver(instance, steps, seed, th, findings, summary)
    if drv is None:
        return
    drv.watch = watch
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
        msg, ev = _internal(e, drv.rc.steps)
        findings.append(Finding(C.FLOW1_INTERNAL, msg, ev))
    ending = drv.episode_finding()
    if ending is not None:
        findings.append(ending)
    summary.update({"steps": drv.rc.steps, "episodes": drv.rc.episodes, "crashes": drv.crashes,
                    "stopped_early": drv.stopped_early or None, "modules": drv.rc.summary()})


def build_report(name: str, findings: list[Finding], summary: dict, run_id: str) -> Report:
    """The report of a check: its findings as events, one PASS row per clean module (when
    the module's whole-rollout rules ran), ordered by module then severity."""
    events = [f.to_event(run_id=run_id) for f in findings]
    bad_modules = {e.module for e in events if e.status != C.PASS}
    module_stats = summary.get("modules", {})
    for m in CHECKED_MODULES:
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
              step_timeout_s: float | None = None, start_method: str | None = None) -> Report:
    """Check an env's contracts on every step of ``steps`` random-action steps.

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

        name, findings, summary = run_isolated(env, steps, seed, th, timeouts, start_method)
    else:
        given = [f"{k}_timeout_s" for k, v in timeouts.items() if v is not None] + (
            ["start_method"] if start_method else [])
        if given:
            raise Flow1InputError(f"{', '.join(given)} need isolate=True: an env call cannot be timed out "
                                  f"in this process")
        name, findings, summary = drive(env, steps, seed, th)
    report = build_report(name, findings, summary, run_id)
    if summary.get("interrupted"):
        raise CheckInterrupted(report)
    return report
