"""TIME_LIMIT_AS_TERMINATED: a time limit signalled as ``terminated`` instead of ``truncated``.

Under random actions an end the state decides comes at varying steps; a time limit comes at
the same one. When every episode of a check ends at one step L with ``terminated=True`` and
``truncated`` is never set, the cut-off is read as a true end: the value function learns that
nothing follows step L and never bootstraps past it (gymnasium's TimeLimit and RLlib return
``truncated`` for exactly this). Told apart from an end by design:

- a game with a fixed number of moves pays its outcome at the end (a win, a loss): a last
  step's reward unlike the step's before it (larger than 3x the largest of those, or its median
  more than 3 of their standard deviations away) is an outcome, and silent;
- a finite-horizon task whose observation carries the time (a dimension that follows the step
  index in every episode) may end at L: the agent sees the end coming, and silent.

Judged offline (``flow1 check``) on the episodes the check drove; a sample of at most
:data:`TRACKED_EPISODES` episodes' low-dimensional observations decides the time question.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule

RULES = (
    Rule("TIME_LIMIT_AS_TERMINATED", C.ENV_SPEC, C.WARN,
         "every episode (>= 5) ends with terminated=True at the same step and truncated is never "
         "set, while the last step pays no outcome and no observation carries the time",
         evidence=("episodes", "length", "last_reward_range", "before_last_reward_range")),
)

#: episodes needed to call one length a limit (random play ends a state-decided episode at
#: varying steps: 5 equal lengths by chance are rare)
MIN_EPISODES = 5
#: episodes whose observations are kept to tell whether one carries the time
TRACKED_EPISODES = 8
#: observation sizes kept for that (a flat vector of at most this many numbers)
MAX_DIMS = 64
#: a dimension follows the step index when |correlation| is above this in every tracked episode
TIME_CORRELATION = 0.99


@dataclass
class EpisodeEnds:
    """Each ended episode's length and flags, the last step's reward and the others' range, and
    a few episodes' observations (for the time question)."""

    lengths: list[int] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated_seen: bool = False
    last_rewards: list[float] = field(default_factory=list)
    before_last: list[float] = field(default_factory=list)   # each ended episode's reward one step before its end
    _obs: list[list[np.ndarray]] = field(default_factory=list)
    _current: list[np.ndarray] = field(default_factory=list)
    _t: int = 0
    _prev_reward: float | None = None

    def on_step(self, obs: Any, reward: Any, terminated: bool, truncated: bool) -> None:
        self._t += 1
        try:
            r = float(reward)
        except (TypeError, ValueError):
            r = float("nan")
        if len(self._obs) < TRACKED_EPISODES:
            self._keep(obs)
        if truncated:
            self.truncated_seen = True
        if not (terminated or truncated):
            self._prev_reward = r
            return
        self.lengths.append(self._t)
        self.terminated.append(bool(terminated))
        self.last_rewards.append(r)
        self.before_last.append(self._prev_reward if self._prev_reward is not None else float("nan"))
        self._prev_reward = None
        if len(self._obs) < TRACKED_EPISODES and self._current:
            self._obs.append(self._current)
        self._current, self._t = [], 0

    def on_reset(self) -> None:
        self._current, self._t, self._prev_reward = [], 0, None

    def _keep(self, obs: Any) -> None:
        try:
            x = np.asarray(obs, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            return
        if 0 < x.size <= MAX_DIMS:
            self._current.append(x)

    def time_observed(self) -> bool:
        """Some dimension follows the step index in every tracked episode of 3+ steps."""
        eps = [np.stack(e) for e in self._obs if len(e) >= 3 and len({x.size for x in e}) == 1]
        if not eps or len({e.shape[1] for e in eps}) != 1:
            return False
        for d in range(eps[0].shape[1]):
            ok = True
            for e in eps:
                col, t = e[:, d], np.arange(len(e), dtype=np.float64)
                if np.ptp(col) <= 0 or not np.all(np.isfinite(col)):
                    ok = False
                    break
                if abs(float(np.corrcoef(col, t)[0, 1])) < TIME_CORRELATION:
                    ok = False
                    break
            if ok:
                return True
        return False


def time_limit_finding(ends: EpisodeEnds) -> Finding | None:
    """TIME_LIMIT_AS_TERMINATED, or None."""
    n = len(ends.lengths)
    if n < MIN_EPISODES or ends.truncated_seen or not all(ends.terminated) or len(set(ends.lengths)) != 1:
        return None
    length = ends.lengths[0]
    last = np.array([r for r in ends.last_rewards if np.isfinite(r)])
    before = np.array([r for r in ends.before_last if np.isfinite(r)])
    if length < 2 or len(last) < MIN_EPISODES or len(before) < MIN_EPISODES or _pays_outcome(last, before):
        return None
    if ends.time_observed():
        return None   # the agent sees the end coming: a finite-horizon task
    return Finding(C.TIME_LIMIT_AS_TERMINATED, (
        f"all {n} episodes ended with terminated=True at step {length} and truncated was never set, the last "
        f"step paying no outcome (its rewards {last.min():.4g}..{last.max():.4g}, the step's before "
        f"{before.min():.4g}..{before.max():.4g}) and no observation carrying the time: a time limit "
        f"signalled as terminated, so the value function learns that nothing follows step {length}; return "
        f"truncated=True at the limit (gymnasium's TimeLimit does), or put the time in the observation if "
        f"step {length} is the task's real end"),
        {"episodes": n, "length": length, "last_reward_range": [float(last.min()), float(last.max())],
         "before_last_reward_range": [float(before.min()), float(before.max())]})


def _pays_outcome(last: np.ndarray, before: np.ndarray) -> bool:
    """The last step's rewards unlike the step's before: an outcome paid at the end (a game won
    or lost), not one more step of the same kind."""
    eps = 1e-9 + 1e-6 * float(np.max(np.abs(before)))
    if float(np.max(np.abs(last))) > 3.0 * float(np.max(np.abs(before))) + eps:
        return True
    return abs(float(np.median(last) - np.median(before))) > 3.0 * float(np.std(before)) + eps
