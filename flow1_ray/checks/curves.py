"""Rules over the sequence of a run's training results (one RLlib result dict per iteration).

No Ray here: the driver feeds each iteration's numbers live, and the same code can judge a
finished run's results offline.

REWARD_DROP of a live run is judged here, on the run's return -- RLlib's
``env_runners/episode_return_mean``, the mean of the last ``metrics_num_episodes_for_smoothing``
(default 100) episodes of all training runners -- and not on one runner's episodes: a single
runner's 10-episode dip that recovers is what a healthy PPO run does (measured: one worker at
347 against a best of 500 on a run that ends at 500).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .. import codes as C
from .findings import Finding
from .thresholds import DEFAULT, Thresholds


def finite(v: Any) -> float | None:
    """``v`` as a finite float, or None (numpy scalars, numeric strings; NaN/inf/None -> None)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def result_number(result: dict, *path: str) -> float | None:
    """A finite float at ``result[path[0]][path[1]]...`` (Tune's flattened "a/b" key too), or None."""
    v: Any = result.get("/".join(path))
    if v is None:
        v = result
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
            if v is None:
                return None
    return finite(v)


@dataclass
class _Point:
    iteration: int
    value: float
    episodes: float


@dataclass
class RunReturnDrop:
    """REWARD_DROP: the run's return lost a share of what it had gained, and stayed down.

    ``best`` is the best level the run *held*: the highest median of
    ``reward_drop_best_of`` consecutive iterations' returns, not the highest single reading
    (the best of many noisy 100-episode means is high by luck: measured on a healthy APPO
    CartPole run, a single 327 among readings of 220-305 made an ordinary oscillation look
    like a 35 % drop). A drop begins at the first iteration whose return falls below
    ``best - (1 - reward_drop_ratio) * gain``, where ``gain`` is the best level minus the
    return of the run's first full smoothing window (or ``|best|`` when the run never gained:
    then the drop is measured against the level itself). It is a finding only when it is
    *sustained*: every iteration since it began stayed below that line, for at least
    ``reward_drop_min_iters`` iterations and at least ``window`` new episodes -- so that
    RLlib's smoothed mean is made of post-drop episodes only. Only iterations whose smoothing
    window is full are judged (earlier means stand on a handful of episodes). One finding per
    drop; it re-arms once the return is back above the line.
    """

    thresholds: Thresholds = DEFAULT
    window: int = 100                  # RLlib's metrics_num_episodes_for_smoothing
    start: float | None = None
    best: _Point | None = None
    began: _Point | None = None
    iters_below: int = 0
    reported: bool = False
    recent: deque = field(default_factory=deque)

    def line(self) -> float | None:
        """The return below which the run counts as dropped (None until judged)."""
        if self.best is None or self.start is None:
            return None
        gain = self.best.value - self.start
        scale = gain if gain > 0 else abs(self.best.value)
        return None if scale <= 0 else self.best.value - (1.0 - self.thresholds.reward_drop_ratio) * scale

    def add(self, iteration: int, return_mean: float | None, episodes_lifetime: float | None) -> Finding | None:
        """One iteration's smoothed return and lifetime episode count; a Finding when a
        sustained drop is first established."""
        if return_mean is None or episodes_lifetime is None or episodes_lifetime < self.window:
            return None
        p = _Point(iteration, float(return_mean), float(episodes_lifetime))
        if self.start is None:
            self.start = p.value
        self.recent.append(p.value)
        k = max(1, self.thresholds.reward_drop_best_of)
        while len(self.recent) > k:
            self.recent.popleft()
        if len(self.recent) == k:
            level = float(statistics.median(self.recent))
            if self.best is None or level > self.best.value:
                self.best = _Point(iteration, level, p.episodes)
        line = self.line()
        if line is None or p.value >= line:
            self.began, self.iters_below, self.reported = None, 0, False
            return None
        if self.began is None:
            self.began = p
        self.iters_below += 1
        th = self.thresholds
        if self.reported or self.iters_below < th.reward_drop_min_iters or \
                p.episodes - self.began.episodes < self.window:
            return None
        self.reported = True
        best, began = self.best, self.began
        return Finding(C.REWARD_DROP, (
            f"the run's episode return (RLlib's mean of the last {self.window} episodes, all training runners) "
            f"fell from the best level it held, {best.value:.4g} (median of {k} iterations to {best.iteration}), "
            f"to {p.value:.4g} and stayed below "
            f"{line:.4g} for {self.iters_below} iterations and {int(p.episodes - began.episodes)} episodes "
            f"(since iteration {began.iteration}); expected >= best - {1 - th.reward_drop_ratio:.0%} of the gain "
            f"since the first window ({self.start:.4g} -> {best.value:.4g}): a sustained drop, not noise -- "
            f"look at entropy, KL and the learning rate around iteration {began.iteration}"),
            {"best": best.value, "best_iteration": best.iteration, "current": p.value, "line": line,
             "first_window_return": self.start, "drop_began_iteration": began.iteration,
             "iterations_below": self.iters_below, "episodes_below": int(p.episodes - began.episodes),
             "ratio_threshold": th.reward_drop_ratio, "min_iterations": th.reward_drop_min_iters, "best_of": k,
             "window_episodes": self.window, "scope": "run"})
