"""REWARD_STATS checks: is the reward a learnable signal?

``reward_findings`` judges an array of per-step rewards (a whole ``flow1 check`` run, or a
window of live samples); REWARD_DROP is :mod:`.reward_drop`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import codes as C
from .findings import Finding, advisory
from .rule import Rule
from .thresholds import Thresholds


@dataclass(frozen=True)
class RewardThresholds:
    """REWARD_STATS over per-step rewards; below ``reward_min_steps`` the distribution
    rules stay silent."""

    reward_min_steps: int = 100
    reward_sparse_ratio: float = 0.01
    reward_spike_cv: float = 0.5             # spikes need CV > 0.5 ...
    reward_spike_ratio: float = 10.0         # ... rewards beyond 10x the median |non-zero reward| ...
    reward_spike_mass: float = 0.5           # ... carrying more than this share of the total |reward|
    reward_scale_min: float = 1e-3


RULES = (
    Rule("REWARD_NAN", C.REWARD_STATS, C.FAIL, "NaN/inf reward"),
    Rule("REWARD_SPARSE", C.REWARD_STATS, C.PASS,
         "advisory: non-zero reward ratio < {reward_sparse_ratio:g} under random actions (at least "
         "{reward_min_steps} steps)", RewardThresholds),
    Rule("REWARD_SPIKES", C.REWARD_STATS, C.WARN,
         "CV > {reward_spike_cv:g} and rewards beyond {reward_spike_ratio:g}x the median |non-zero reward| carry "
         "> {reward_spike_mass:.0%} of the total |reward|", RewardThresholds),
    Rule("REWARD_SCALE", C.REWARD_STATS, C.WARN, "max |reward| < {reward_scale_min:g}", RewardThresholds),
)

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

    REWARD_SPIKES is meant to catch "a rare outsized penalty or bonus relative to
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

    The CV > 0.5 gate is kept. What this replaced: robust z-scores (median/MAD) with
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
