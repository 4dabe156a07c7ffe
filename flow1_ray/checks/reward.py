"""REWARD_STATS checks: is the reward a learnable signal?

``reward_findings`` judges an array of per-step rewards (a whole ``flow1 check`` run, or a
window of live samples); :class:`ReturnTracker` follows episode returns for REWARD_DROP.
"""

from __future__ import annotations

import math

import numpy as np

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
    """REWARD_DROP over episode returns: EMA below ``reward_drop_ratio`` x its best.

    The drop must also exceed ``reward_drop_z`` times the EMA's own noise, estimated from
    the median absolute difference of consecutive returns (insensitive to slow trends), so
    that the luck of a random or stationary policy never reads as a collapse.
    """

    def __init__(self, th: Thresholds) -> None:
        self.th = th
        self.alpha = 2.0 / (th.reward_drop_span + 1)
        self.returns: list[float] = []
        self.ema: float | None = None
        self.best: float | None = None
        self.best_at = -1

    def add(self, episode_return: float) -> None:
        if not math.isfinite(episode_return):
            return
        self.returns.append(float(episode_return))
        self.ema = episode_return if self.ema is None else self.ema + self.alpha * (episode_return - self.ema)
        if len(self.returns) >= self.th.reward_drop_span and (self.best is None or self.ema > self.best):
            self.best, self.best_at = self.ema, len(self.returns)

    def check(self) -> Finding | None:
        if self.best is None or self.ema is None or len(self.returns) < 2 * self.th.reward_drop_span:
            return None
        drop = self.best - self.ema
        if drop <= (1.0 - self.th.reward_drop_ratio) * abs(self.best):
            return None
        r = np.asarray(self.returns)
        sigma = MAD_TO_SIGMA * float(np.median(np.abs(np.diff(r)))) / math.sqrt(2.0)
        noise = sigma * math.sqrt(self.alpha / (2.0 - self.alpha))
        if drop <= self.th.reward_drop_z * noise:
            return None
        return Finding(C.REWARD_DROP,
                       f"episode return EMA {self.ema:.4g}, expected >= {self.th.reward_drop_ratio:g} x best "
                       f"{self.best:.4g} (reached at episode {self.best_at}); drop {drop:.4g} = "
                       f"{drop / max(noise, 1e-12):.1f}x its noise",
                       {"ema": self.ema, "best": self.best, "best_episode": self.best_at,
                        "ratio_threshold": self.th.reward_drop_ratio, "noise": noise, "z_threshold": self.th.reward_drop_z,
                        "episodes": len(self.returns)})
