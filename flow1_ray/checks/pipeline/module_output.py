"""What the RLModule emits and what reaches the env: the action distribution's inputs the module
returned on each step, the action sampled from them and the action the module-to-env connectors
handed to the env (:class:`~.sample.PipeSample`).

RLlib's defaults (a Categorical for a Discrete space, a diagonal Gaussian over normalised actions
for a Box, unsquashed and clipped to the bounds on the way to the env) are silent here. What is
not: inputs that are not finite, a distribution that does not fit the action space, an initial
policy that has already chosen (its entropy gone before any training), a squashed Gaussian whose
log-std sits at RLlib's clamp, a Gaussian whose samples land beyond the bounds so often that the
env gets the bound instead (a mean head without a squash), and actions outside a discrete space."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from .module_input import PipelineThresholds, module_input_findings
from .sample import PipeSample

#: RLlib's clamp of a squashed Gaussian's log-std (ray.rllib.utils.numpy MIN/MAX_LOG_NN_OUTPUT)
LOG_STD_CLAMP = (-5.0, 2.0)

RULES = (
    Rule("PIPE_DIST_NONFINITE", C.PIPELINE, C.FAIL,
         "NaN or inf in the action distribution's inputs the RLModule returned, on a step whose module input "
         "was finite", evidence=("rows", "first_row", "dist")),
    Rule("PIPE_DIST_MISMATCH", C.PIPELINE, C.FAIL,
         "the RLModule's action distribution does not fit the env's action space (its kind, or the width of its "
         "inputs)", evidence=("dist", "inputs", "expected", "action_space")),
    Rule("PIPE_POLICY_COLLAPSED", C.PIPELINE, C.WARN,
         "the initial policy has already chosen: median entropy < {collapse_entropy_ratio:.0%} of its maximum "
         "(Categorical) or median std < {collapse_std_ratio:g} of the action range (Gaussian); or a squashed "
         "Gaussian's log-std at RLlib's clamp on >= {log_std_clamp_share:.0%} of the steps",
         PipelineThresholds, evidence=("dist", "entropy_ratio", "std_ratio", "clamp_share", "trained")),
    Rule("PIPE_ACTION_CLIPPED", C.PIPELINE, C.WARN,
         "Box actions: >= {action_clip_share:.0%} of the action components reach the env clipped at a bound (the "
         "sampled action was beyond it); the loss learns from actions the env never got",
         PipelineThresholds, evidence=("share", "mean_beyond", "bounds", "normalize_actions", "clip_actions")),
    Rule("PIPE_ACTION_OUT_OF_SPACE", C.PIPELINE, C.FAIL,
         "the module-to-env connectors hand the env an action outside its discrete action space, or a non-finite one",
         evidence=("rows", "first_row", "example", "action_space")),
)


def module_output_findings(s: PipeSample, th: PipelineThresholds) -> tuple[list[Finding], list[str]]:
    """The findings on what the RLModule emitted and what reached the env; notes on what was
    not judged."""
    out: list[Finding] = []
    notes: list[str] = []
    if not s.rows:
        return out, ["no step reached the RLModule's output: not judged"]
    if s.dist_inputs is None or not len(s.dist_inputs):
        out.extend(_out_of_space(s))
        out.extend(_clipped_actions(s, np.ones(len(s.env_actions) if s.env_actions is not None else 0, bool), th))
        return out, ["the RLModule returned no action distribution inputs (it picks its actions itself, as DQN's "
                     "epsilon-greedy does): its distribution not judged"]
    mismatch = _mismatch(s)
    if mismatch is not None:
        return [mismatch], notes
    finite = np.isfinite(s.dist_inputs).all(axis=1)
    seen_ok = np.isfinite(s.seen).all(axis=1) if s.seen is not None and len(s.seen) == len(finite) else True
    bad = ~finite & seen_ok
    if bad.any():
        rows = np.flatnonzero(bad)
        out.append(Finding(C.PIPE_DIST_NONFINITE,
                           f"the RLModule returned NaN or inf action distribution inputs ({s.dist}) on {len(rows)} of "
                           f"{len(finite)} steps whose input was finite (first at step {int(rows[0])})",
                           {"rows": int(len(rows)), "first_row": int(rows[0]), "dist": s.dist}, env_step=int(rows[0])))
    out.extend(_out_of_space(s))
    if finite.sum() < th.pipe_min_rows:
        notes.append(f"{int(finite.sum())} finite steps, fewer than {th.pipe_min_rows}: the policy's shares not judged")
        return out, notes
    out.extend(_collapsed(s, s.dist_inputs[finite], th))
    out.extend(_clipped_actions(s, finite, th))
    return out, notes


def _mismatch(s: PipeSample) -> Finding | None:
    width = s.dist_inputs.shape[1]
    space = f"Discrete({s.n_actions})" if s.n_actions is not None else (
        f"Box{tuple(np.shape(s.low))}" if s.low is not None else "")
    if not space:
        return None
    if s.n_actions is not None:
        expected = s.n_actions if s.dist == "categorical" else None
        ok = s.dist == "categorical" and width == s.n_actions
    elif s.dist in ("diag_gaussian", "squashed_gaussian"):
        expected = 2 * int(np.size(s.low))
        ok = width == expected
    elif s.dist == "categorical":
        expected, ok = None, False
    else:
        return None   # a distribution of the user's own: its width is its business
    if ok:
        return None
    return Finding(C.PIPE_DIST_MISMATCH,
                   f"the RLModule's action distribution ({s.dist}, {width} inputs) does not fit the env's action space "
                   f"{space}" + (f": expected {expected} inputs" if expected else f": a {s.dist} cannot act in it"),
                   {"dist": s.dist, "inputs": int(width), "expected": expected, "action_space": space})


def _out_of_space(s: PipeSample) -> list[Finding]:
    if s.env_actions is None or not len(s.env_actions):
        return []
    a = s.env_actions
    if s.n_actions is not None:
        bad = ~np.isfinite(a).all(axis=1) | (a < 0).any(axis=1) | (a >= s.n_actions).any(axis=1) \
            | (np.isfinite(a) & (a != np.round(a))).any(axis=1)
    else:
        bad = ~np.isfinite(a).all(axis=1)
    if not bad.any():
        return []
    rows = np.flatnonzero(bad)
    space = f"Discrete({s.n_actions})" if s.n_actions is not None else "its Box"
    return [Finding(C.PIPE_ACTION_OUT_OF_SPACE,
                    f"the env got actions outside {space} on {len(rows)} of {len(a)} steps (first at step "
                    f"{int(rows[0])}: {a[rows[0]].tolist()}) from the module-to-env connectors "
                    f"({' -> '.join(s.module_to_env) or 'RLlib defaults'})",
                    {"rows": int(len(rows)), "first_row": int(rows[0]), "example": a[rows[0]].tolist(),
                     "action_space": space}, env_step=int(rows[0]))]


def _collapsed(s: PipeSample, x: np.ndarray, th: PipelineThresholds) -> list[Finding]:
    ev: dict = {"dist": s.dist, "trained": s.trained}
    if s.dist == "squashed_gaussian":
        log_std = x[:, x.shape[1] // 2:]
        at = (log_std <= LOG_STD_CLAMP[0]) | (log_std >= LOG_STD_CLAMP[1])
        share = float(at.mean())
        if share < th.log_std_clamp_share:
            return []
        side = "lower" if float(np.median(log_std)) <= 0 else "upper"
        ev["clamp_share"] = round(share, 4)
        msg = (f"the squashed Gaussian's log-std is at RLlib's {side} clamp ({LOG_STD_CLAMP[0]:g} .. "
               f"{LOG_STD_CLAMP[1]:g}) on {share:.0%} of the action components: the clamp, not the RLModule, sets "
               f"its exploration, and its gradient is zero there")
    elif s.trained:
        return []   # a trained policy may well have chosen: only the initial one is judged
    elif s.dist == "categorical":
        z = x - x.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        h = -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=1)
        ratio = float(np.median(h) / np.log(x.shape[1])) if x.shape[1] > 1 else 1.0
        if ratio >= th.collapse_entropy_ratio:
            return []
        ev["entropy_ratio"] = round(ratio, 5)
        top = float(np.median(p.max(axis=1)))
        msg = (f"the initial policy has already chosen: its median entropy is {ratio:.1%} of the maximum "
               f"(log {x.shape[1]}), the likeliest action has p = {top:.3f} at the median step; it will hardly "
               f"explore (action logits scaled up, a final layer initialised large)")
    elif s.dist == "diag_gaussian" and s.low is not None:
        a = x.shape[1] // 2
        rng = 2.0 if s.normalize_actions else np.asarray(s.high, float).ravel() - np.asarray(s.low, float).ravel()
        ratio = float(np.median(np.exp(x[:, a:]) / rng))
        if not np.isfinite(ratio) or ratio >= th.collapse_std_ratio:
            return []
        ev["std_ratio"] = ratio
        msg = (f"the initial Gaussian policy has already chosen: its median std is {ratio:.2g} of the action range; "
               f"it will hardly explore (a log-std initialised very low)")
    else:
        return []
    return [Finding(C.PIPE_POLICY_COLLAPSED, msg, ev)]


def _clipped_actions(s: PipeSample, finite: np.ndarray, th: PipelineThresholds) -> list[Finding]:
    """The share of Box action components that reached the env at a bound the sample was beyond."""
    if s.low is None or s.actions is None or s.env_actions is None or s.dist == "squashed_gaussian":
        return []
    n = min(len(s.actions), len(s.env_actions), len(finite))
    a, e = s.actions[:n][finite[:n]], s.env_actions[:n][finite[:n]]
    lo, hi = np.asarray(s.low, float).ravel(), np.asarray(s.high, float).ravel()
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()) or a.shape[1:] != lo.shape or e.shape[1:] != lo.shape:
        return []
    intended = lo + (a + 1.0) * (hi - lo) / 2.0 if s.normalize_actions else a
    at_bound = np.isclose(e, lo, rtol=1e-6, atol=1e-7) | np.isclose(e, hi, rtol=1e-6, atol=1e-7)
    beyond = (intended < lo) | (intended > hi)
    share = float((at_bound & beyond).mean())
    if share < th.action_clip_share:
        return []
    ev = {"share": round(share, 4), "bounds": [lo.tolist(), hi.tolist()], "normalize_actions": s.normalize_actions,
          "clip_actions": s.clip_actions, "mean_beyond": None}
    why = ""
    if s.dist == "diag_gaussian" and s.dist_inputs is not None:
        mean = s.dist_inputs[:n][finite[:n]][:, :lo.size]
        m = lo + (mean + 1.0) * (hi - lo) / 2.0 if s.normalize_actions else mean
        ev["mean_beyond"] = round(float(((m < lo) | (m > hi)).mean()), 4)
        if ev["mean_beyond"] >= th.action_clip_share:
            why = (f"; the Gaussian's mean itself lies beyond the bounds on {ev['mean_beyond']:.0%} of them: the mean "
                   f"head has no squash (tanh) to keep it inside")
    return [Finding(C.PIPE_ACTION_CLIPPED,
                    f"{share:.0%} of the action components reached the env clipped at a bound of "
                    f"[{_few(lo)}] .. [{_few(hi)}] (the sampled action was beyond it){why}; the policy's log-prob is of "
                    f"the sampled action, so it learns from actions the env never got", ev)]


def _few(v: np.ndarray) -> str:
    return ", ".join(f"{x:g}" for x in v[:4]) + (", ..." if v.size > 4 else "")


def pipeline_findings(s: PipeSample, th: Any) -> tuple[list[Finding], list[str]]:
    """Every PIPELINE rule on one record: what the RLModule saw, then what it emitted and what
    reached the env; the findings and the notes on what was not judged. ``th``: a whole
    :class:`~flow1_ray.checks.thresholds.Thresholds` (or any object with the family's fields)."""
    pt = th if isinstance(th, PipelineThresholds) else \
        PipelineThresholds(**{f: getattr(th, f) for f in PipelineThresholds.__dataclass_fields__})
    found, notes = module_input_findings(s, pt)
    more, said = module_output_findings(s, pt)
    return found + more, notes + said
