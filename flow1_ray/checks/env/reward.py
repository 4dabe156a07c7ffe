"""REWARD_STATS checks: is the reward a learnable signal?

``reward_findings`` judges an array of per-step rewards (a whole ``flow1 check`` run, or a
window of live samples); REWARD_DROP is :mod:`.reward_drop`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...common import codes as C
from ..findings import Finding, advisory
from ..rule import Rule
from ..thresholds import Thresholds


@dataclass(frozen=True)
class RewardThresholds:
    """REWARD_STATS over per-step rewards; below ``reward_min_steps`` the distribution
    rules stay silent."""

    reward_min_steps: int = 100
    reward_sparse_ratio: float = 0.01
    reward_spike_cv: float = 0.5             # spikes need CV > 0.5 ...
    reward_spike_ratio: float = 10.0         # ... rewards beyond 10x the median |non-zero reward| ...
    reward_spike_mass: float = 0.5           # ... isolated, carrying more than this share of their episodes' |reward|
    reward_level_min_recurrences: int = 3    # an outsized value paid on this many occasions is a level of the env
    reward_level_min_pays: int = 30          # a level paid mid-episode on this many steps ...
    reward_level_max_auc: float = 0.6        # ... that the step predicts no better than this AUC (flow1 check)
    reward_scale_min: float = 1e-3


RULES = (
    Rule("REWARD_NAN", C.REWARD_STATS, C.FAIL, "NaN/inf reward"),
    Rule("REWARD_SPARSE", C.REWARD_STATS, C.PASS,
         "advisory: non-zero reward ratio < {reward_sparse_ratio:g} under random actions (at least "
         "{reward_min_steps} steps)", RewardThresholds),
    Rule("REWARD_SPIKES", C.REWARD_STATS, C.WARN,
         "CV > {reward_spike_cv:g} and isolated rewards beyond {reward_spike_ratio:g}x the median |non-zero reward| "
         "(paid on < {reward_level_min_recurrences} separate occasions and not an episode's outcome: not a level "
         "of the env) carry > {reward_spike_mass:.0%} of the |reward| of their episodes; or (flow1 check) a level paid "
         "mid-episode on >= {reward_level_min_pays} steps carries > {reward_spike_mass:.0%} of the |reward| and the "
         "step (observation, action, next observation) predicts it no better than nearest-neighbour AUC "
         "{reward_level_max_auc:g}", RewardThresholds,
         evidence=("largest", "largest_step", "isolated", "isolated_mass", "levels", "usual_magnitude", "cv")),
    Rule("REWARD_SCALE", C.REWARD_STATS, C.WARN, "max |reward| < {reward_scale_min:g}", RewardThresholds),
)

def usual_magnitude(rewards: np.ndarray) -> float:
    """The median |r| of the non-zero rewards: the scale of what the env usually pays.

    Zeros mean "nothing happened" and set no scale: in Pong or MiniGrid almost every reward
    is 0 and the usual reward *is* the point or goal reward. 0.0 when every reward is 0.
    """
    nz = np.abs(rewards[rewards != 0])
    return float(np.median(nz)) if nz.size else 0.0


@dataclass(frozen=True)
class Episodes:
    """Where the episodes of a reward stream ended: ``end_steps`` ascending, ``terminated``
    beside them (False: truncated). A reward at step s belongs to the first episode whose end
    step is >= s; one at a terminated end step is that episode's outcome (goal, win, loss).
    ``turn_ends``: in a multi-agent env, the steps after which the agent handed control on
    having acted several steps in a row (a hierarchical env's sub-task: the low-level agent's
    reward for reaching its sub-goal comes on its last step): outcomes too."""

    end_steps: np.ndarray
    terminated: np.ndarray
    turn_ends: np.ndarray | None = None

    def of(self, steps: np.ndarray) -> np.ndarray:
        """Each step's episode index (len(end_steps): the episode still running)."""
        return np.searchsorted(self.end_steps, steps, side="left")

    def at_outcome(self, steps: np.ndarray) -> np.ndarray:
        """Whether each step is the last step of an episode that terminated."""
        i = self.of(steps)
        inside = i < len(self.end_steps)
        out = np.zeros(steps.shape, bool)
        out[inside] = (self.end_steps[i[inside]] == steps[inside]) & self.terminated[i[inside]]
        if self.turn_ends is not None and len(self.turn_ends):
            out |= np.isin(steps, self.turn_ends)
        return out


#: outsized rewards within this factor of their neighbour (same sign) form one group: a level
#: of the env (a goal near 100, a bonus of 50 +- noise) rather than each its own value
LEVEL_SPREAD = 2.0


def _groups(values: np.ndarray) -> list[np.ndarray]:
    """Indices of ``values`` grouped by sign and by magnitude, neighbours within LEVEL_SPREAD."""
    out: list[np.ndarray] = []
    for sign in (-1.0, 1.0):
        idx = np.flatnonzero(np.sign(values) == sign)
        if not idx.size:
            continue
        idx = idx[np.argsort(np.log(np.abs(values[idx])), kind="stable")]
        logs = np.log(np.abs(values[idx]))
        cuts = np.flatnonzero(np.diff(logs) > math.log(LEVEL_SPREAD)) + 1
        out.extend(np.split(idx, cuts))
    return out


def _occasions(steps: np.ndarray | None, n: int) -> int:
    """How many separate times rewards were paid: runs of consecutive steps count once."""
    if steps is None:
        return n
    s = np.sort(steps)
    return 1 + int(np.count_nonzero(np.diff(s) > 1)) if s.size else 0


def reward_levels(r: np.ndarray, steps: np.ndarray | None, episodes: Episodes | None, spike_ratio: float,
                  min_recurrences: int) -> tuple[list[dict], np.ndarray]:
    """The outsized rewards (beyond ``spike_ratio`` x the usual magnitude) split into the env's
    **levels** and the **isolated** rest; returns (levels, isolated mask over ``r``).

    A level is a value the env pays again and again: a group of outsized rewards of one sign
    within LEVEL_SPREAD of each other paid on at least ``min_recurrences`` separate occasions
    (runs of consecutive steps; rewards where the steps are unknown), or that is an episode's outcome
    (paid on the step that terminated it: the goal, the win, the loss, however large, however
    rarely random actions reach it). A corridor's goal of 1 against -0.01 steps, a bandit arm
    paying 50 and a game won for 100 are levels: what the returns are made of by design.
    What is left is isolated: a value seen once or twice, mid-episode.
    """
    usual = usual_magnitude(r)
    isolated = np.zeros(r.shape, bool)
    if usual <= 0:
        return [], isolated
    big = np.flatnonzero(np.abs(r) > spike_ratio * usual)
    if not big.size:
        return [], isolated
    known = steps is not None and episodes is not None
    ep = episodes.of(steps[big]) if known else None
    outcome = episodes.at_outcome(steps[big]) if known else np.zeros(big.size, bool)
    levels = []
    for g in _groups(r[big]):
        n_eps = int(np.unique(ep[g]).size) if ep is not None else None
        recurs = _occasions(steps[big][g] if steps is not None else None, g.size) >= min_recurrences
        at_end = bool(outcome[g].all())
        if recurs or at_end:
            levels.append({"value": float(np.median(r[big][g])), "min": float(r[big][g].min()),
                           "max": float(r[big][g].max()), "count": int(g.size), "episodes": n_eps,
                           "at_episode_end": at_end})
        else:
            isolated[big[g[~outcome[g]]]] = True
    levels.sort(key=lambda lv: -abs(lv["value"]) * lv["count"])
    return levels, isolated


def reward_stats(rewards: np.ndarray, spike_ratio: float = 10.0, steps: np.ndarray | None = None,
                 episodes: Episodes | None = None, min_recurrences: int = 3) -> dict:
    """The numbers the reward rules read, also written as the module's PASS evidence."""
    r = np.asarray(rewards, dtype=np.float64)
    fin_mask = np.isfinite(r)
    fin = r[fin_mask]
    stats = {"steps": int(r.size), "non_finite": int(r.size - fin.size)}
    if fin.size == 0:
        return stats
    fin_steps = steps[fin_mask] if steps is not None and len(steps) == r.size else None
    mean, std = float(fin.mean()), float(fin.std())
    usual = usual_magnitude(fin)
    mag = np.abs(fin)
    outsized = mag > spike_ratio * usual if usual > 0 else np.zeros(fin.shape, bool)
    total = float(mag.sum())
    levels, isolated = reward_levels(fin, fin_steps, episodes if fin_steps is not None else None, spike_ratio,
                                     min_recurrences)
    stats.update({
        "mean": mean, "std": std, "min": float(fin.min()), "max": float(fin.max()), "median": float(np.median(fin)),
        "cv": std / abs(mean) if mean != 0 else (math.inf if std > 0 else 0.0),
        "nonzero_ratio": float(np.mean(fin != 0)), "max_abs": float(mag.max()),
        "usual_magnitude": usual, "outsized_share": float(outsized.mean()),
        "outsized_mass": float(mag[outsized].sum()) / total if total > 0 else 0.0,
        "levels": levels[:5], "isolated": int(isolated.sum()),
    })
    if isolated.any():
        # the isolated rewards' share of the |reward| of the episodes they fall in (of the whole
        # stream where the episodes are unknown): how much of those returns they make
        if fin_steps is not None and episodes is not None:
            ep = episodes.of(fin_steps)
            within = np.isin(ep, np.unique(ep[isolated]))
        else:
            within = np.ones(fin.shape, bool)
        denom = float(mag[within].sum())
        i_big = int(np.flatnonzero(isolated)[np.argmax(mag[isolated])])
        stats.update({"isolated_mass": float(mag[isolated].sum()) / denom if denom > 0 else 0.0,
                      "isolated_largest": float(fin[i_big]),
                      "isolated_first_step": int(fin_steps[isolated][0]) if fin_steps is not None else None,
                      "isolated_largest_step": int(fin_steps[i_big]) if fin_steps is not None else None,
                      "isolated_episodes": int(np.unique(episodes.of(fin_steps)[isolated]).size)
                      if fin_steps is not None and episodes is not None else None})
    return stats


def reward_findings(rewards: np.ndarray, th: Thresholds, steps: np.ndarray | None = None, *,
                    seen: int | None = None, non_finite: int | None = None,
                    episodes: Episodes | None = None) -> list[Finding]:
    """REWARD_NAN, REWARD_SPARSE (an advisory), REWARD_SPIKES and REWARD_SCALE over per-step
    rewards.

    ``rewards`` may be a uniform sample of a longer run (a :class:`~flow1_ray.checks.series.Series`
    past its byte cap, holding the first non-finite reward): ``seen`` is then the number of
    rewards of the run and ``non_finite`` their exact count of NaN/inf, which REWARD_NAN
    reports; the distribution rules read the sample. ``episodes``: where the episodes of
    ``steps`` ended (REWARD_SPIKES tells the env's levels from isolated values with it).

    REWARD_SPARSE is an advisory, not a WARN: these are random actions, which cannot reach
    most goal rewards, and many good envs are sparse by design (MiniGrid, Atari, any
    reach-the-goal task). It says what the numbers are and what to plan for.

    REWARD_SPIKES is meant to catch "a rare outsized penalty or bonus relative to the usual
    reward scale": one value, out of all proportion, that makes the return of the episode it
    lands in. Three measures make that precise:

    * *outsized*: a reward whose magnitude is more than ``reward_spike_ratio`` (10) times
      the usual magnitude, the median |r| of the **non-zero** rewards (zeros mean nothing
      happened: in Pong or MiniGrid the point or goal reward is the usual one).
    * *isolated*, not a level (:func:`reward_levels`): an env's own outsized values recur
      (a collision penalty, a bonus arm, a coin) or are the outcome an episode ends on (a
      goal, a win): those are the reward's design, however large, and stay silent. A value
      paid on fewer than ``reward_level_min_recurrences`` occasions, mid-episode, is isolated.
    * *dominant*: the isolated rewards carry more than ``reward_spike_mass`` (half) of the
      |reward| of the episodes they fall in, so that those returns (and the value targets
      learnt from them) are the outlier's. One heavy-tailed step in a dense locomotion
      reward carries a few percent of its episode and stays quiet.

    The CV > 0.5 gate of the rule's source is kept. What this replaced: the outsized rewards'
    share of the whole stream, which fired on every designed level (a corridor's goal of 1
    against -0.01 steps, a bandit's arm paying 50, CliffWalking's -100), and before it robust
    z-scores, which fired on Pong and on Hopper's ordinary tail.
    """
    r = np.asarray(rewards, dtype=np.float64)
    out: list[Finding] = []
    if r.size == 0:
        return out
    bad = ~np.isfinite(r)
    if bad.any():
        out.append(_nan_finding(r, bad, steps, seen, non_finite))
    if r.size < th.reward_min_steps:
        return out
    s = reward_stats(r, th.reward_spike_ratio, steps, episodes, th.reward_level_min_recurrences)
    if "mean" not in s:
        return out
    if s["nonzero_ratio"] < th.reward_sparse_ratio:
        out.append(_sparse_advisory(s, th))
    if s["cv"] > th.reward_spike_cv and s.get("isolated_mass", 0.0) > th.reward_spike_mass:
        out.append(_spikes(s, th))
    if 0 < s["max_abs"] < th.reward_scale_min:
        out.append(Finding(C.REWARD_SCALE,
                           f"max |reward| {s['max_abs']:.3g}, expected >= {th.reward_scale_min:g}: "
                           f"rescale the reward (advantages and value targets vanish)",
                           {"max_abs": s["max_abs"], "threshold": th.reward_scale_min}))
    return out



def _nan_finding(r: np.ndarray, bad: np.ndarray, steps: np.ndarray | None, seen: int | None,
                 non_finite: int | None) -> Finding:
    """REWARD_NAN at the first non-finite reward, counting all of them (of the whole run
    where ``seen`` and ``non_finite`` say so)."""
    i = int(np.argmax(bad))
    first = int(steps[i]) if steps is not None else i
    k = int(bad.sum()) if non_finite is None else int(non_finite)
    n = int(r.size) if seen is None else int(seen)
    return Finding(C.REWARD_NAN, f"reward {r[i]} at step {first}: expected finite rewards, actual {k} non-finite of {n}",
                   {"first_step": first, "non_finite": k, "steps_checked": n}, env_step=first, count=k)

def _sparse_advisory(s: dict, th: Thresholds) -> Finding:
    n = s["steps"] - s["non_finite"]
    return advisory(C.REWARD_SPARSE,
                    f"non-zero reward ratio {s['nonzero_ratio']:.4f} under random actions "
                    f"({int(round(s['nonzero_ratio'] * n))} of {n} steps), below {th.reward_sparse_ratio:g}: "
                    f"random actions rarely reach a goal reward, and many good envs are sparse by design; if yours is "
                    f"not meant to be, add a dense shaping term, else plan for exploration",
                    {"nonzero_ratio": s["nonzero_ratio"], "threshold": th.reward_sparse_ratio, "steps": n})


def _spikes(s: dict, th: Thresholds) -> Finding:
    k, eps = s["isolated"], s.get("isolated_episodes")
    where = f" in {eps} episode(s)" if eps is not None else ""
    at = f" at step {s['isolated_largest_step']}" if s.get("isolated_largest_step") is not None else ""
    whose = "of the episodes they fall in" if eps is not None else "of the total"
    levels = s.get("levels") or []
    seen_levels = ("; the env's recurring levels (" + ", ".join(f"{lv['value']:.4g}" for lv in levels[:3])
                   + ") are not counted") if levels else ""
    return Finding(C.REWARD_SPIKES,
                   f"{k} isolated reward(s){where} beyond {th.reward_spike_ratio:g}x the usual magnitude "
                   f"{s['usual_magnitude']:.4g} (median |r| of non-zero rewards; largest {s['isolated_largest']:.4g}"
                   f"{at}), paid on fewer than {th.reward_level_min_recurrences} occasions and not an episode's "
                   f"outcome, carry {s['isolated_mass']:.0%} of the |reward| {whose}: expected <= {th.reward_spike_mass:.0%}; "
                   f"reward CV {s['cv']:.2f} > {th.reward_spike_cv:g}{seen_levels}; check that penalty or bonus "
                   f"for an outsized value",
                   {"usual_magnitude": s["usual_magnitude"], "max_abs": s["max_abs"],
                    "largest": s["isolated_largest"], "largest_step": s.get("isolated_largest_step"),
                    "first_step": s.get("isolated_first_step"), "isolated": k, "isolated_episodes": eps,
                    "ratio_threshold": th.reward_spike_ratio, "isolated_mass": s["isolated_mass"],
                    "mass_threshold": th.reward_spike_mass, "levels": levels[:3],
                    "level_min_recurrences": th.reward_level_min_recurrences,
                    "cv": s["cv"], "cv_threshold": th.reward_spike_cv},
                   env_step=s.get("isolated_first_step"))
