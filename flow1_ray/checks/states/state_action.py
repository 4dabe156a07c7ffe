"""STATE_ACTION verdicts: what P(action | state cluster) says about where the agent is lost.

A cluster whose actions are near-uniform is CHAOS (nothing learnt
there); one where no action reaches 0.3 is a BLIND_SPOT; one action above 0.95 is FIXATED,
and ERROR_FIXATION only when that cluster's states also lead to termination (failure)
clearly more often than the run's average -- a trained policy is confident almost
everywhere, so confidence alone raises nothing. A cluster holding < 0.01 % of the visited
states is a RARE_STATE: too few visits to judge the rest.

Between snapshots of a live run, trends: LOST_STATES_GROWING (the share of states in
CHAOS/BLIND_SPOT clusters keeps rising) and NEW_FIXATION (clusters became fixated while
the return did not improve: confidence that did not pay). Clusters are matched across
snapshots by their centroids, since a refit renumbers them.

A verdict is a fact about the sampled actions; a WARN is a claim about the run, so a live
snapshot's verdicts become WARNs only under :func:`warn_codes`: early in training a
stochastic policy is undecided everywhere (expected, not a finding), an epsilon-greedy one
acts at random by design, and a few boundary clusters holding 3 % of the states of a run
that reached its maximum return are no reason to act. CHAOS / BLIND_SPOT / ERROR_FIXATION
are WARNs only when their clusters hold a material share of the visited states
(``state_warn_share``) at each of the last ``state_warn_snapshots`` snapshots -- and, for
CHAOS / BLIND_SPOT, only while the policy is decided (top probability >=
``decided_top_p``) on at least ``decided_min_share`` of the states elsewhere: being lost is
a claim about *some* states, which needs a policy that learnt others. Otherwise the
verdict stays in ``clusters/`` and the heatmap and its event is PASS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...common import codes as C
from ...common import schema as S
from ..findings import Finding
from ..rule import Rule

OK, FIXATED = S.VERDICT_OK, S.VERDICT_FIXATED


@dataclass(frozen=True)
class StateActionThresholds:
    """STATE_ACTION: verdicts per state cluster, then trends between snapshots."""

    chaos_entropy: float = 0.95       # normalised entropy of P(a|c) at or above = CHAOS
    blind_spot_max: float = 0.3       # every action below = BLIND_SPOT
    fixation_min: float = 0.95        # one action above = FIXATED (or ERROR_FIXATION)
    failure_ratio: float = 2.0        # cluster failure rate >= 2x the run's ...
    failure_p_value: float = 0.01     # ... and a binomial test says so
    rare_share: float = 1e-4          # < 0.01 % of visited states = RARE_STATE
    min_visits: int = 20              # fewer visits: not judged (verdict OK)
    lost_rise: float = 0.1            # LOST_STATES_GROWING: share of states in CHAOS/BLIND_SPOT up by this ...
    lost_rise_snapshots: int = 3      # ... and rising at each of this many consecutive snapshots
    new_fixation_share: float = 0.05  # NEW_FIXATION: clusters newly fixated hold this share of states ...
    new_fixation_return_gain: float = 0.05  # ... while the episode return rose less than this (relative)
    new_fixation_warn_drop: float = 0.3     # NEW_FIXATION is a WARN only when the return also fell by this share
    state_warn_share: float = 0.1     # a verdict's clusters must hold this share of the states ...
    state_warn_snapshots: int = 2     # ... at each of this many consecutive snapshots to be a WARN
    decided_top_p: float = 0.8        # a cluster where the policy's top probability is at least this is decided
    decided_min_share: float = 0.2    # CHAOS/BLIND_SPOT WARN only while decided clusters hold this share


RULES = (
    Rule("CHAOS", C.STATE_ACTION, C.WARN,
         "near-uniform P(action | cluster): normalised entropy >= {chaos_entropy:g}", StateActionThresholds),
    Rule("BLIND_SPOT", C.STATE_ACTION, C.WARN, "every action probability < {blind_spot_max:g} in a cluster",
         StateActionThresholds),
    Rule("ERROR_FIXATION", C.STATE_ACTION, C.WARN,
         "one action > {fixation_min:g} in a cluster whose states lead to failure >= {failure_ratio:g}x as often as "
         "the run's (one-sided binomial p <= {failure_p_value:g})", StateActionThresholds),
    Rule("RARE_STATE", C.STATE_ACTION, C.WARN, "cluster holds < {rare_share:.2%} of visited states",
         StateActionThresholds),
    Rule("STATE_SNAPSHOT", C.STATE_ACTION, C.PASS,
         "a state-cluster x action snapshot was taken (verdict counts, heatmap path)"),
    Rule("STATE_MAPS_OFF", C.STATE_ACTION, C.PASS,
         "state-action maps are off for an RLModule whose spaces they cannot take (said once)"),
    Rule("LOST_STATES_GROWING", C.STATE_ACTION, C.WARN,
         "share of visited states in CHAOS/BLIND_SPOT clusters rose at each of the last {lost_rise_snapshots} "
         "snapshots, by >= {lost_rise:g} in all", StateActionThresholds),
    Rule("NEW_FIXATION", C.STATE_ACTION, C.WARN,
         "clusters holding >= {new_fixation_share:.0%} of states became fixated (one action > {fixation_min:g}) "
         "since the last snapshot while the episode return rose < {new_fixation_return_gain:.0%}",
         StateActionThresholds),
)


def normalized_entropy(p: np.ndarray) -> np.ndarray:
    """Entropy of each row of P divided by log(n_actions) (1 = uniform)."""
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[1]
    if n < 2:
        return np.zeros(p.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return h / np.log(n)


def cluster_means(labels: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Per-cluster mean of each column of ``values`` over its rows that are not NaN (NaN
    for a cluster with none)."""
    values = np.asarray(values, np.float64).reshape(len(labels), -1)
    out = np.full((k, values.shape[1]), np.nan)
    for j in range(values.shape[1]):
        ok = ~np.isnan(values[:, j])
        n = np.bincount(labels[ok], minlength=k)
        s = np.bincount(labels[ok], weights=values[ok, j], minlength=k)
        out[n > 0, j] = s[n > 0] / n[n > 0]
    return out


def verdicts(counts: np.ndarray, failures: np.ndarray | None = None,
             th: StateActionThresholds = StateActionThresholds(), *, share: np.ndarray | None = None,
             policy: np.ndarray | None = None) -> list[str]:
    """One verdict per cluster from action counts (clusters x actions) and, optionally,
    the number of visits per cluster whose step ended the episode by termination.

    ``share`` (per cluster) is its share of all the states visited so far, for RARE_STATE
    (default: its share of ``counts``). ``policy`` (clusters x 2: mean normalised entropy and
    mean top probability of the policy at the cluster's states, NaN where unknown) keeps a
    cluster whose states straddle a decision boundary -- a confident policy choosing
    differently on either side, near-uniform counts -- from reading as CHAOS or BLIND_SPOT:
    those need the policy itself to be undecided where it is known."""
    counts = np.asarray(counts, dtype=np.float64)
    visits = counts.sum(1)
    total = visits.sum()
    probs = counts / np.maximum(visits, 1.0)[:, None]
    ent = normalized_entropy(probs)
    if share is None:
        share = visits / total if total > 0 else np.ones_like(visits)
    pol = np.full((counts.shape[0], 2), np.nan) if policy is None else np.asarray(policy, np.float64)
    base_rate = float(np.sum(failures) / total) if failures is not None and total > 0 else None
    # imported here: every EnvRunner imports this module (through the state sampler's
    # featurising) but only the clusterer judges; scipy.stats is ~54 MB and ~0.5 s a process
    from scipy.stats import binomtest

    out = []
    for i in range(counts.shape[0]):
        p_ent, p_top = pol[i]
        if share[i] < th.rare_share:
            out.append(C.RARE_STATE)
        elif visits[i] < th.min_visits:
            out.append(OK)
        elif counts.shape[1] >= 2 and ent[i] >= th.chaos_entropy and not p_ent < th.chaos_entropy:
            out.append(C.CHAOS)
        elif probs[i].max() < th.blind_spot_max and not p_top >= th.blind_spot_max:
            out.append(C.BLIND_SPOT)
        elif probs[i].max() > th.fixation_min:
            fails = int(failures[i]) if failures is not None else 0
            if (base_rate is not None and 0 < base_rate < 1 and fails / visits[i] >= th.failure_ratio * base_rate
                    and binomtest(fails, int(visits[i]), base_rate, alternative="greater").pvalue
                    <= th.failure_p_value):
                out.append(C.ERROR_FIXATION)
            else:
                out.append(FIXATED)
        else:
            out.append(OK)
    return out


# --- trends between snapshots ------------------------------------------------------------

LOST_VERDICTS = (C.CHAOS, C.BLIND_SPOT)
FIXED_VERDICTS = (FIXATED, C.ERROR_FIXATION)


def decided_share(counts: np.ndarray, policy: np.ndarray | None, th: StateActionThresholds) -> float:
    """Share of the visited states in clusters where the policy is decided: its mean top
    probability there (or, where the policy's own probabilities are unknown, the top share
    of the sampled actions) is at least ``decided_top_p``."""
    counts = np.asarray(counts, np.float64)
    visits = counts.sum(1)
    total = visits.sum()
    if total <= 0:
        return 0.0
    top = counts.max(1) / np.maximum(visits, 1.0)
    if policy is not None:
        known = ~np.isnan(np.asarray(policy, np.float64)[:, 1])
        top = np.where(known, np.asarray(policy, np.float64)[:, 1], top)
    return float(visits[top >= th.decided_top_p].sum() / total)


@dataclass
class Snapshot:
    """What a trend needs of one snapshot. ``centroids`` are in raw feature units, so that
    clusters can be matched across refits (which re-standardise). ``decided`` is the share
    of the states where the policy is decided (:func:`decided_share`)."""

    index: int
    iteration: int
    centroids: np.ndarray
    visits: np.ndarray
    verdicts: list[str]
    return_mean: float | None = None
    decided: float = 1.0
    labels: list[str] | None = None     # each cluster's short description (clustering/describe.py)

    def about(self, i: int) -> str:
        """``3 (obs[1] +1.8 (+2.1sd))``: a cluster as a finding names it."""
        return f"{i} ({self.labels[i]})" if self.labels and i < len(self.labels) else str(i)

    def share_of(self, codes: tuple[str, ...]) -> float:
        """Share of the visited states that fall in clusters with one of these verdicts."""
        total = float(self.visits.sum())
        hit = sum(float(v) for v, d in zip(self.visits, self.verdicts) if d in codes)
        return hit / total if total else 0.0

    @property
    def lost_share(self) -> float:
        """Share of the visited states that fall in CHAOS or BLIND_SPOT clusters."""
        return self.share_of(LOST_VERDICTS)


def warn_codes(history: list[Snapshot], th: StateActionThresholds = StateActionThresholds()) -> set[str]:
    """The per-snapshot codes of the latest snapshot that are WARNs (see the module's
    docstring); every other verdict's event is PASS."""
    n = max(1, th.state_warn_snapshots)
    if len(history) < n:
        return set()
    recent, out = history[-n:], set()
    if all(s.lost_share >= th.state_warn_share and s.decided >= th.decided_min_share for s in recent):
        out |= set(LOST_VERDICTS) & set(history[-1].verdicts)
    if all(s.share_of((C.ERROR_FIXATION,)) >= th.state_warn_share for s in recent):
        out.add(C.ERROR_FIXATION)
    return out


def match_clusters(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """For each current centroid, the index of its previous counterpart (-1 if none): a
    one-to-one assignment minimising the total squared distance (cluster ids are not stable
    across a refit; between refits this is the identity)."""
    from scipy.optimize import linear_sum_assignment

    d = ((cur[:, None, :] - prev[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(d)
    out = np.full(len(cur), -1, dtype=np.int64)
    out[rows] = cols
    return out


def trend_findings(history: list[Snapshot], th: StateActionThresholds = StateActionThresholds(),
                   scale: np.ndarray | float = 1.0, learnt_confidence: bool = True) -> list[Finding]:
    """LOST_STATES_GROWING and NEW_FIXATION from the latest snapshots (oldest first).
    ``scale`` (per feature) puts the raw centroids in comparable units for the matching,
    so that one large-valued feature does not decide it. ``learnt_confidence=False`` (an
    epsilon-greedy policy: its greedy action is taken with 1 - epsilon + epsilon/n wherever
    the argmax is constant, by design) leaves NEW_FIXATION out: premature convergence is a
    policy's probabilities collapsing, which such a policy does not have."""
    out: list[Finding] = []
    if len(history) < 2:
        return out
    cur, prev = history[-1], history[-2]
    n = th.lost_rise_snapshots
    if len(history) >= n + 1:
        shares = [s.lost_share for s in history[-(n + 1):]]
        rising = all(b > a for a, b in zip(shares, shares[1:]))
        if rising and shares[-1] - shares[0] >= th.lost_rise and cur.decided >= th.decided_min_share:
            out.append(Finding(C.LOST_STATES_GROWING, (
                f"share of visited states in CHAOS/BLIND_SPOT clusters rose at each of the last {n} snapshots: "
                + " -> ".join(f"{s:.0%}" for s in shares) + f" (iterations {history[-(n + 1)].iteration}.."
                f"{cur.iteration}); expected it to fall as the policy learns: the agent is getting lost in more "
                f"of its states (forgetting, or a collapsing value estimate)"),
                {"lost_shares": [round(s, 4) for s in shares], "iterations": [s.iteration for s in history[-(n + 1):]],
                 "threshold_rise": th.lost_rise}))
    if prev.centroids.shape[1:] != cur.centroids.shape[1:]:
        return out
    match = match_clusters(prev.centroids / scale, cur.centroids / scale)
    total = float(cur.visits.sum()) or 1.0
    new = [i for i, j in enumerate(match) if cur.verdicts[i] in FIXED_VERDICTS
           and (j < 0 or prev.verdicts[j] not in FIXED_VERDICTS)]
    share = float(sum(cur.visits[i] for i in new)) / total
    r0, r1 = prev.return_mean, cur.return_mean
    if learnt_confidence and new and share >= th.new_fixation_share and r0 is not None and r1 is not None \
            and math.isfinite(r0) and math.isfinite(r1):
        gain = (r1 - r0) / max(abs(r0), 1e-8)
        if gain < th.new_fixation_return_gain:
            # confidence without a gain is also what a converged policy at its best looks
            # like: a claim (WARN) needs the second signal of a return that fell as well
            fell = gain <= -th.new_fixation_warn_drop
            out.append(Finding(C.NEW_FIXATION, (
                f"{len(new)} cluster(s) holding {share:.0%} of the visited states became fixated (one action > "
                f"{th.fixation_min:g}; {'; '.join(cur.about(i) for i in new[:3])}"
                + (f"; {len(new) - 3} more" if len(new) > 3 else "") + ") "
                f"between iterations {prev.iteration} and {cur.iteration}, while the episode "
                f"return went {r0:.4g} -> {r1:.4g} ({gain:+.1%}, expected >= {th.new_fixation_return_gain:+.0%}): "
                + ("the policy grew confident and the return fell -- premature convergence; try more "
                   "exploration (a larger entropy_coeff, e.g. 0.01, for PPO/APPO/IMPALA)" if fell else
                   f"informational: a converged policy looks the same; a WARN needs the return to fall by "
                   f">= {th.new_fixation_warn_drop:.0%} too")),
                {"clusters": new, "described": {str(i): cur.labels[i] for i in new[:10]} if cur.labels else None,
                 "share": round(share, 4), "return_before": r0, "return_after": r1,
                 "return_gain": round(gain, 4), "iterations": [prev.iteration, cur.iteration],
                 "threshold_share": th.new_fixation_share, "threshold_gain": th.new_fixation_return_gain,
                 "threshold_warn_drop": th.new_fixation_warn_drop},
                status="" if fell else C.PASS))
    return out
