"""Default thresholds of every check (DESIGN.md catalogue); all of them configurable.

Each finding's evidence carries the threshold it was judged against, so a report read a
year later still says why it fired.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from ..errors import Flow1InputError


#: Names earlier versions accepted, and what replaced them.
RETIRED = {
    "reward_spike_share": "REWARD_SPIKES now weighs outsized rewards by their share of the total |reward| "
                          "(reward_spike_ratio, reward_spike_mass)",
    "reward_spike_robust_z": "REWARD_SPIKES now compares rewards with the median |non-zero reward| (reward_spike_ratio)",
    "reward_skew": "REWARD_SPIKES no longer reads the skewness (reward_spike_mass)",
}


@dataclass(frozen=True)
class Thresholds:
    # ENV_SPEC: when no episode ended within the budget, step on (same checks) until one
    # does, up to factor x budget steps, at most max_steps, at most max_s seconds.
    episode_extension_factor: int = 20
    episode_extension_max_steps: int = 100_000
    episode_extension_max_s: float = 30.0
    # Memory: what the checker keeps is bounded by bytes, not by a count of steps.
    # Observation and action values wait in a buffer for the vectorised OBS_FLOW and
    # ACTION_PIPE checks; a buffer that reaches this many bytes is judged at once (so every
    # step is still judged, in smaller batches: a 4 MB observation every 16 steps).
    batch_max_bytes: int = 64 * 2**20
    # Each per-step or per-episode series (rewards, step times, reset features, episode
    # returns) keeps every row (16 bytes a value) up to this many bytes, then a uniform
    # sample of that size plus the exact count, extremes and first non-finite value.
    series_max_bytes: int = 16 * 2**20
    # ENV_SPEC: step timing. Both a ratio to the median and an absolute excess are needed,
    # or a busy machine's scheduler hiccups read as a slow env.
    step_time_ratio: float = 3.0
    step_time_p95_floor_ms: float = 5.0      # p95 - median must exceed this
    step_time_max_floor_ms: float = 100.0    # max - median must exceed this
    step_time_min_steps: int = 20
    # OBS_FLOW
    precision_rel_error: float = 1e-5        # per value, float64 -> float32 -> float64
    precision_delta_rel_error: float = 0.1   # share of the step-to-step change lost in float32
    drift_kl: float = 0.5                    # KL(recent || early) of reset-observation histograms
    drift_p_value: float = 0.01              # permutation test, Bonferroni over dimensions
    drift_min_episodes: int = 16             # per half
    drift_bins: int = 5
    drift_permutations: int = 2000
    image_min_side: int = 8
    # REWARD_STATS
    reward_min_steps: int = 100              # below this the distribution rules stay silent
    reward_sparse_ratio: float = 0.01
    reward_spike_cv: float = 0.5             # seed: spikes need CV > 0.5 ...
    reward_spike_ratio: float = 10.0         # ... rewards beyond 10x the median |non-zero reward| ...
    reward_spike_mass: float = 0.5           # ... carrying more than this share of the total |reward|
    reward_scale_min: float = 1e-3
    reward_drop_ratio: float = 0.7
    reward_drop_span: int = 10               # episodes per block and in the recent window
    reward_drop_p_value: float = 0.001       # Mann-Whitney, best block vs recent, Bonferroni
    reward_drop_min_iters: int = 3           # a live run's drop must last this many iterations (and a window)
    reward_drop_best_of: int = 5             # a live run's best = the best median of this many iterations
    # ACTION_PIPE
    squash_grad_min: float = 1e-3
    # RESOURCE (seed 000, 3.3): contention across a node's workers
    contention_ratio: float = 3.0            # a worker's step time > this x its own baseline is slow ...
    contention_min_workers: int = 3          # ... on at least this many workers (fewer is never contention)
    contention_floor_ms: float = 1.0         # ... each costing at least this much more per step ...
    contention_sustain_s: float = 10.0       # ... for at least this long
    # STATE_ACTION (seed 001, 3.2): verdicts per state cluster, then trends between snapshots
    chaos_entropy: float = 0.95              # normalised entropy of P(a|c) at or above = CHAOS
    blind_spot_max: float = 0.3              # every action below = BLIND_SPOT
    fixation_min: float = 0.95               # one action above = FIXATED (ERROR_FIXATION with failures)
    failure_ratio: float = 2.0               # ERROR_FIXATION: cluster failure rate >= 2x the run's ...
    failure_p_value: float = 0.01            # ... and a one-sided binomial test says so
    rare_share: float = 1e-4                 # < 0.01 % of visited states = RARE_STATE
    min_visits: int = 20                     # fewer visits: not judged
    lost_rise: float = 0.1                   # LOST_STATES_GROWING: share in CHAOS/BLIND_SPOT clusters up by this ...
    lost_rise_snapshots: int = 3             # ... rising at each of this many consecutive snapshots
    new_fixation_share: float = 0.05         # NEW_FIXATION: newly fixated clusters hold this share of states ...
    new_fixation_return_gain: float = 0.05   # ... and episode return rose less than this (relative)
    new_fixation_warn_drop: float = 0.3      # NEW_FIXATION is a WARN only if the return also fell this much
    state_warn_share: float = 0.1            # CHAOS/BLIND_SPOT/ERROR_FIXATION are WARNs only when their clusters
    state_warn_snapshots: int = 2            # hold this share of the states at this many snapshots in a row ...
    decided_top_p: float = 0.8               # ... and (CHAOS/BLIND_SPOT) the policy is decided (top p >= this)
    decided_min_share: float = 0.2           # ... on at least this share of the states elsewhere
    # TRAIN_CURVES (seed 004): the five curves; every finding needs a second, independent signal
    return_ema_alpha: float = 0.99           # per-episode EMA of the return (seed: alpha 0.99)
    return_stall_window: int = 5             # the return "stalled": its EMA rose less than ...
    return_stall_gain: float = 0.02          # ... this share over this many iterations
    entropy_collapse_ratio: float = 0.2      # entropy / max entropy below (2 iterations) ...
    entropy_collapse_fail_ratio: float = 0.05  # ... (FAIL below this) ...
    entropy_slope_window: int = 5            # ... and a least-squares slope over this many iterations ...
    entropy_collapse_slope: float = 0.02     # ... of at most -this (share of the maximum per iteration)
    entropy_high_ratio: float = 0.9          # KL_TOO_LOW: the policy still near its maximum entropy
    kl_low: float = 0.005                    # seed: KL band 0.005-0.05 (0.01-0.03 ideal)
    kl_high: float = 0.05
    kl_window: int = 5                       # KL_TOO_LOW/HIGH judge the median of this many iterations
    kl_spike_factor: float = 10.0            # KL_SPIKE: one iteration > this x the running median
    policy_loss_zero: float = 1e-3           # POLICY_LOSS_STUCK: |policy loss| below ...
    policy_loss_stuck_iters: int = 5         # ... (and KL < kl_low / 10) for this many iterations
    value_loss_ratio: float = 3.0            # VALUE_DOMINATES: vf_loss_coeff x vf_loss > this x |policy loss| ...
    value_grad_ratio: float = 100.0          # ... and the value head's gradient into the shared trunk > this x the policy head's
    lr_floor_ratio: float = 0.1              # LR_DECAYED: lr below this share of its first value
    # GRADIENT_FLOW (seed 001 3.3; Sokar et al. 2023): per-layer norms on the Learner
    grad_vanishing_ratio: float = 1e-3       # a layer's gradient RMS < this x the median layer RMS of its stack
    grad_exploding_factor: float = 100.0     # a module's gradient norm > this x its own running median
    grad_persist_traces: int = 3             # vanishing / dormant findings need this many traces in a row
    grad_zero_traces: int = 2                # GRADIENT_ZERO needs this many traces in a row
    dormant_tau: float = 0.025               # a unit is dormant when its normalised mean |activation| <= tau
    dormant_share: float = 0.5               # DORMANT_UNITS: more than this share of a layer's units

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> "Thresholds":
        """A copy with some fields replaced; unknown names are an error, not ignored.
        A retired name (a rule that changed) is dropped with a warning that says what
        replaced it, so that a thresholds file written for an earlier version still loads."""
        if not overrides:
            return self
        retired = sorted(set(overrides) & set(RETIRED))
        if retired:
            warnings.warn("; ".join(f"threshold {k!r} no longer applies: {RETIRED[k]}" for k in retired),
                          UserWarning, stacklevel=2)
            overrides = {k: v for k, v in overrides.items() if k not in RETIRED}
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown threshold(s) {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **dict(overrides))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def state_action(self) -> Any:
        """The STATE_ACTION subset, as the verdict code takes it."""
        from .state_action import StateActionThresholds

        names = {f.name for f in fields(StateActionThresholds)}
        return StateActionThresholds(**{k: v for k, v in asdict(self).items() if k in names})

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Thresholds":
        """Defaults overridden by a JSON object of ``{name: value}`` (see configs/)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise Flow1InputError(f"cannot read thresholds file {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise Flow1InputError(f"thresholds file {path} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise Flow1InputError(f"thresholds file {path}: expected a JSON object, actual {type(data).__name__}")
        data = {k: v for k, v in data.items() if not k.startswith("_")}  # "_comment" keys
        try:
            return cls().with_overrides(data)
        except (ValueError, TypeError) as e:
            raise Flow1InputError(f"thresholds file {path}: {e}") from None


DEFAULT = Thresholds()
