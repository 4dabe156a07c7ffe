"""REWARD_SPIKES of another kind: a recurring reward level that nothing the agent sees or
does predicts.

:func:`~flow1_ray.checks.env.reward.reward_levels` reads an outsized value the env pays again
and again as the env's design (a collision penalty, a bonus arm, a coin): levels stay silent.
A level the env pays at random -- on a fifth of the steps, whatever the state and the action
-- recurs too, and when it carries most of the return, the returns are noise to the policy:
nothing it sees or does changes them, and the rest of the reward drowns in that noise. So a
recurring level paid mid-episode on at least ``reward_level_min_pays`` steps and carrying
more than ``reward_spike_mass`` of the |reward| is asked whether the step predicts it: each
step's k nearest neighbours in (observation, action, next observation), standardised, vote
on whether the level was paid there (leave-one-out), and the votes' ROC AUC is compared with
chance (0.5). A designed level follows from the state and the action (the goal cell, the
arm, the collision), so its neighbours agree and the AUC is high; a random one stays at 0.5
(its standard error ~0.012 at 800 of 4,096 steps paid: ``reward_level_max_auc`` 0.6 is 8
standard errors away). Below ``reward_level_max_auc`` it is named, with what it carries.

``flow1 check`` only (the steps :class:`~flow1_ray.checks.env.temporal_leak.LeakageWatch`
keeps: vector observations of at most 128 numbers); an image observation's level (a Pong
point) is not judged, and a level shown in the next observation (an event the agent sees)
counts as predicted. No Ray.
"""

from __future__ import annotations

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..thresholds import Thresholds
from .reward import _groups, usual_magnitude

#: neighbours that vote on each step
K_NEIGHBOURS = 10
#: rows of the distance matrix computed at once (512 x 4,096 floats: 16 MB)
CHUNK = 512


def random_level_findings(rows: list, th: Thresholds) -> tuple[list[Finding], str | None]:
    """(REWARD_SPIKES findings, a note on what was judged or None when there was nothing to
    judge) over ``rows`` of ``(episode, obs, action, reward, next_obs)``, flat float arrays."""
    if len(rows) < th.reward_min_steps:
        return [], None
    ep = np.array([x[0] for x in rows])
    r = np.array([x[3] for x in rows], dtype=np.float64)
    usual = usual_magnitude(r)
    if usual <= 0:
        return [], None
    big = np.flatnonzero(np.abs(r) > th.reward_spike_ratio * usual)
    last = np.r_[ep[1:] != ep[:-1], True]          # an episode's last step here: its outcome
    total = float(np.abs(r).sum())
    cands = []
    for g in _groups(r[big]):
        idx = big[g][~last[big[g]]]
        mass = float(np.abs(r[idx]).sum()) / total if total > 0 else 0.0
        if idx.size >= th.reward_level_min_pays and mass > th.reward_spike_mass:
            cands.append((idx, mass))
    if not cands:
        return [], None
    x = _features(rows)
    out, judged = [], []
    for idx, mass in cands:
        paid = np.zeros(len(r), bool)
        paid[idx] = True
        auc = knn_auc(x, paid)
        judged.append(f"{float(np.median(r[idx])):.4g} (AUC {auc:.2f})")
        if auc < th.reward_level_max_auc:
            out.append(_finding(r, idx, mass, auc, usual, th))
    return out, (f"reward levels carrying > {th.reward_spike_mass:.0%} of the |reward|, asked whether the step "
                 f"predicts them: " + ", ".join(judged))


def _features(rows: list) -> np.ndarray:
    """(observation, action, next observation) per step, standardised, constant columns out."""
    x = np.array([np.concatenate([np.ravel(o), np.ravel(a), np.ravel(n)]) for _, o, a, _, n in rows],
                 dtype=np.float64)
    sd = x.std(0)
    keep = sd > 1e-9 * (1.0 + np.abs(x).max(0))
    return (x[:, keep] - x[:, keep].mean(0)) / sd[keep] if keep.any() else np.zeros((len(x), 1))


def knn_auc(x: np.ndarray, y: np.ndarray, k: int = K_NEIGHBOURS) -> float:
    """ROC AUC of each row's leave-one-out k-nearest-neighbour vote for ``y``: 0.5 when
    ``x`` says nothing of ``y``, 1 when its neighbours always agree."""
    n = len(x)
    k = min(k, n - 1)
    sq = (x * x).sum(1)
    votes = np.empty(n)
    yf = y.astype(np.float64)
    for s in range(0, n, CHUNK):
        d = sq[s:s + CHUNK, None] - 2.0 * x[s:s + CHUNK] @ x.T + sq[None, :]
        d[np.arange(len(d)), np.arange(s, s + len(d))] = np.inf      # not its own neighbour
        nn = np.argpartition(d, k, axis=1)[:, :k]
        votes[s:s + CHUNK] = yf[nn].mean(1)
    return _auc(votes, y)


def _auc(score: np.ndarray, y: np.ndarray) -> float:
    """Mann-Whitney's AUC with tied scores given their average rank."""
    uniq, inv, counts = np.unique(score, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inv]
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return 0.5
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def _finding(r: np.ndarray, idx: np.ndarray, mass: float, auc: float, usual: float, th: Thresholds) -> Finding:
    value = float(np.median(r[idx]))
    return Finding(C.REWARD_SPIKES, (
        f"a reward level of {value:.4g} (beyond {th.reward_spike_ratio:g}x the usual magnitude {usual:.4g}) paid on "
        f"{idx.size} of {r.size} steps ({idx.size / r.size:.0%}) carries {mass:.0%} of the |reward|, and nothing the "
        f"step shows predicts it: the observation, the action and the next observation vote on it no better than "
        f"chance (nearest-neighbour AUC {auc:.2f}, expected >= {th.reward_level_max_auc:g} for a level the env pays "
        f"for a state or an action); the policy cannot earn it and its noise drowns the rest of the reward: check "
        f"what pays it (a random bonus, a reward read from the wrong step or the wrong env)"),
        {"kind": "unpredictable_level", "value": value, "paid_steps": int(idx.size), "steps": int(r.size),
         "mass": mass, "auc": auc, "auc_threshold": th.reward_level_max_auc, "usual_magnitude": usual,
         "first_step": int(idx[0])})
