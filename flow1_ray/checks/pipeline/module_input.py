"""What the RLModule sees: the env-to-module connectors' output judged against the env's own
observation, row by row (:class:`~.sample.PipeSample`).

A connector pipeline (an observation filter, a clip, flattening, a frame stack, a user's own
connector) can break what the env got right: values no longer finite, a feature pinned at a
clip whatever the env says, a shape other than the one the RLModule was built for, frames
stacked in an order other than the one RLlib's and gymnasium's stackers use. Each is judged
only where the record can show it: a feature is compared with the env's only when the pipeline
maps the observation value for value (same size), frames only when the stack's slots are found
among the env's recent observations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from .sample import PipeSample


@dataclass(frozen=True)
class PipelineThresholds:
    """PIPELINE: what the RLModule sees, what it emits and what reaches the env."""

    pipe_min_rows: int = 50               # rows (module forward passes) before any share is judged
    clip_pinned_share: float = 0.5        # a module-input feature at one extreme value on at least this share of rows
    clip_distinct: int = 3                # ... where the env gave at least this many distinct values
    invented_spread: float = 0.01         # a feature constant in the env varying more than this at the module
    frame_match_share: float = 0.9        # a stack slot is the env's observation of one lag on at least this share
    collapse_entropy_ratio: float = 0.1   # initial policy: median entropy / its maximum below this
    collapse_std_ratio: float = 0.001     # initial Gaussian: median std / the action range below this
    log_std_clamp_share: float = 0.5      # squashed Gaussian: log-std at RLlib's clamp on at least this share
    action_clip_share: float = 0.5        # Box actions: components clipped at a bound on at least this share


RULES = (
    Rule("PIPE_OBS_NONFINITE", C.PIPELINE, C.FAIL,
         "NaN or inf in the RLModule's input on a step whose env observation was finite: a connector made it",
         evidence=("rows", "first_row", "features", "pipeline")),
    Rule("PIPE_OBS_SHAPE", C.PIPELINE, C.FAIL,
         "the env-to-module pipeline hands the RLModule observations of another shape than the observation "
         "space it declares (the space the RLModule was built for)",
         evidence=("declared", "actual", "pipeline")),
    Rule("PIPE_OBS_CLIPPED", C.PIPELINE, C.WARN,
         "a feature reaches the RLModule at its extreme values on >= {clip_pinned_share:.0%} of >= {pipe_min_rows} "
         "steps where the env gave >= {clip_distinct} distinct values: a clip or filter erases what the env says",
         PipelineThresholds, evidence=("features", "share", "value", "env_distinct", "env_range", "pipeline")),
    Rule("PIPE_OBS_INVENTED", C.PIPELINE, C.WARN,
         "a feature the env keeps constant over >= {pipe_min_rows} steps reaches the RLModule varying by more than "
         "{invented_spread:g}: the pipeline adds change the env does not have (a filter whose statistics drift)",
         PipelineThresholds, evidence=("features", "env_value", "module_range", "pipeline")),
    Rule("PIPE_FRAME_ORDER", C.PIPELINE, C.WARN,
         "stacked frames reach the RLModule newest first, out of order, or as copies of one frame (each slot matched "
         "to the env's observation of one lag on >= {frame_match_share:.0%} of the steps); RLlib's FrameStacking and "
         "gymnasium's FrameStackObservation put the oldest first", PipelineThresholds,
         evidence=("frames", "lags", "expected", "match", "pipeline")),
)


def module_input_findings(s: PipeSample, th: PipelineThresholds) -> tuple[list[Finding], list[str]]:
    """The findings on what the RLModule saw, and notes on what could not be judged."""
    out: list[Finding] = []
    notes: list[str] = []
    if s.declared_shape is not None and s.seen_shape and tuple(s.seen_shape) != tuple(s.declared_shape):
        out.append(Finding(C.PIPE_OBS_SHAPE,
                           f"the env-to-module pipeline ({s.pipeline()}) declares observations of shape "
                           f"{tuple(s.declared_shape)}, the space the RLModule was built for, but hands it "
                           f"{tuple(s.seen_shape)}: a connector changes the shape without recomputing its output "
                           f"space (ConnectorV2.recompute_output_observation_space)",
                           {"declared": list(s.declared_shape), "actual": list(s.seen_shape),
                            "pipeline": s.pipeline()}))
    if s.seen is None:
        return out, ["the RLModule's input is not numeric, or no step reached its output: not judged"]
    out.extend(_nonfinite(s))
    if s.raw is None:
        notes.append("the env's observations are not numeric: the RLModule's input not compared with them")
        return out, notes
    if s.rows < th.pipe_min_rows:
        notes.append(f"{s.rows} steps recorded, fewer than {th.pipe_min_rows}: shares not judged")
        return out, notes
    if s.raw.shape[1] == s.seen.shape[1]:
        out.extend(_clipped(s, th))
        out.extend(_invented(s, th))
    else:
        frames, note = _frames(s, th)
        out.extend(frames)
        if note:
            notes.append(note)
    return out, notes


def _nonfinite(s: PipeSample) -> list[Finding]:
    bad_seen = ~np.isfinite(s.seen).all(axis=1)
    if s.raw is not None:
        bad_seen &= np.isfinite(s.raw).all(axis=1)
    if not bad_seen.any():
        return []
    rows = np.flatnonzero(bad_seen)
    feats = np.flatnonzero(~np.isfinite(s.seen[rows]).all(axis=0))
    return [Finding(C.PIPE_OBS_NONFINITE,
                    f"the RLModule's input held NaN or inf on {len(rows)} of {s.rows} steps whose env observation "
                    f"was finite (first at step {int(rows[0])}, features {_few(feats)}): the env-to-module pipeline "
                    f"({s.pipeline()}) made it",
                    {"rows": int(len(rows)), "first_row": int(rows[0]), "features": [int(f) for f in feats[:20]],
                     "pipeline": s.pipeline()}, env_step=int(rows[0]))]


def _clipped(s: PipeSample, th: PipelineThresholds) -> list[Finding]:
    """Features mapped value for value whose module value sits at one extreme on most rows while
    the env's values there differ: many env values made one."""
    ok = np.isfinite(s.seen).all(axis=1) & np.isfinite(s.raw).all(axis=1)
    seen, raw = s.seen[ok], s.raw[ok]
    if len(seen) < th.pipe_min_rows:
        return []
    # a clip pins a feature at its bound on one side or both (a symmetric clip: both); the shares of
    # every feature at once (an image has thousands), the env's distinct values only for the candidates
    hi, lo = seen.max(axis=0), seen.min(axis=0)
    at_hi = np.isclose(seen, hi, rtol=1e-6, atol=1e-9)
    at_lo = np.isclose(seen, lo, rtol=1e-6, atol=1e-9)
    shares = (at_hi | at_lo).mean(axis=0)
    hits = []
    for j in np.flatnonzero((shares >= th.clip_pinned_share) & (hi > lo)):
        at = at_hi[:, j] | at_lo[:, j]
        env = raw[at, j]
        distinct = len(np.unique(env))
        if distinct >= th.clip_distinct:
            value = float(hi[j] if at_hi[:, j].sum() >= at_lo[:, j].sum() else lo[j])
            hits.append((int(j), float(shares[j]), value, distinct, float(env.min()), float(env.max())))
    if not hits:
        return []
    j, share, value, distinct, lo, hi = max(hits, key=lambda h: h[1])
    return [Finding(C.PIPE_OBS_CLIPPED,
                    f"{len(hits)} of {seen.shape[1]} features reach the RLModule pinned at a bound: feature {j} is "
                    f"at {value:g} (or its other extreme) on {share:.0%} of {len(seen)} steps where the env gave {distinct} distinct values "
                    f"({lo:g} .. {hi:g}); the env-to-module pipeline ({s.pipeline()}) clips them, so the module "
                    f"cannot tell those states apart (a filter's clip_by_value, a clip too tight for the feature)",
                    {"features": [h[0] for h in hits[:20]], "share": round(share, 4), "value": value,
                     "env_distinct": distinct, "env_range": [lo, hi], "pipeline": s.pipeline()})]


def _invented(s: PipeSample, th: PipelineThresholds) -> list[Finding]:
    """Features mapped value for value that the env never changes and the module sees change."""
    ok = np.isfinite(s.seen).all(axis=1) & np.isfinite(s.raw).all(axis=1)
    seen, raw = s.seen[ok], s.raw[ok]
    if len(seen) < th.pipe_min_rows:
        return []
    still = raw.max(axis=0) == raw.min(axis=0)
    moving = (seen.max(axis=0) - seen.min(axis=0)) > th.invented_spread
    feats = np.flatnonzero(still & moving)
    if not len(feats):
        return []
    j = int(feats[0])
    lo, hi = float(seen[:, j].min()), float(seen[:, j].max())
    return [Finding(C.PIPE_OBS_INVENTED,
                    f"feature {j} is {raw[0, j]:g} on every one of {len(seen)} steps in the env, but reaches the "
                    f"RLModule varying over {lo:.4g} .. {hi:.4g}" + (f" ({len(feats)} such features: {_few(feats)})"
                                                                    if len(feats) > 1 else "")
                    + f": the env-to-module pipeline ({s.pipeline()}) adds change the env does not have, and the "
                      f"module learns from it (a filter whose statistics drift: RLlib's MeanStdFilter, merged over "
                      f"several EnvRunners, moves a constant feature's mean away from its value)",
                    {"features": [int(f) for f in feats[:20]], "env_value": float(raw[0, j]), "module_range": [lo, hi],
                     "pipeline": s.pipeline()})]


def _frames(s: PipeSample, th: PipelineThresholds) -> tuple[list[Finding], str]:
    """A stack of k frames: each slot's lag among the env's recent observations (0: the
    newest); RLlib's and gymnasium's stackers put them oldest first (lags k-1 .. 0)."""
    d, m = s.raw.shape[1], s.seen.shape[1]
    k = m // d if d and m % d == 0 else 0
    if not 2 <= k <= 32:
        return [], ""
    slots = _slots(s.seen, s.seen_shape, s.raw_shape, k)
    if slots is None:
        return [], f"the RLModule's input holds {k}x the env's observation in a layout not recognised: frames not judged"
    lags, match = _lags(slots, s.raw, s.episode, s.t, k, th.frame_match_share)
    if lags is None:
        return [], (f"the RLModule's input holds {k}x the env's observation, but its slots are not the env's recent "
                    f"observations (a filter after the stack?): frames not judged")
    expected = list(range(k - 1, -1, -1))
    if lags == expected:
        return [], ""
    if len(set(lags)) < k:
        what = (f"copies of the same frames (lags {lags}): the stack shows the RLModule {len(set(lags))} distinct "
                f"frame(s) of {k}, so it cannot see motion")
    elif lags == expected[::-1]:
        what = (f"newest first (lags {lags}, 0 = the current observation); RLlib's FrameStacking and gymnasium's "
                f"FrameStackObservation put the oldest first, so an encoder that reads time in order (a convolution "
                f"over frames, a checkpoint or pretrained encoder made with either stacker) reads it backwards")
    else:
        what = f"out of order (lags {lags}, 0 = the current observation; expected {expected})"
    return [Finding(C.PIPE_FRAME_ORDER,
                    f"the env-to-module pipeline ({s.pipeline()}) stacks {k} frames {what}",
                    {"frames": k, "lags": lags, "expected": expected, "match": round(match, 4),
                     "pipeline": s.pipeline()})], ""


def _slots(seen: np.ndarray, seen_shape: tuple, raw_shape: tuple, k: int) -> np.ndarray | None:
    """(N, k, D): the module input split into k slots of one env observation each: along an axis
    k times the env's (concatenated frames), or along a new first or last axis."""
    n, rs, ss = len(seen), tuple(raw_shape), tuple(seen_shape)
    x = seen.reshape((n, *ss))
    if ss == (k, *rs):
        return x.reshape(n, k, -1)
    if ss == (*rs, k):
        return np.moveaxis(x, -1, 1).reshape(n, k, -1)
    if len(ss) == len(rs):
        axes = [a for a in range(len(rs)) if ss[a] == rs[a] * k and all(ss[b] == rs[b] for b in range(len(rs)) if b != a)]
        if axes:
            parts = np.split(x, k, axis=axes[0] + 1)
            return np.stack([p.reshape(n, -1) for p in parts], axis=1)
    return None


def _lags(slots: np.ndarray, raw: np.ndarray, episode: np.ndarray, t: np.ndarray, k: int,
          need: float) -> tuple[list[int] | None, float]:
    """Each slot's lag: the L in 0..k-1 for which the slot equals the env's observation L steps
    earlier in the same episode chunk, on >= ``need`` of the rows with k-1 earlier steps."""
    earlier = _earlier(episode, k)
    rows = np.flatnonzero((t >= k - 1) & (earlier[:, k - 1] >= 0))
    if len(rows) < 10:
        return None, 0.0
    lags, worst = [], 1.0
    for slot in range(k):
        shares = [float(np.mean(np.isclose(slots[rows, slot], raw[earlier[rows, lag]], rtol=1e-5, atol=1e-8)
                                .all(axis=1))) for lag in range(k)]
        fits = [lag for lag in range(k) if shares[lag] >= need]
        if not fits:
            return None, 0.0
        # an env whose observation rarely changes fits several lags: the stackers' own lag, if it fits, is taken
        lag = k - 1 - slot if k - 1 - slot in fits else max(fits, key=lambda x: shares[x])
        lags.append(lag)
        worst = min(worst, shares[lag])
    return lags, worst


def _earlier(episode: np.ndarray, k: int) -> np.ndarray:
    """(N, k): for each row, the row 0..k-1 steps earlier in its own episode chunk (-1: none).
    Rows of several sub-envs interleave; each chunk's rows are in step order."""
    out = np.full((len(episode), k), -1, dtype=np.int64)
    seen: dict[int, list[int]] = {}
    for r, ep in enumerate(episode.tolist()):
        past = seen.setdefault(ep, [])
        past.append(r)
        for lag in range(min(k, len(past))):
            out[r, lag] = past[-1 - lag]
    return out


def _few(idx: np.ndarray, n: int = 5) -> str:
    shown = ", ".join(str(int(i)) for i in idx[:n])
    return shown + (f" and {len(idx) - n} more" if len(idx) > n else "")
