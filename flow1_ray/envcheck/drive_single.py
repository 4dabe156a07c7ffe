"""The single-agent drive of ``flow1 check``: :func:`single_agent_driver` builds the driver of
a gymnasium env (random actions from its action space, from the valid ones where the observation
carries an action mask), with the action probe that records what reaches the innermost env's
``step`` through the wrappers, and the masked-out actions sent after the run. The shared drive is
:class:`~flow1_ray.envcheck.drive.DriverBase`; :mod:`flow1_ray.envcheck.judge` uses this module.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..checks.env.action_mask import mask_of, valid_actions
from ..checks.findings import Finding
from ..checks.env.import_resolve import old_api_finding
from ..checks.env.rollout import RolloutChecker
from ..checks.env.space_contract import validate_space
from ..checks.env.temporal_leak import LeakageWatch
from ..checks.env.termination import EpisodeEnds
from ..checks.thresholds import Thresholds
from .drive import DriverBase

#: fresh episodes that each send one masked-out action after the run (does the env reject it?)
MASK_PROBES = 3


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


class _Driver(DriverBase):
    """One single-agent check run: random actions from the action space, the action probe."""

    def __init__(self, env: gym.Env, steps: int, seed: int, th: Thresholds) -> None:
        super().__init__(env, steps, seed, th, RolloutChecker(env.observation_space, env.action_space, th))
        self.probe: _ActionProbe | None = None
        self.rc.action_map.wrappers = action_wrappers(env)
        self.replays = True
        self.ends = EpisodeEnds()

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
        """A random action; from the valid ones where the observation carries RLlib's action
        mask (the env rejects the others by design)."""
        space, mask = self.env.action_space, mask_of(self.last_obs, self.rc.mask_key)
        if mask is not None:   # a mask that cannot mask is the checker's ACTION_MASK_INVALID
            valid, _ = valid_actions(mask, space)
            if valid is not None:
                self.masked_steps += 1
                return space.sample(mask=valid)
        return space.sample()

    def _probe_mask(self) -> None:
        space = self.env.action_space
        rng = np.random.default_rng(self.seed)
        tried = rejected = 0
        for i in range(MASK_PROBES):
            self.watch.enter("reset", self.rc.steps, self.rc.episodes)
            try:
                out = self.env.reset(seed=self.seed + 1 + i)
            except (Exception, SystemExit):
                return
            finally:
                self.watch.leave()
            obs = out[0] if isinstance(out, tuple) and out else out
            mask = mask_of(obs, self.rc.mask_key)
            valid, _ = valid_actions(mask, space) if mask is not None else (None, None)
            masked_out = np.flatnonzero(valid == 0) if valid is not None else ()
            if not len(masked_out):
                continue
            action = space.start + int(rng.choice(masked_out))
            tried += 1
            self.watch.enter("step", self.rc.steps, self.rc.episodes)
            try:
                self.env.step(action)
            except (Exception, SystemExit):
                rejected += 1
            finally:
                self.watch.leave()
        if tried:
            self.mask_probe = {"tried": tried, "rejected": rejected}

    def _judge_step(self, action: Any, out: Any, dt: float) -> bool:
        rc, probe = self.rc, self.probe
        if isinstance(out, tuple) and out:
            self.last_obs = out[0]
        if type(out) is tuple and len(out) == 5:
            obs, reward, terminated, truncated, info = out
        elif isinstance(out, tuple) and len(out) == 4:
            rc.record(old_api_finding("step", "a 4-tuple (obs, reward, done, info)"), "step")
            obs, reward, terminated, info = out
            truncated = False
        else:
            return self._unreadable_step(out)
        received = probe.received if probe is not None and probe.active else None
        if self.first_episode is not None and self.first_episode.open:
            self.first_episode.add(action, obs, reward, terminated, truncated)
        self.ends.on_step(obs, reward, _truthy_flag(terminated), _truthy_flag(truncated))
        self._audited(action, obs, reward, _truthy_flag(terminated) or _truthy_flag(truncated))
        return self._ended(self._judged(
            lambda: rc.on_step(action, obs, reward, terminated, truncated, info, dt, received, self.last_wait),
            lambda: terminated is True or truncated is True))


def action_wrappers(env: Any) -> list[str]:
    """The wrappers an action passes through, outermost first: the ones that act on actions
    (gymnasium's ActionWrapper, or any that defines ``action``), else every wrapper."""
    chain, w = [], env
    for _ in range(64):
        inner = getattr(w, "env", None)
        if inner is None or inner is w:
            break
        chain.append(w)
        w = inner
    acting = [x for x in chain if isinstance(x, gym.ActionWrapper) or callable(getattr(type(x), "action", None))]
    return [type(x).__name__ for x in (acting or chain)]


def _truthy_flag(flag: Any) -> bool:
    try:
        return bool(np.any(flag))
    except (TypeError, ValueError):
        return False


def single_agent_driver(env: gym.Env, steps: int, seed: int, th: Thresholds, findings: list[Finding],
                         summary: dict) -> _Driver | None:
    """The driver for a gymnasium env, once its spaces are valid enough to sample actions."""
    space_findings = validate_space(env.observation_space, "obs") + validate_space(env.action_space, "action")
    findings.extend(space_findings)
    if any(f.evidence.get("role") == "action" for f in space_findings):
        summary["stopped_early"] = "the action space is not a gymnasium space: cannot sample actions"
        return None
    drv = _Driver(env, steps, seed, th)
    drv.leak = LeakageWatch(env.observation_space, env.action_space)
    return drv
