"""OBS_FLOW checks: are the observation values fit for the model?

They run on one leaf's observations stacked on axis 0 (a flushed buffer of ``flow1 check``
or a numpy'ized RLlib episode chunk), so each costs a few vectorised numpy passes per
batch rather than Python work per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from ..findings import Finding, advisory
from ..rule import Rule
from ..spaces import Leaf, bounds_violation, flat_bounds
from ..thresholds import Thresholds


@dataclass(frozen=True)
class ObsFlowThresholds:
    """OBS_FLOW: float32 precision, reset-observation drift, what counts as an image."""

    precision_rel_error: float = 1e-5        # per value, float64 -> float32 -> float64
    precision_delta_rel_error: float = 0.1   # share of the step-to-step change lost in float32
    drift_kl: float = 0.5                    # KL(recent || early) of reset-observation histograms
    drift_p_value: float = 0.0005            # permutation test, Bonferroni over dimensions: 1 check in 2,000 of iid resets flagged
    drift_min_episodes: int = 16             # per half
    drift_bins: int = 5
    drift_permutations: int = 2000
    image_min_side: int = 8
    obs_scale_max: float = 100.0             # a vector field's RMS beyond this reaches the model far from unit scale


RULES = (
    Rule("OBS_OUT_OF_BOUNDS", C.OBS_FLOW, C.WARN,
         "observation outside its space's bounds, or rejected by its space's contains()"),
    Rule("OBS_NAN_INF", C.OBS_FLOW, C.FAIL, "NaN or inf in an observation"),
    Rule("OBS_UNNORMALIZED_IMAGE", C.OBS_FLOW, C.PASS,
         "advisory: uint8 image observations (sides >= {image_min_side}) in [0, 255] reach the model unscaled",
         ObsFlowThresholds),
    Rule("OBS_UNSCALED", C.OBS_FLOW, C.PASS,
         "advisory: a vector observation field's RMS > {obs_scale_max:g} reaches the model far from unit scale, "
         "and (live) no normalising connector (MeanStdFilter) is in the runner's env-to-module pipeline",
         ObsFlowThresholds, evidence=("path", "fields", "rms_max", "threshold", "pipeline")),
    Rule("PRECISION_LOSS", C.OBS_FLOW, C.WARN,
         "float64 -> float32 round trip loses more than {precision_rel_error:g} relative error per value, or "
         "more than {precision_delta_rel_error:.0%} of the step-to-step change", ObsFlowThresholds),
    Rule("OBS_DISTRIBUTION_DRIFT", C.OBS_FLOW, C.WARN,
         "KL between early and recent reset-observation histograms ({drift_bins} bins) > {drift_kl:g} and a "
         "permutation test p <= {drift_p_value:g} (Bonferroni over dimensions; >= {drift_min_episodes} episodes "
         "per half)", ObsFlowThresholds),
)

#: the reset-drift test's permutations at most, and the cells of one chunk of them (float32)
DRIFT_MAX_PERMUTATIONS = 100_000
DRIFT_CHUNK_CELLS = 2_000_000
#: Leaves larger than this enter the reset-drift test as (mean, std), not value by value.
DRIFT_MAX_DIMS_PER_LEAF = 64


def _first(steps: np.ndarray, rows: np.ndarray) -> int:
    return int(steps[int(np.argmax(rows))])


def _clean(leaf: Leaf, batch: np.ndarray) -> bool:
    """Whether every value is finite and inside the leaf's bounds, from each column's min and
    max (two passes, no batch-sized temporaries; a NaN or inf carries into them). A window of
    200 64x64x4 float frames: ~2 ms instead of ~10 for the row-by-row masks, which now run
    only on a window that holds a fault, to say which rows."""
    x = batch.reshape(batch.shape[0], -1)
    if x.shape[1] == 0 or x.dtype.kind not in "fiub":
        return False
    lo, hi = x.min(axis=0), x.max(axis=0)
    if x.dtype.kind == "f" and not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return False
    if leaf.low is None:
        return True
    low, high = flat_bounds(leaf)
    if low.shape[0] != lo.shape[0]:
        return False
    return bool((lo >= low).all() and (hi <= high).all())


def check_obs_batch(leaf: Leaf, batch: np.ndarray, steps: np.ndarray, th: Thresholds,
                    contiguous: bool = True, pipeline_of: Callable[[], tuple[bool, str] | None] | None = None,
                    ) -> list[Finding]:
    """OBS_NAN_INF, OBS_OUT_OF_BOUNDS, OBS_UNNORMALIZED_IMAGE, OBS_UNSCALED and PRECISION_LOSS.

    ``steps`` holds the env step of each row; ``contiguous`` says consecutive rows are
    consecutive steps of one episode (needed by the step-to-step precision rule).
    ``pipeline_of()``: live, (whether the runner's env-to-module pipeline normalises, its
    connectors' names); None where the pipeline is not known (``flow1 check``).
    """
    out: list[Finding] = []
    n = int(batch.shape[0])
    if n == 0:
        return out
    finite_rows = None
    clean = _clean(leaf, batch)
    if leaf.is_float and not clean:
        finite_rows = np.isfinite(batch.reshape(n, -1)).all(axis=1)
        if not finite_rows.all():
            bad = ~finite_rows
            k = int(bad.sum())
            first = _first(steps, bad)
            row = batch[int(np.argmax(bad))].ravel()
            out.append(Finding(
                C.OBS_NAN_INF,
                f"{leaf.path} has NaN/inf: expected finite values, actual {int(np.isnan(row).sum())} NaN and "
                f"{int(np.isinf(row).sum())} inf value(s) at step {first}",
                {"path": leaf.path, "first_step": first, "steps_bad": k, "steps_checked": n},
                env_step=first, count=k))
    oob = None if clean else bounds_violation(leaf, batch)
    if oob is not None:
        rows, excess = oob
        k = int(rows.sum())
        first = _first(steps, rows)
        out.append(Finding(
            C.OBS_OUT_OF_BOUNDS,
            f"{leaf.path} outside {leaf.space}: expected values within bounds, actual excess {excess:.4g} "
            f"(first at step {first})",
            {"path": leaf.path, "first_step": first, "max_excess": excess, "steps_bad": k, "steps_checked": n},
            env_step=first, count=k))
    if leaf.is_image:
        top = int(batch.max())
        if top > 1:  # an advisory: it says how to feed the model, not that the env is wrong
            out.append(advisory(
                C.OBS_UNNORMALIZED_IMAGE,
                f"{leaf.path} is a uint8 image with values up to {top}: scale it to [0, 1] (divide by 255) "
                f"before the model; RLlib's default encoders take it as is",
                {"path": leaf.path, "max_value": top, "threshold": 1}))
    elif not leaf.opaque and isinstance(leaf.space, spaces.Box) and np.issubdtype(leaf.dtype, np.number):
        found = _unscaled(leaf, batch, th, finite_rows, pipeline_of)
        if found is not None:
            out.append(found)
    if leaf.dtype == np.float64:
        out.extend(_precision(leaf, batch, steps, th, contiguous, finite_rows))
    return out


def _unscaled(leaf: Leaf, batch: np.ndarray, th: Thresholds, finite_rows: np.ndarray | None,
              pipeline_of: Callable[[], tuple[bool, str] | None] | None) -> Finding | None:
    """OBS_UNSCALED: a vector field whose values sit far from unit scale (RMS beyond
    ``obs_scale_max``: prices in the thousands, positions in metres of a large map, raw
    sensor counts) reaches the model as is, unless the pipeline normalises it."""
    x = batch.reshape(batch.shape[0], -1)
    if finite_rows is not None:
        x = x[finite_rows]
    if not x.size:
        return None
    rms = np.sqrt(np.mean(np.square(x, dtype=np.float64), axis=0))
    big = np.flatnonzero(rms > th.obs_scale_max)
    if not big.size:
        return None
    pipeline = pipeline_of() if pipeline_of is not None else None
    if pipeline is not None and pipeline[0]:
        return None   # the runner's pipeline normalises what the env gives
    order = big[np.argsort(-rms[big])]
    names = [f"{leaf.path}[{int(i)}]" if x.shape[1] > 1 else leaf.path for i in order[:5]]
    fix = ("add one: config.env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter()) "
           "(ray.rllib.connectors.env_to_module), or gymnasium's NormalizeObservation around the env")
    where = (f"no normalising connector in this runner's env-to-module pipeline ({pipeline[1] or 'empty'}): {fix}"
             if pipeline is not None else
             f"unless your RLlib pipeline normalises it (flow1 check does not see the pipeline), {fix}")
    return advisory(C.OBS_UNSCALED, (
        f"{len(big)} field(s) of {leaf.path} reach the model far from unit scale: RMS up to {rms[order[0]]:.4g} "
        f"({', '.join(names)}{' ...' if len(big) > 5 else ''}), expected <= {th.obs_scale_max:g}; a network's "
        f"first layer saturates or learns slowly on such inputs; {where}"),
        {"path": leaf.path, "fields": names, "rms_max": float(rms[order[0]]), "threshold": th.obs_scale_max,
         "pipeline": pipeline[1] if pipeline is not None else None})


def _precision(leaf: Leaf, batch: np.ndarray, steps: np.ndarray, th: Thresholds, contiguous: bool,
               finite_rows: np.ndarray | None) -> list[Finding]:
    """PRECISION_LOSS for float64 observations that the model will see as float32.

    Two rules: a value's own round-trip relative error (overflow to inf, underflow), and
    the share of the step-to-step change that float32 loses (large offsets such as
    timestamps or world coordinates, where every change drowns in the rounding).
    """
    x = batch.reshape(batch.shape[0], -1)
    if finite_rows is not None and not finite_rows.all():
        x = x[finite_rows]
        steps = steps[finite_rows]
        contiguous = False
    if x.shape[0] == 0:
        return []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        back = x.astype(np.float32).astype(np.float64)
        err = np.abs(back - x) / np.maximum(np.abs(x), np.finfo(np.float64).tiny)
        err = np.where(x == 0, 0.0, err)
    worst = float(np.max(err))
    if worst > th.precision_rel_error:
        r, c = np.unravel_index(int(np.argmax(err)), err.shape)
        return [Finding(
            C.PRECISION_LOSS,
            f"{leaf.path} float64 -> float32 relative error {worst:.3g} at index {c} (value {x[r, c]:.6g}): "
            f"expected <= {th.precision_rel_error:g}",
            {"path": leaf.path, "rule": "value", "rel_error": worst, "threshold": th.precision_rel_error,
             "index": int(c), "value": float(x[r, c]), "first_step": int(steps[r])},
            env_step=int(steps[r]))]
    if contiguous and x.shape[0] >= 3:
        d64 = np.abs(np.diff(x, axis=0))
        d32 = np.abs(np.diff(back, axis=0) - np.diff(x, axis=0))
        total = d64.sum(axis=0)
        moving = total > 0
        if moving.any():
            lost = np.where(moving, d32.sum(axis=0) / np.where(moving, total, 1.0), 0.0)
            c = int(np.argmax(lost))
            if lost[c] > th.precision_delta_rel_error:
                return [Finding(
                    C.PRECISION_LOSS,
                    f"{leaf.path} index {c}: float32 loses {lost[c]:.1%} of the step-to-step change "
                    f"(values ~{np.median(x[:, c]):.6g}, changes ~{np.median(d64[:, c]):.3g}): expected <= "
                    f"{th.precision_delta_rel_error:.0%}; subtract an offset or rescale before the model",
                    {"path": leaf.path, "rule": "delta", "lost_share": float(lost[c]),
                     "threshold": th.precision_delta_rel_error, "index": c,
                     "median_value": float(np.median(x[:, c])), "median_change": float(np.median(d64[:, c])),
                     "first_step": int(steps[0])},
                    env_step=int(steps[0]))]
    return []


def drift_features(values: list[Any], lvs: list[Leaf]) -> np.ndarray | None:
    """One reset observation as a flat float vector (big leaves as mean and std)."""
    parts = []
    for v, lf in zip(values, lvs):
        a = np.asarray(v)
        if a.size > DRIFT_MAX_DIMS_PER_LEAF:
            parts.append(_mean_std(a.ravel()))
        else:
            parts.append(a.astype(np.float64).ravel())
    if not parts:
        return None
    return np.concatenate(parts)


def _mean_std(a: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """[mean, std] of a large leaf in float64, a chunk at a time: ``np.asarray(v, float64)``
    and ``std()`` would each make a float64 copy of the whole leaf (800 MB for a 100 MB
    float32 observation)."""
    n = a.size
    total = sum(float(np.sum(a[i:i + chunk], dtype=np.float64)) for i in range(0, n, chunk))
    mean = total / n
    sq = 0.0
    for i in range(0, n, chunk):
        d = a[i:i + chunk].astype(np.float64) - mean
        sq += float(np.dot(d, d))
    return np.array([mean, np.sqrt(sq / n)])


def _kl(counts_p: np.ndarray, counts_q: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """KL(p || q) along the last axis, with additive smoothing (histogram counts in)."""
    p = counts_p + alpha
    q = counts_q + alpha
    p = p / p.sum(axis=-1, keepdims=True)
    q = q / q.sum(axis=-1, keepdims=True)
    return np.sum(p * np.log(p / q), axis=-1)


def _reset_halves(features: np.ndarray, th: Thresholds) -> np.ndarray | None:
    """The finite reset features of the last even number of episodes (early half, recent
    half), or None with fewer than ``drift_min_episodes`` a half."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2:
        return None
    half = x.shape[0] // 2
    if half < th.drift_min_episodes:
        return None
    x = x[-2 * half:]
    x = x[np.isfinite(x).all(axis=1)]
    if x.shape[0] < 2 * th.drift_min_episodes:
        return None
    half = x.shape[0] // 2
    return x[-2 * half:]


def _most_drifted(onehots: dict, kls: dict, candidates: list[int], n_dims: int, half: int, th: Thresholds,
                  seed: int) -> tuple[int, float, float] | None:
    """(dimension, KL, Bonferroni-adjusted p) of the candidate with the largest KL whose
    permutation test rejects "same distribution" at ``drift_p_value``; None if none does."""
    # enough permutations that the Bonferroni-adjusted p can reach the threshold, drawn in
    # chunks of at most DRIFT_CHUNK_CELLS cells (memory bounded whatever the episodes)
    n_perm = min(DRIFT_MAX_PERMUTATIONS, max(th.drift_permutations, int(4 * n_dims / th.drift_p_value)))
    rng = np.random.default_rng(seed)
    exceed = {d: 0 for d in candidates}
    chunk = max(64, DRIFT_CHUNK_CELLS // (2 * half))
    for start in range(0, n_perm, chunk):
        m = min(chunk, n_perm - start)
        perms = rng.permuted(np.tile(np.arange(2 * half), (m, 1)), axis=1)
        recent = np.zeros((m, 2 * half), np.float32)
        np.put_along_axis(recent, perms[:, :half], 1.0, axis=1)
        for d in candidates:
            oh = onehots[d]
            c_recent = recent @ oh
            exceed[d] += int(np.sum(_kl(c_recent, oh.sum(0) - c_recent) >= kls[d]))
    best = None
    for d in candidates:
        p = (1 + exceed[d]) / (1 + n_perm)
        p_adj = min(1.0, p * n_dims)
        if p_adj <= th.drift_p_value and (best is None or kls[d] > best[1]):
            best = (d, kls[d], p_adj)
    return best


def reset_drift(features: np.ndarray, th: Thresholds, seed: int = 0) -> Finding | None:
    """OBS_DISTRIBUTION_DRIFT: the reset (initial-state) distribution moved between the
    early and the recent half of the episodes.

    Visited states drift by design as a policy learns; reset states should not. With a few
    dozen episodes a histogram KL is noisy (two samples of 20 from one distribution often
    reach 0.5), so the KL must exceed its threshold *and* a permutation test must reject
    "same distribution" at ``drift_p_value`` (Bonferroni over the dimensions tested).
    """
    x = _reset_halves(features, th)
    if x is None:
        return None
    half = x.shape[0] // 2
    dims = [d for d in range(x.shape[1]) if x[:, d].max() > x[:, d].min()]
    if not dims:
        return None
    bins = th.drift_bins
    onehots, kls = {}, {}
    for d in dims:
        col = x[:, d]
        edges = np.linspace(col.min(), col.max(), bins + 1)
        idx = np.clip(np.searchsorted(edges, col, side="right") - 1, 0, bins - 1)
        oh = np.eye(bins)[idx]
        onehots[d] = oh
        kls[d] = float(_kl(oh[half:].sum(0), oh[:half].sum(0)))
    candidates = [d for d in dims if kls[d] > th.drift_kl]
    if not candidates:
        return None
    best = _most_drifted(onehots, kls, candidates, len(dims), half, th, seed)
    if best is None:
        return None
    d, kl, p_adj = best
    early_mean, recent_mean = float(x[:half, d].mean()), float(x[half:, d].mean())
    return Finding(
        C.OBS_DISTRIBUTION_DRIFT,
        f"reset observations drift in dimension {d}: KL(recent || early) {kl:.2f}, expected <= {th.drift_kl:g} "
        f"(permutation p {p_adj:.4f}); mean {early_mean:.4g} -> {recent_mean:.4g} over {2 * half} episodes",
        {"dimension": d, "kl": kl, "threshold": th.drift_kl, "p_value": p_adj, "p_threshold": th.drift_p_value,
         "early_mean": early_mean, "recent_mean": recent_mean, "episodes": 2 * half})
