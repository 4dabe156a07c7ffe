"""REWARD_DROP: the return fell and stayed down. One rule, two views of the return.

On a training run (live on the driver, or offline from its results) the return is RLlib's
``env_runners/episode_return_mean``, the mean of the last ``metrics_num_episodes_for_smoothing``
(default 100) episodes of all training runners -- not one runner's episodes: a single
runner's 10-episode dip that recovers is what a healthy PPO run does (measured: one worker at
347 against a best of 500 on a run that ends at 500). :class:`RunReturnDrop` judges it.

``flow1 check`` has no iterations, only random-action episodes: :class:`ReturnTracker` judges
blocks of episode returns with a significance test.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..rule import Needs, Rule
from ..series import Series
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class RewardDropThresholds:
    """REWARD_DROP of a training run (ratio, best_of, min_iters) and of flow1 check (ratio, span, p_value)."""

    reward_drop_ratio: float = 0.7
    reward_drop_span: int = 10               # flow1 check: episodes per block and in the recent window
    reward_drop_p_value: float = 0.001       # flow1 check: Mann-Whitney, best block vs recent, Bonferroni
    reward_drop_min_iters: int = 3           # a run's drop must last this many iterations (and a window)
    reward_drop_best_of: int = 5             # a run's best = the best median of this many iterations
    return_noise_z: float = 3.0              # a change of the run's return is real beyond this many noise sigmas

    @property
    def lost_share(self) -> float:
        return 1.0 - self.reward_drop_ratio


RULES = (
    Rule("REWARD_DROP", C.REWARD_STATS, C.WARN,
         "training: the run's return fell more than {lost_share:.0%} of its gain below the best level it held (the "
         "best median of {reward_drop_best_of} iterations) and stayed there for {reward_drop_min_iters} iterations "
         "and a full smoothing window; flow1 check: the mean of the last {reward_drop_span} episodes < "
         "{reward_drop_ratio:g}x the best {reward_drop_span}-episode block, Mann-Whitney p <= {reward_drop_p_value:g}",
         RewardDropThresholds,
         evidence=("best", "current", "ratio_threshold"),
         needs=Needs(("reward_drop_best_of", "reward_drop_min_iters"), episode_windows=2)),
)


class ReturnNoise:
    """How much RLlib's smoothed return moves by chance alone, from the spread of the episodes
    it averages.

    ``episode_return_mean`` is the mean of the last ``window`` episodes; RLlib reports their
    ``episode_return_min`` and ``_max`` too. The range of n episodes is about
    ``2 z(1 - 0.5 / n)`` of their standard deviation (5.15 at n = 100, for normal returns), so
    one reading's chance error is ``sigma = range / (2 z(1 - 0.5 / n) sqrt(n))``. The spread of
    the episodes, not the change between iterations: a run that learns changes a lot, and
    that change is the signal, not noise. The median over the last readings; None before the
    first full window (or where RLlib logged no min/max: the rules then judge as before).
    """

    KEEP = 10

    def __init__(self, window: int = 100) -> None:
        self.window = max(1, int(window))
        self._sigmas: deque[float] = deque(maxlen=self.KEEP)

    def add(self, return_min: float | None, return_max: float | None, episodes_lifetime: float | None) -> None:
        if return_min is None or return_max is None or episodes_lifetime is None:
            return
        n = int(min(self.window, episodes_lifetime))
        if n < min(self.window, 20) or not return_max >= return_min:
            return   # a handful of episodes: their range says little
        self._sigmas.append((return_max - return_min) / (2.0 * _z(1.0 - 0.5 / n) * math.sqrt(n)))

    @property
    def sigma(self) -> float | None:
        return float(statistics.median(self._sigmas)) if self._sigmas else None

    def beyond(self, change: float, z: float) -> bool | None:
        """Whether ``change`` exceeds ``z`` noise sigmas (None while the noise is unknown)."""
        s = self.sigma
        return None if s is None else change > z * s

    def gain_beyond(self, gain: float, z: float, first_episodes: float) -> bool | None:
        """Whether the gain from the first reading to the best exceeds ``z`` sigmas of its own
        chance error: a difference of two readings, the first the mean of only
        ``first_episodes`` episodes (its sigma ``sigma * sqrt(window / first_episodes)``), so
        ``z * sigma * sqrt(1 + window / first_episodes)``. Against one reading's sigma alone, a
        noise env's return "rose" by chance: PPO on RLlib's RandomEnv, 60 episodes an iteration,
        gained 3.9 sigmas in 4 iterations. None while the noise is unknown."""
        s = self.sigma
        if s is None:
            return None
        n1 = max(1, min(self.window, int(first_episodes)))
        return gain > z * s * math.sqrt(1.0 + self.window / n1)


def _z(p: float) -> float:
    """The standard normal quantile (the standard library's: scipy's ``norm.ppf`` took
    ~0.4 ms of each driver hook)."""
    return statistics.NormalDist().inv_cdf(p)


@dataclass
class _Point:
    iteration: int
    value: float
    episodes: float


#: A drop is the best level held minus one reading: a difference of two noisy means (sqrt 2 of a
#: reading's sigma), the best the highest of the run's many overlapping ones (picked high by
#: luck). Measured on simulated noise runs (RLlib's 100-episode mean, 60 episodes an iteration,
#: 1,000 runs each): against 1x return_noise_z sigmas, REWARD_DROP fired on 375 of 1,000
#: 40-iteration runs and 339 of 400 100-iteration runs; sqrt 2x: 30 and 72; 2x: none.
DROP_NOISE_FACTOR = 2.0


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
    noise: ReturnNoise | None = None   # the return's chance movement (fed by the caller)
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
        sustained drop is first established, by more than ``DROP_NOISE_FACTOR * return_noise_z`` sigmas of the
        return's own noise (:class:`ReturnNoise`)."""
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
        z = th.return_noise_z * DROP_NOISE_FACTOR
        real = self.noise.beyond(self.best.value - p.value, z) if self.noise is not None else None
        if real is False:   # within what the episodes' spread alone moves the mean
            return None
        self.reported = True
        best, began = self.best, self.began
        return Finding(C.REWARD_DROP, (
            f"the run's episode return (RLlib's mean of the last {self.window} episodes, all training runners) "
            f"fell from the best level it held, {best.value:.4g} (median of {k} iterations to {best.iteration}), "
            f"to {p.value:.4g} and stayed below "
            f"{line:.4g} for {self.iters_below} iterations and {int(p.episodes - began.episodes)} episodes "
            f"(since iteration {began.iteration}); expected >= best - {1 - th.reward_drop_ratio:.0%} of the gain "
            f"since the first window ({self.start:.4g} -> {best.value:.4g}) and {z:g}x the "
            f"return's noise ({self._sigma_text()}): a sustained drop, not noise -- "
            f"look at entropy, KL and the learning rate around iteration {began.iteration}"),
            {"best": best.value, "best_iteration": best.iteration, "current": p.value, "line": line,
             "first_window_return": self.start, "drop_began_iteration": began.iteration,
             "iterations_below": self.iters_below, "episodes_below": int(p.episodes - began.episodes),
             "ratio_threshold": th.reward_drop_ratio, "min_iterations": th.reward_drop_min_iters, "best_of": k,
             "window_episodes": self.window, "scope": "run",
             "noise_sigma": self.noise.sigma if self.noise is not None else None, "noise_z": z})

    def _sigma_text(self) -> str:
        s = self.noise.sigma if self.noise is not None else None
        return "not measured" if s is None else f"sigma {s:.3g} of the {self.window}-episode mean"


class ReturnTracker:
    """REWARD_DROP over episode returns: the recent mean below ``reward_drop_ratio`` x the
    best baseline.

    Returns are grouped in blocks of ``reward_drop_span`` episodes; the baseline is the best
    block mean, the current level the mean of the last span episodes. Picking the best of
    many noisy blocks is an extreme-value game (a stationary policy's best block sits
    ~3 sigma above its mean), so the ratio alone fires on luck. The drop must also pass a
    one-sided Mann-Whitney test between the best block and the recent window, Bonferroni-
    corrected for the number of blocks it was picked from: distribution-free, so heavy-
    tailed returns (CartPole's are geometric-like) do not fool it.
    """

    MAX_BLOCKS = 100

    def __init__(self, th: Thresholds, max_bytes: int | None = None) -> None:
        """``max_bytes`` bounds the returns kept for :attr:`returns` (a uniform sample past
        it); the rule itself keeps only its blocks and the recent window."""
        self.th = th
        self.span = th.reward_drop_span
        self.series = Series(max_bytes, seed=4)
        self.count = 0
        self._total = 0.0
        self._blocks: deque[np.ndarray] = deque(maxlen=self.MAX_BLOCKS)
        self._recent: deque[float] = deque(maxlen=self.span)

    @property
    def returns(self) -> list[float]:
        """The finite episode returns (all of them, or a uniform sample past the byte cap)."""
        return self.series.values().tolist()

    @property
    def mean(self) -> float | None:
        """The mean finite episode return, exact (None before the first one)."""
        return self._total / self.count if self.count else None

    def add(self, episode_return: float) -> None:
        if not math.isfinite(episode_return):
            return
        self.count += 1
        self._total += float(episode_return)
        self.series.append(float(episode_return), self.count)
        self._recent.append(float(episode_return))
        if self.count % self.span == 0:
            self._blocks.append(np.asarray(self._recent))

    def check(self) -> Finding | None:
        if len(self._blocks) < 2 or len(self._recent) < self.span:
            return None
        recent = np.asarray(self._recent)
        means = [float(b.mean()) for b in self._blocks]
        i = int(np.argmax(means))
        best, current = means[i], float(recent.mean())
        drop = best - current
        if drop <= (1.0 - self.th.reward_drop_ratio) * abs(best):
            return None
        # imported here: every EnvRunner imports this module (its checker keeps returns) but
        # only the driver and ``flow1 check`` judge them; scipy.stats is ~54 MB and ~0.5 s a process
        from scipy.stats import mannwhitneyu

        p = float(mannwhitneyu(recent, self._blocks[i], alternative="less").pvalue) * len(self._blocks)
        if p > self.th.reward_drop_p_value:
            return None
        best_episode = (self.count // self.span - len(self._blocks) + i + 1) * self.span
        return Finding(C.REWARD_DROP,
                       f"episode return mean of the last {self.span} episodes {current:.4g}, expected >= "
                       f"{self.th.reward_drop_ratio:g} x best {best:.4g} (episodes {best_episode - self.span + 1}-"
                       f"{best_episode}); Mann-Whitney p {min(p, 1.0):.2g} <= {self.th.reward_drop_p_value:g}",
                       {"current": current, "best": best, "best_episodes_end": best_episode,
                        "ratio": current / best if best else None, "ratio_threshold": self.th.reward_drop_ratio,
                        "p_value": min(p, 1.0), "p_threshold": self.th.reward_drop_p_value,
                        "episodes": self.count})
