"""REWARD_STATS checks: is the reward a learnable signal?

``reward_findings`` judges an array of per-step rewards (a whole ``flow1 check`` run, or a
window of live samples); :class:`ReturnTracker` follows episode returns for REWARD_DROP.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from scipy.stats import mannwhitneyu

from .. import codes as C
from .findings import Finding, advisory
from .series import Series
from .thresholds import Thresholds

def usual_magnitude(rewards: np.ndarray) -> float:
    """The median |r| of the non-zero rewards: the scale of what the env usually pays.

    Zeros mean "nothing happened" and set no scale: in Pong or MiniGrid almost every reward
    is 0 and the usual reward *is* the point or goal reward. 0.0 when every reward is 0.
    """
    nz = np.abs(rewards[rewards != 0])
    return float(np.median(nz)) if nz.size else 0.0


def reward_stats(rewards: np.ndarray, spike_ratio: float = 10.0) -> dict:
    """The numbers the reward rules read, also written as the module's PASS evidence."""
    r = np.asarray(rewards, dtype=np.float64)
    fin = r[np.isfinite(r)]
    stats = {"steps": int(r.size), "non_finite": int(r.size - fin.size)}
    if fin.size == 0:
        return stats
    mean, std = float(fin.mean()), float(fin.std())
    usual = usual_magnitude(fin)
    mag = np.abs(fin)
    outsized = mag > spike_ratio * usual if usual > 0 else np.zeros(fin.shape, bool)
    total = float(mag.sum())
    stats.update({
        "mean": mean, "std": std, "min": float(fin.min()), "max": float(fin.max()), "median": float(np.median(fin)),
        "cv": std / abs(mean) if mean != 0 else (math.inf if std > 0 else 0.0),
        "nonzero_ratio": float(np.mean(fin != 0)), "max_abs": float(mag.max()),
        "usual_magnitude": usual, "outsized_share": float(outsized.mean()),
        "outsized_mass": float(mag[outsized].sum()) / total if total > 0 else 0.0,
    })
    return stats


def reward_findings(rewards: np.ndarray, th: Thresholds, steps: np.ndarray | None = None, *,
                    seen: int | None = None, non_finite: int | None = None) -> list[Finding]:
    """REWARD_NAN, REWARD_SPARSE (an advisory), REWARD_SPIKES and REWARD_SCALE over per-step
    rewards.

    ``rewards`` may be a uniform sample of a longer run (a :class:`~flow1_ray.checks.series.Series`
    past its byte cap, holding the first non-finite reward): ``seen`` is then the number of
    rewards of the run and ``non_finite`` their exact count of NaN/inf, which REWARD_NAN
    reports; the distribution rules read the sample.

    REWARD_SPARSE is an advisory, not a WARN: these are random actions, which cannot reach
    most goal rewards, and many good envs are sparse by design (MiniGrid, Atari, any
    reach-the-goal task). It says what the numbers are and what to plan for.

    REWARD_SPIKES follows the seed's intent: "a rare outsized penalty or bonus relative to
    the usual reward scale" (its example: a collision penalty typed -1000 instead of -100,
    which leaves the agent too afraid to move). Two measures make that precise:

    * *outsized*: a reward whose magnitude is more than ``reward_spike_ratio`` (10) times
      the usual magnitude, the median |r| of the **non-zero** rewards. Magnitude, not
      distance from the median: a +1 point among -1 points (Pong) is not outsized, -100
      among -0.1 steps is (1000x). Non-zero, because where most rewards are exactly 0 the
      non-zero ones are the signal (points, goals), not outliers of a bulk of zeros: Atari
      +/-1, a goal +1 and MiniGrid's 1 - 0.9 t/T (within 10x of each other) stay quiet.
    * *dominant*: those outsized rewards carry more than ``reward_spike_mass`` (half) of
      the total |reward|, so they, not the usual rewards, are what the returns (and the
      value targets) are made of. One heavy-tailed step in a dense locomotion reward
      carries almost nothing and stays quiet.

    The seed's CV > 0.5 gate is kept. What this replaced: robust z-scores (median/MAD) with
    a skewness term fired on Pong (median 0, MAD 0: every point was an "outlier", skewness
    -6) and, at 15.1 % beyond 3 robust deviations, on Hopper's ordinary heavy tail. By
    design CliffWalking's -100 cliff among -1 steps fires: it is the very penalty that
    drives an agent to the safe path.
    """
    r = np.asarray(rewards, dtype=np.float64)
    out: list[Finding] = []
    if r.size == 0:
        return out
    bad = ~np.isfinite(r)
    if bad.any():
        i = int(np.argmax(bad))
        first = int(steps[i]) if steps is not None else i
        k = int(bad.sum()) if non_finite is None else int(non_finite)
        n = int(r.size) if seen is None else int(seen)
        out.append(Finding(C.REWARD_NAN,
                           f"reward {r[i]} at step {first}: expected finite rewards, actual {k} non-finite of {n}",
                           {"first_step": first, "non_finite": k, "steps_checked": n}, env_step=first, count=k))
    if r.size < th.reward_min_steps:
        return out
    s = reward_stats(r, th.reward_spike_ratio)
    if "mean" not in s:
        return out
    if s["nonzero_ratio"] < th.reward_sparse_ratio:
        out.append(_sparse_advisory(s, th))
    if s["cv"] > th.reward_spike_cv and s["outsized_mass"] > th.reward_spike_mass:
        out.append(_spikes(s, th))
    if 0 < s["max_abs"] < th.reward_scale_min:
        out.append(Finding(C.REWARD_SCALE,
                           f"max |reward| {s['max_abs']:.3g}, expected >= {th.reward_scale_min:g}: "
                           f"rescale the reward (advantages and value targets vanish)",
                           {"max_abs": s["max_abs"], "threshold": th.reward_scale_min}))
    return out


def _sparse_advisory(s: dict, th: Thresholds) -> Finding:
    n = s["steps"] - s["non_finite"]
    return advisory(C.REWARD_SPARSE,
                    f"non-zero reward ratio {s['nonzero_ratio']:.4f} under random actions "
                    f"({int(round(s['nonzero_ratio'] * n))} of {n} steps), below {th.reward_sparse_ratio:g}: "
                    f"random actions rarely reach a goal reward, and many good envs are sparse by design; if yours is "
                    f"not meant to be, add a dense shaping term, else plan for exploration",
                    {"nonzero_ratio": s["nonzero_ratio"], "threshold": th.reward_sparse_ratio, "steps": n})


def _spikes(s: dict, th: Thresholds) -> Finding:
    k = s["outsized_share"] * (s["steps"] - s["non_finite"])
    return Finding(C.REWARD_SPIKES,
                   f"{int(round(k))} reward(s) beyond {th.reward_spike_ratio:g}x the usual magnitude "
                   f"{s['usual_magnitude']:.4g} (median |r| of non-zero rewards; largest {s['max_abs']:.4g}) carry "
                   f"{s['outsized_mass']:.0%} of the total |reward|: expected <= {th.reward_spike_mass:.0%}; "
                   f"reward CV {s['cv']:.2f} > {th.reward_spike_cv:g}; check penalties and bonuses for outsized values",
                   {"usual_magnitude": s["usual_magnitude"], "max_abs": s["max_abs"],
                    "ratio_threshold": th.reward_spike_ratio, "outsized_share": s["outsized_share"],
                    "outsized_mass": s["outsized_mass"], "mass_threshold": th.reward_spike_mass,
                    "cv": s["cv"], "cv_threshold": th.reward_spike_cv})


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
