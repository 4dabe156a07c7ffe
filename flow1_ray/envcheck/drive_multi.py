"""The multi-agent drive of ``flow1 check``: :func:`is_multi_agent` tells an RLlib
MultiAgentEnv without importing RLlib, :func:`multi_agent_driver` builds its driver (per-agent
random actions, one RolloutChecker per agent plus the multi-agent contract). The shared drive is
:class:`~flow1_ray.envcheck.drive.DriverBase`; :mod:`flow1_ray.envcheck.judge` uses this module.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym

from ..checks.env.action_mask import MASK_KEY, mask_key, mask_of, valid_actions
from ..checks.findings import Finding
from ..checks.env.multi_agent import MultiAgentRolloutChecker, agent_spaces, validate_agent_spaces
from ..checks.thresholds import Thresholds
from .drive import DriverBase


def is_multi_agent(env: Any) -> bool:
    """Whether ``env`` is an RLlib MultiAgentEnv, without importing RLlib (seconds).

    A MultiAgentEnv subclass has imported ``ray.rllib.env.multi_agent_env`` already: when
    that module is not loaded, no env can be one.
    """
    mod = sys.modules.get("ray.rllib.env.multi_agent_env")
    cls = getattr(mod, "MultiAgentEnv", None)
    return isinstance(cls, type) and isinstance(getattr(env, "unwrapped", env), cls)


def _reward_sum(rewards: Any) -> float:
    """A multi-agent step's rewards summed (what the audit watches jump); NaN when unreadable."""
    try:
        return float(sum(float(r) for r in rewards.values()))
    except (AttributeError, TypeError, ValueError):
        return float("nan")


def _all_done(terminateds: Any, truncateds: Any) -> bool:
    """``__all__`` as RLlib reads it, for when the checker itself failed on a step."""
    try:
        return any(isinstance(d, dict) and bool(d.get("__all__", False)) for d in (terminateds, truncateds))
    except (TypeError, ValueError):  # an array flag: no truth value
        return False


class _MultiAgentDriver(DriverBase):
    """One multi-agent check run: each step sends a random action, from that agent's own
    action space, for every agent that got an observation and is not done (as RLlib's
    MultiAgentEnvRunner does with ``random_actions``)."""

    def __init__(self, env: gym.Env, steps: int, seed: int, th: Thresholds, agents: list,
                 obs_spaces: dict, act_spaces: dict) -> None:
        super().__init__(env, steps, seed, th, MultiAgentRolloutChecker(obs_spaces, act_spaces, agents, th))
        self.act_spaces = act_spaces
        self.mask_keys = {aid: mask_key(obs_spaces.get(aid), sp) for aid, sp in act_spaces.items()}

    def _prepare(self) -> bool:
        # each agent's space seeded by its id's rank, not by the env's order of agents: RLlib's
        # PettingZoo wrappers list them from a set, an order that changes with the hash seed
        ranked = sorted(self.act_spaces.items(), key=lambda kv: (type(kv[0]).__name__, str(kv[0])))
        for i, space in enumerate({id(sp): sp for _, sp in ranked}.values()):
            space.seed(self.seed + i)
        return True

    def _action(self) -> Any:
        """Each acting agent's random action, from its valid ones where its observation carries
        an action mask."""
        obs = self.last_obs if isinstance(self.last_obs, dict) else {}
        out = {}
        for aid in self.rc.agents_to_act():
            space, mask = self.act_spaces[aid], mask_of(obs.get(aid), self.mask_keys.get(aid, MASK_KEY))
            valid = valid_actions(mask, space)[0] if mask is not None else None
            if valid is not None:
                self.masked_steps += 1
            out[aid] = space.sample(mask=valid) if valid is not None else space.sample()
        return out

    def _judge_step(self, actions: Any, out: Any, dt: float) -> bool:
        rc = self.rc
        if not (type(out) is tuple and len(out) == 5):
            return self._unreadable_step(out)
        self.last_obs = out[0]
        self._audit_call(lambda: self.audit.after_step(self.env, actions, _reward_sum(out[1]),
                                                       _all_done(out[2], out[3])))
        return self._ended(self._judged(lambda: rc.on_step(actions, *out, duration_s=dt, wait_s=self.last_wait),
                                        lambda: _all_done(out[2], out[3])))


def multi_agent_driver(env: gym.Env, steps: int, seed: int, th: Thresholds, findings: list[Finding],
                        summary: dict) -> _MultiAgentDriver | None:
    """The driver for an RLlib MultiAgentEnv, with each agent's spaces as RLlib finds them."""
    agents, obs_spaces, act_spaces = agent_spaces(getattr(env, "unwrapped", env))   # as RLlib reads them
    space_findings = validate_agent_spaces(agents, obs_spaces, act_spaces)
    findings.extend(space_findings)
    summary.update({"multi_agent": True, "possible_agents": agents})
    if not agents or any(f.evidence.get("role") == "action" for f in space_findings):
        summary["stopped_early"] = ("no agents declared" if not agents else
                                    "an agent's action space is unsupported: cannot sample actions")
        return None
    return _MultiAgentDriver(env, steps, seed, th, agents, obs_spaces, act_spaces)
