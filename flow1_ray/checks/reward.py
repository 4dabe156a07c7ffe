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
from .findings import Finding
from .thresholds import Thresholds

MAD_TO_SIGMA = 1.4826


def reward_stats(rewards: np.ndarray, robust_z: float = 3.0) -> dict:
    """The numbers the reward rules read, also written as the module's PASS evidence."""
    r = np.asarray(rewards, dtype=np.float64)
    fin = r[np.isfinite(r)]
    stats = {"steps": int(r.size), "non_finite": int(r.size - fin.size)}
    if fin.size == 0:
        return stats
    mean, std = float(fin.mean()), float(fin.std())
    med = float(np.median(fin))
    mad = float(np.median(np.abs(fin - med)))
    robust_sigma = MAD_TO_SIGMA * mad
    if robust_sigma > 0:
        outlier_share = float(np.mean(np.abs(fin - med) / robust_sigma > robust_z))
    else:  # more than half the rewards are equal: anything else is an outlier
        outlier_share = float(np.mean(fin != med))
    skew = float(np.mean(((fin - mean) / std) ** 3)) if std > 0 else 0.0
    stats.update({
        "mean": mean, "std": std, "min": float(fin.min()), "max": float(fin.max()), "median": med,
        "cv": std / abs(mean) if mean != 0 else (math.inf if std > 0 else 0.0),
        "nonzero_ratio": float(np.mean(fin != 0)), "max_abs": float(np.max(np.abs(fin))),
        "robust_outlier_share": outlier_share, "skewness": skew,
    })
    return stats


def reward_findings(rewards: np.ndarray, th: Thresholds, steps: np.ndarray | None = None) -> list[Finding]:
    """REWARD_NAN, REWARD_SPARSE, REWARD_SPIKES and REWARD_SCALE over per-step rewards.

    REWARD_SPIKES follows the seed's intent (CV > 0.5 with > 15 % of the rewards far from
    the bulk) but measures "far" in robust deviations (median/MAD): with mean/std z-scores
    the share beyond 3 can never pass 1/9 (Chebyshev). A rare large penalty (collision
    -100 among -0.1 steps) is caught by the skewness term; the CV gate keeps a reward that
    is constant but for a rare goal bonus (Acrobot) quiet.
    """
    r = np.asarray(rewards, dtype=np.float64)
    out: list[Finding] = []
    if r.size == 0:
        return out
    bad = ~np.isfinite(r)
    if bad.any():
        i = int(np.argmax(bad))
        first = int(steps[i]) if steps is not None else i
        out.append(Finding(C.REWARD_NAN,
                           f"reward {r[i]} at step {first}: expected finite rewards, actual {int(bad.sum())} "
                           f"non-finite of {r.size}",
                           {"first_step": first, "non_finite": int(bad.sum()), "steps_checked": int(r.size)},
                           env_step=first, count=int(bad.sum())))
    if r.size < th.reward_min_steps:
        return out
    s = reward_stats(r, th.reward_spike_robust_z)
    if "mean" not in s:
        return out
    if s["nonzero_ratio"] < th.reward_sparse_ratio:
        out.append(Finding(C.REWARD_SPARSE,
                           f"non-zero reward ratio {s['nonzero_ratio']:.4f}, expected >= {th.reward_sparse_ratio:g} "
                           f"({int(round(s['nonzero_ratio'] * r.size))} of {r.size} steps): add a dense shaping term",
                           {"nonzero_ratio": s["nonzero_ratio"], "threshold": th.reward_sparse_ratio,
                            "steps": int(r.size)}))
        return out  # spikes and scale of a reward that is almost always 0 say nothing more
    if s["cv"] > th.reward_spike_cv and (s["robust_outlier_share"] > th.reward_spike_share
                                        or abs(s["skewness"]) > th.reward_skew):
        why = (f"{s['robust_outlier_share']:.1%} of rewards beyond {th.reward_spike_robust_z:g} robust deviations, "
               f"expected <= {th.reward_spike_share:.0%}") if s["robust_outlier_share"] > th.reward_spike_share else (
               f"skewness {s['skewness']:.1f}, expected |skew| <= {th.reward_skew:g}")
        out.append(Finding(C.REWARD_SPIKES,
                           f"reward CV {s['cv']:.2f} > {th.reward_spike_cv:g} and {why}: check shaping terms "
                           f"and penalties for outsized values",
                           {"cv": s["cv"], "cv_threshold": th.reward_spike_cv,
                            "robust_outlier_share": s["robust_outlier_share"], "share_threshold": th.reward_spike_share,
                            "skewness": s["skewness"], "skew_threshold": th.reward_skew}))
    if 0 < s["max_abs"] < th.reward_scale_min:
        out.append(Finding(C.REWARD_SCALE,
                           f"max |reward| {s['max_abs']:.3g}, expected >= {th.reward_scale_min:g}: "
                           f"rescale the reward (advantages and value targets vanish)",
                           {"max_abs": s["max_abs"], "threshold": th.reward_scale_min}))
    return out


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

    def __init__(self, th: Thresholds) -> None:
        self.th = th
        self.span = th.reward_drop_span
        self.returns: list[float] = []
        self._blocks: deque[np.ndarray] = deque(maxlen=self.MAX_BLOCKS)
        self._recent: deque[float] = deque(maxlen=self.span)

    def add(self, episode_return: float) -> None:
        if not math.isfinite(episode_return):
            return
        self.returns.append(float(episode_return))
        self._recent.append(float(episode_return))
        if len(self.returns) % self.span == 0:
            self._blocks.append(np.asarray(self.returns[-self.span:]))

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
        best_episode = (len(self.returns) // self.span - len(self._blocks) + i + 1) * self.span
        return Finding(C.REWARD_DROP,
                       f"episode return mean of the last {self.span} episodes {current:.4g}, expected >= "
                       f"{self.th.reward_drop_ratio:g} x best {best:.4g} (episodes {best_episode - self.span + 1}-"
                       f"{best_episode}); Mann-Whitney p {min(p, 1.0):.2g} <= {self.th.reward_drop_p_value:g}",
                       {"current": current, "best": best, "best_episodes_end": best_episode,
                        "ratio": current / best if best else None, "ratio_threshold": self.th.reward_drop_ratio,
                        "p_value": min(p, 1.0), "p_threshold": self.th.reward_drop_p_value,
                        "episodes": len(self.returns)})
