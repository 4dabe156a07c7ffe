"""Whether an advice held: each branch's signal against the baseline's, over seeds.

The verdict's terms are fixed before any branch runs (:func:`signal_for`): the symptom's own
signal (the KL for a KL finding, the entropy at the end for a collapse...), the direction
that means better, the band it must end in, and the return, which says whether a change did
harm. A seed whose signal went NaN or infinite (a KL of a policy that collapsed inside one
update) counts as the worst value, never as a missing one: dropping it would turn the
sickest branch into the healthiest.

The statistic is the exact one-sided Wilcoxon-Mann-Whitney test (a permutation test of the
seeds' ranks, ties averaged) at ``ALPHA``: under a knob that changes nothing, "held" (or
"harmful") is said at most ``ALPHA`` of the time, whatever the signal's distribution, and an
infinite value is just the last rank. With 3 seeds a side that needs all three branch seeds
on the better side of all three baseline seeds (p = 1/20). The 95 % interval shown beside it
is a bootstrap of the difference of the means (seeds resampled within each side); it shows
the size, the test decides. No Ray here.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..checks.learner.learner_curves import CurveThresholds
from ..common import schema as S

#: one-sided error rate of "held" and of "harmful" when the knob changes nothing
ALPHA = 0.05
HELD, NOT_HELD, HARMFUL, INCONCLUSIVE, NOT_IN_EFFECT = (
    S.WHATIF_HELD, S.WHATIF_NOT_HELD, S.WHATIF_HARMFUL, S.WHATIF_INCONCLUSIVE, S.WHATIF_NOT_IN_EFFECT)
#: exact permutations up to this many splits, else this many random ones
EXACT_MAX = 20000


@dataclass(frozen=True)
class Signal:
    """What a branch is judged on: ``stats`` (the learner's result names, first present wins)
    reduced over the branch's iterations by ``reduce`` ("median", "mean", "last", "slope":
    least squares per iteration), ``better`` +1 (higher is better) or -1, and the band (lo, hi) the
    branch's median must end in for "held" (None: no band)."""

    name: str
    stats: tuple[str, ...]
    reduce: str
    better: int
    band: tuple[float | None, float | None] | None = None
    scale_by_max_entropy: bool = False   # the entropy as a share of its maximum
    nonfinite_is_worst: bool = True      # False: a NaN is "not measured" (a return with no episode)

    def worst(self) -> float | None:
        return (-math.inf if self.better > 0 else math.inf) if self.nonfinite_is_worst else None

    def describe(self) -> str:
        way = "higher" if self.better > 0 else "lower"
        band = ""
        if self.band is not None:
            lo, hi = self.band
            band = (f", ending in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else
                    f", ending >= {lo:g}" if lo is not None else f", ending <= {hi:g}")
        return f"{self.name} ({self.reduce} over the branch's iterations), {way} is better{band}"

    def in_band(self, value: float) -> bool:
        if self.band is None:
            return True
        lo, hi = self.band
        return (lo is None or value >= lo) and (hi is None or value <= hi)


_TH = CurveThresholds()
RETURN = Signal("episode return", ("episode_return_mean",), "last", +1, nonfinite_is_worst=False)
#: a spike or a high KL: the KL averaged over the branch's iterations (a mean, so that one
#: spiking iteration counts), ending inside PPO's usual band
_KL_DOWN = Signal("KL", ("mean_kl_loss",), "mean", -1, (None, _TH.kl_high))
_KL_UP = Signal("KL", ("mean_kl_loss",), "median", +1, (_TH.kl_low, None))
SIGNALS: dict[str, Signal] = {
    "KL_SPIKE": _KL_DOWN,
    "KL_TOO_HIGH": _KL_DOWN,
    "KL_TOO_LOW": _KL_UP,
    "POLICY_LOSS_STUCK": _KL_UP,
    # the collapse stopped: the entropy at the branch's end, as a share of its maximum, above
    # the rule's collapse ratio (a slope would call a policy that collapsed in the branch's
    # first iteration and stayed there "not falling")
    "ENTROPY_COLLAPSE": Signal("entropy / its maximum", ("entropy",), "last", +1,
                               (_TH.entropy_collapse_ratio, None), scale_by_max_entropy=True),
    "VALUE_NOT_LEARNING": Signal("vf_explained_var", ("vf_explained_var",), "median", +1,
                                 (_TH.value_ev_max, None)),
}


def signal_for(code: str | None) -> Signal:
    """The symptom's own signal; the return for a finding without one and for ``--set``."""
    return SIGNALS.get(code or "", RETURN)


def reduce_series(values: Sequence[float | None], how: str, worst: float | None = None) -> float | None:
    """One number per seed from its iterations' values: None (not measured) dropped; NaN and
    infinities become ``worst`` (None: dropped too)."""
    v = []
    for x in values:
        if x is None:
            continue
        x = float(x)
        if not math.isfinite(x):
            if worst is None:
                continue
            x = worst
        v.append(x)
    if not v:
        return None
    if how == "slope" and not all(math.isfinite(x) for x in v):
        return worst   # a slope through the worst value is the worst slope
    if how == "median":
        return float(statistics.median(v))
    if how == "mean":
        return float(statistics.fmean(v))
    if how == "last":
        return v[-1]
    if how == "slope":
        if len(v) < 2:
            return None
        x = np.arange(len(v), dtype=np.float64)
        return float(np.polyfit(x, np.asarray(v), 1)[0])
    raise ValueError(f"unknown reduction {how!r}")


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties averaged (infinities rank last or first, as they are)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def permutation_p(base: Sequence[float], branch: Sequence[float], better: int, seed: int = 0) -> float:
    """One-sided p of the branch's ranks lying as far the ``better`` way as observed when the
    labels do not matter (exact Wilcoxon-Mann-Whitney): every split up to ``EXACT_MAX`` of
    them, else that many random ones."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(branch, dtype=np.float64)
    pooled, n = np.concatenate([a, b]), len(b)
    r = _ranks(better * pooled)
    observed = r[len(a):].sum()
    total = math.comb(len(pooled), n)
    if total <= EXACT_MAX:
        splits = (list(c) for c in itertools.combinations(range(len(pooled)), n))
    else:
        rng = np.random.default_rng(seed)
        splits = (rng.choice(len(pooled), n, replace=False) for _ in range(EXACT_MAX))
    hits = count = 0
    for idx in splits:
        hits += r[idx].sum() >= observed - 1e-9
        count += 1
    return hits / count


def bootstrap_ci(base: Sequence[float], branch: Sequence[float], reps: int = 5000,
                 seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of mean(branch) - mean(base), seeds resampled within each
    side; NaN where a value is infinite (a mean with the worst value has no size)."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(branch, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), (reps, len(a)))].mean(axis=1)
    db = b[rng.integers(0, len(b), (reps, len(b)))].mean(axis=1)
    lo, hi = np.percentile(db - da, [2.5, 97.5])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Comparison:
    """One signal of a branch against the baseline's."""

    signal: Signal
    base: tuple[float, ...]
    branch: tuple[float, ...]
    diff: float
    ci: tuple[float, float]
    p_better: float
    p_worse: float

    def as_dict(self) -> dict:
        return {"signal": self.signal.name, "reduce": self.signal.reduce, "better": self.signal.better,
                "baseline": [_j(x) for x in self.base], "branch": [_j(x) for x in self.branch],
                "difference": _j(self.diff), "ci95": [_j(x) for x in self.ci], "p_better": self.p_better,
                "p_worse": self.p_worse}


def compare(signal: Signal, base: Sequence[float], branch: Sequence[float]) -> Comparison | None:
    """None when either side has fewer than 2 seeds with a value (nothing to test)."""
    a = tuple(float(x) for x in base if x is not None)
    b = tuple(float(x) for x in branch if x is not None)
    if len(a) < 2 or len(b) < 2:
        return None
    with np.errstate(invalid="ignore"):
        diff = float(np.mean(b) - np.mean(a))
    return Comparison(signal, a, b, diff, bootstrap_ci(a, b),
                      permutation_p(a, b, signal.better), permutation_p(a, b, -signal.better))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    why: str
    symptom: Comparison | None
    ret: Comparison | None

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "why": self.why,
                "symptom": self.symptom.as_dict() if self.symptom else None,
                "return": self.ret.as_dict() if self.ret else None}


def judge(signal: Signal, symptom: Comparison | None, guards: list[Comparison], alpha: float = ALPHA) -> Verdict:
    """harmful: any of ``guards`` (the return, and the signals of the run's other symptoms
    this branch is judged on: a lr so high that the policy collapses at once also "cures" a
    KL spike, its KL falls to 0) or the symptom's own signal worse at p <= alpha; held: the
    signal better at p <= alpha and, where it has a band, the branch's median inside it;
    did not hold: no move the advised way, or a gain that stays outside the band;
    inconclusive: the rest (a gain too small for these seeds to show)."""
    ret = next((g for g in guards if g.signal.name == RETURN.name), None)
    for g in [symptom] + [g for g in guards if g is not symptom]:
        if g is not None and g.p_worse <= alpha:
            what = "the return fell" if g.signal.name == RETURN.name else (
                "the symptom grew worse" if g is symptom else f"{g.signal.name} grew worse")
            return Verdict(HARMFUL, f"{what}: " + _text(g, g.p_worse, "p worse"), symptom, ret)
    if symptom is None:
        return Verdict(INCONCLUSIVE, f"{signal.name}: fewer than 2 seeds with a value on a side", symptom, ret)
    ret_txt = "" if ret is None or symptom.signal.name == RETURN.name else (
        f"; return {_n(statistics.median(ret.base))} -> {_n(statistics.median(ret.branch))} "
        f"(p worse {ret.p_worse:.3g})")
    text = _text(symptom, symptom.p_better) + ret_txt
    banded = signal.in_band(statistics.median(symptom.branch))
    if symptom.p_better <= alpha and banded:
        return Verdict(HELD, text, symptom, ret)
    if symptom.p_better <= alpha:
        return Verdict(NOT_HELD, f"better but still outside its band ({signal.describe()}): " + text, symptom, ret)
    if signal.better * symptom.diff <= 0:
        return Verdict(NOT_HELD, "no move the advised way: " + text, symptom, ret)
    return Verdict(INCONCLUSIVE, f"a gain these seeds cannot tell from chance at p <= {alpha:g}: " + text,
                   symptom, ret)


def _text(c: Comparison, p: float, label: str = "p") -> str:
    """``KL 3.1 -> 0.012 (difference of means -3.09, 95 % CI -4 to -2.2; one-sided rank test p 0.05)``"""
    size = (f"difference of means {_n(c.diff)}, 95 % CI {_n(c.ci[0])} to {_n(c.ci[1])}" if math.isfinite(c.ci[0])
            else "a seed's value NaN or infinite, counted as the worst")
    return (f"{c.signal.name} {_n(statistics.median(c.base))} -> {_n(statistics.median(c.branch))} "
            f"({size}; one-sided rank test {label} {p:.3g})")


def _j(x: float) -> float | str:
    """A number for JSON: non-finite ones as text ("inf", "nan")."""
    return x if math.isfinite(x) else str(x)


def _n(x: float) -> str:
    return f"{x:.3g}"
