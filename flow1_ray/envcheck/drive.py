"""The drive of ``flow1 check``: an env stepped with random actions for a budget of steps,
each reset and step fed to the rollout checkers, every call the env makes reported to a
:class:`~flow1_ray.envcheck.watch.Watch` (the child-process supervisor of
:mod:`flow1_ray.envcheck.isolate`, or nothing).

This module holds :class:`DriverBase`, what both drivers share (resets, crashes, the episode
budget and its extension, the audits, the Watch), and :func:`internal_error`, the evidence of
a failure of flow1's own. The driver of a gymnasium env is in
:mod:`~flow1_ray.envcheck.drive_single`, that of an RLlib MultiAgentEnv (per-agent random
actions, one RolloutChecker per agent plus the multi-agent contract) in
:mod:`~flow1_ray.envcheck.drive_multi`; :func:`flow1_ray.envcheck.judge.drive` chooses one.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable

import gymnasium as gym

from ..common import codes as C
from ..checks.env.env_spec import crash_finding, long_episode_advisory, never_ends_finding
from ..checks.findings import Finding
from ..checks.env.import_resolve import old_api_finding
from ..checks.env.machine_load import StepClock
from ..checks.env.reward_logic import RewardLogicAudit
from ..checks.env.temporal_leak import LeakageWatch
from ..checks.env.termination import EpisodeEnds, time_limit_finding
from ..checks.thresholds import Thresholds
from ..checks.values import values_equal
from .reset_probes import ResetProbes
from .reset_state import FirstEpisode, snapshot
from .watch import NO_WATCH, Watch

MAX_CONSECUTIVE_CRASHES = 3
TRACEBACK_TAIL_CHARS = 1500


def internal_error(exc: BaseException, step: int) -> tuple[str, dict]:
    """(message, evidence) of a FLOW1_INTERNAL finding; built once per exception type."""
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))[-TRACEBACK_TAIL_CHARS:]
    return (f"flow1 failed to judge step {step}: {type(exc).__name__}: {exc}",
            {"exception": type(exc).__name__, "error": str(exc), "first_step": step, "traceback_tail": tail})


class DriverBase(ResetProbes):
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
        self._fresh = False                 # the episode has taken no step yet
        self.first_step_streak = 0          # crashes in a row at the first step of an episode after the first
        self.last_obs: Any = None           # the observation the next action answers (its action mask)
        self.masked_steps = 0               # actions drawn from the observation's action mask
        self.mask_probe: dict[str, int] = {}  # masked-out actions sent after the run: tried, rejected
        self.last_wait: float | None = None     # the last step's run-queue wait and steal (the machine's share)
        self.clock = StepClock()
        self.audit: RewardLogicAudit | None = None  # flow1 check --audit-reward
        self.leak: LeakageWatch | None = None       # OBS_LEAKAGE's steps (single-agent envs)
        self.replays = False                        # the first episode is recorded and replayed after the run
        self.first_episode: FirstEpisode | None = None
        self.ends: EpisodeEnds | None = None        # each episode's length and end (TIME_LIMIT_AS_TERMINATED)

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
        self.last_obs = out[0] if isinstance(out, tuple) and out else out
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            return out
        self.rc.record(old_api_finding("reset", "a bare observation" if not isinstance(out, tuple)
                                       else f"a {len(out)}-tuple"), "reset")
        return out, {}

    def _start_episode(self, seed: int | None = None) -> bool:
        for _ in range(MAX_CONSECUTIVE_CRASHES):
            got = self._reset(seed)
            if got is not None:
                self._began(*got)
                return True
            if self.stopped_early:  # the env called sys.exit: no retry
                return False
        self.stopped_early = f"reset() raised {MAX_CONSECUTIVE_CRASHES} times in a row"
        return False

    def _determinism(self) -> bool:
        """reset(seed) twice must give one observation; the first episode starts from the
        second, recorded for the probes after the run (:meth:`_probe_resets`)."""
        first = self._reset(self.seed)
        if first is None:
            return not self.stopped_early and self._start_episode()
        second = self._reset(self.seed)
        if second is None:
            return not self.stopped_early and self._start_episode()
        if values_equal(first[0], second[0]):
            self.first_episode = FirstEpisode(second[0], snapshot(self.env)) if self.replays else None
            self._began(*second)
            return True
        self._nondeterministic(first[0], second[0])
        second = self._reset(self.seed)   # the probe reset the layers: this episode starts afresh
        if second is None:
            return not self.stopped_early and self._start_episode()
        self._began(*second)
        return True

    def _began(self, obs: Any, info: Any) -> None:
        """An episode began with this reset: the checker and the audits see it."""
        self._fresh = True
        self.rc.on_reset(obs, info)
        if self.ends is not None:
            self.ends.on_reset()
        if self.leak is not None:
            self._guarded("leak", lambda: self.leak.on_reset(obs))
        self._audit_call(lambda: self.audit.on_reset(self.env))

    def _audited(self, action: Any, obs: Any, reward: Any, ended: bool) -> None:
        """One step to the audits (bounded, never raising into the drive)."""
        if self.leak is not None:
            self._guarded("leak", lambda: self.leak.on_step(action, obs, reward))
        self._audit_call(lambda: self.audit.after_step(self.env, action, reward, ended))

    def _audit_call(self, call: Callable[[], Any]) -> None:
        """A call of the reward audit (if on), under the watch's audit calls: the check's step
        timeout bounds its reads, copies and copies' steps, and a hang or a death there is
        named as the audit's, not the env's (:mod:`flow1_ray.envcheck.supervise`)."""
        if self.audit is None:
            return
        self.audit.phase = self._audit_phase
        try:
            self._guarded("audit", call)
        finally:
            self.watch.leave()

    def _audit_phase(self, what: str) -> None:
        self.watch.enter(f"audit_{what}", self.rc.steps, self.rc.episodes)

    def _guarded(self, which: str, call: Callable[[], Any]) -> None:
        """An audit's call; a failure of flow1's own is FLOW1_INTERNAL and that audit stops,
        the drive and the other checks go on."""
        try:
            call()
        except Exception as e:
            setattr(self, which, None)
            rc = self.rc
            rc.log.hit(C.FLOW1_INTERNAL, f"{which}:{type(e).__name__}", lambda err=e: internal_error(err, rc.steps),
                       rc.steps)

    def _step_crashed(self, exc: Exception, masked: bool = False) -> bool:
        """step() raised: an ENV_CRASHED finding, then a new episode; False to stop the run.
        ``masked``: the action was one the observation's action mask declared valid."""
        self.crashes += 1
        self._consecutive += 1
        self.first_step_streak = self.first_step_streak + 1 if self._fresh and self.rc.episodes >= 1 else 0
        found = crash_finding("step", exc, self.rc.steps + 1, self.rc.episodes)
        if masked:
            found.message += ("; the action was one the observation's action mask declared valid: the mask and the env "
                              "disagree")
            found.evidence["action_valid_by_mask"] = True
        self.rc.record(found, f"step:{type(exc).__name__}")
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
            rc.log.hit(C.FLOW1_INTERNAL, type(e).__name__, lambda err=e: internal_error(err, rc.steps), rc.steps)
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
        self._audit_call(lambda: self.audit.before_step(self.env))
        w.enter("step", self.rc.steps, self.rc.episodes)
        before = self.masked_steps
        action = self._action()
        self.clock.start()
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
            return self._step_crashed(e, masked=self.masked_steps > before)
        dt, self.last_wait = self.clock.stop()
        w.leave()
        self._consecutive = self.first_step_streak = 0
        self._fresh = False
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
            stopped = not all(self._step() for _ in range(self.budget))
            if not stopped and self.first_end is None:
                self._extend()
            if self.masked_steps and not stopped and not self.stopped_early:
                self._probe_mask()
            # a run stopped by crashes at the first step of each later episode: what reset() left
            # behind is the likely cause, and the replay of the first episode tells
            if self.first_episode is not None and ((not stopped and not self.stopped_early)
                                                   or self.first_step_streak >= MAX_CONSECUTIVE_CRASHES):
                self._probe_resets()
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

    def _probe_mask(self) -> None:
        """After the judged run: does the env really reject what its mask excludes? A few fresh
        episodes each send one masked-out action; raising is the rejection (RLlib's examples
        raise ValueError). Nothing of it is judged: the episodes are the probe's, not the run's."""

    def time_limit_finding(self) -> Finding | None:
        """TIME_LIMIT_AS_TERMINATED over the episodes the run drove (single-agent envs)."""
        return time_limit_finding(self.ends) if self.ends is not None and not self.stopped_early else None

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
