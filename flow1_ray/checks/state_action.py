"""STATE_ACTION verdicts: what P(action | state cluster) says about where the agent is lost.

Seed 001, section 3.2: a cluster whose actions are near-uniform is CHAOS (nothing learnt
there); one where no action reaches 0.3 is a BLIND_SPOT; one action above 0.95 is FIXATED,
and ERROR_FIXATION only when that cluster's states also lead to termination (failure)
clearly more often than the run's average -- a trained policy is confident almost
everywhere, so confidence alone raises nothing. A cluster holding < 0.01 % of the visited
states is a RARE_STATE: too few visits to judge the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

from .. import codes as C

OK, FIXATED = "OK", "FIXATED"
VERDICTS = (OK, FIXATED, C.BLIND_SPOT, C.CHAOS, C.ERROR_FIXATION, C.RARE_STATE)


@dataclass(frozen=True)
class StateActionThresholds:
    chaos_entropy: float = 0.95       # normalised entropy of P(a|c) at or above = CHAOS
    blind_spot_max: float = 0.3       # every action below = BLIND_SPOT
    fixation_min: float = 0.95        # one action above = FIXATED (or ERROR_FIXATION)
    failure_ratio: float = 2.0        # cluster failure rate >= 2x the run's ...
    failure_p_value: float = 0.01     # ... and a binomial test says so
    rare_share: float = 1e-4          # < 0.01 % of visited states = RARE_STATE
    min_visits: int = 20              # fewer visits: not judged (verdict OK)


def normalized_entropy(p: np.ndarray) -> np.ndarray:
    """Entropy of each row of P divided by log(n_actions) (1 = uniform)."""
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[1]
    if n < 2:
        return np.zeros(p.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return h / np.log(n)


def verdicts(counts: np.ndarray, failures: np.ndarray | None = None,
             th: StateActionThresholds = StateActionThresholds()) -> list[str]:
    """One verdict per cluster from action counts (clusters x actions) and, optionally,
    the number of visits per cluster whose step ended the episode by termination."""
    counts = np.asarray(counts, dtype=np.float64)
    visits = counts.sum(1)
    total = visits.sum()
    probs = counts / np.maximum(visits, 1.0)[:, None]
    ent = normalized_entropy(probs)
    base_rate = float(np.sum(failures) / total) if failures is not None and total > 0 else None
    out = []
    for i in range(counts.shape[0]):
        if total > 0 and visits[i] / total < th.rare_share:
            out.append(C.RARE_STATE)
        elif visits[i] < th.min_visits:
            out.append(OK)
        elif counts.shape[1] >= 2 and ent[i] >= th.chaos_entropy:
            out.append(C.CHAOS)
        elif probs[i].max() < th.blind_spot_max:
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
