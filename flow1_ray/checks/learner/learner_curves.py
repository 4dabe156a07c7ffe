"""The learner's curves, one RLModule at a time (entropy, KL, the loss parts, the
learning rate; the return comes from :mod:`.curves`).

Every rule needs two independent signals before it speaks -- a cross-check, and
what keeps a healthy run silent: a low entropy ratio *and* a steep fall (or a return that
stopped rising); a KL out of its band *and* a return or entropy that shows it matters. A
rule reports once per incident and re-arms when its curve is back in range. Each finding
names the knob to turn with a value computed from the run's config (:mod:`.advice`). No Ray.

Measured on PPO CartPole (1 runner, 1,000-step batches, seed 0): defaults keep KL at
0.003-0.025 and entropy 0.69 -> 0.54 over 15 iterations while the return climbs to ~180;
``lr=0.05, num_epochs=10`` reads KL 0.40 then 1.84 and entropy 0.47 -> 0.001 by iteration 2.
RLlib's default 4,000-step PPO ends at KL 0.004 with the return at 500 -- a converged
policy, not a stuck one, which is why KL_TOO_LOW also asks for a high entropy and a flat return.
"""

from __future__ import annotations
# long module: ModuleCurves judges one RLModule's curves together (entropy, KL, policy loss, value, lr): each rule reads the others' history, and each Rule stays beside its function

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ...common import codes as C
from ...common import schema as S
from .. import advice as A
from ..findings import Finding, advisory
from .learner_reading import Reading, RunContext, least_squares_slope, max_entropy, once
from ..rule import Needs, Rule, View
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class CurveThresholds:
    """TRAIN_CURVES: the learner's five curves; every finding needs a second, independent signal."""

    return_ema_alpha: float = 0.99           # per-episode EMA of the return
    return_stall_window: int = 5             # the return "stalled": its EMA rose less than ...
    return_stall_gain: float = 0.02          # ... this share over this many iterations
    entropy_collapse_ratio: float = 0.2      # entropy / max entropy below (2 iterations) ...
    entropy_collapse_fail_ratio: float = 0.05  # ... (FAIL below this) ...
    entropy_slope_window: int = 5            # ... and a least-squares slope over this many iterations ...
    entropy_collapse_slope: float = 0.02     # ... of at most -this (share of the maximum per iteration)
    entropy_high_ratio: float = 0.9          # KL_TOO_LOW: the policy still near its maximum entropy
    kl_low: float = 0.005                    # PPO's usual KL band 0.005-0.05 (0.01-0.03 ideal)
    kl_high: float = 0.05
    kl_window: int = 5                       # KL_TOO_LOW/HIGH judge the median of this many iterations
    kl_spike_factor: float = 10.0            # KL_SPIKE: one iteration > this x the running median
    policy_loss_zero: float = 1e-3           # POLICY_LOSS_STUCK: |policy loss| below ...
    policy_loss_stuck_iters: int = 5         # ... (and KL < kl_low / 10) for this many iterations
    value_loss_ratio: float = 3.0            # VALUE_DOMINATES: vf_loss_coeff x vf_loss > this x |policy loss| ...
    value_grad_ratio: float = 100.0          # ... and the value head's gradient into the shared trunk > this x the policy head's
    lr_floor_ratio: float = 0.1              # LR_DECAYED: lr below this share of its first value
    lr_frozen_kl: float = 1e-6               # ... and |KL| below this on each of kl_window iterations: frozen
    value_ev_max: float = 0.0                # VALUE_NOT_LEARNING: vf_explained_var at or below this ...
    value_ev_window: int = 5                 # ... on each of this many iterations, the return not rising
    value_ev_signal: float = 0.1             # KL_TOO_LOW: an explained variance above this shows a learnable return
    value_ev_worse: float = -0.05            # VALUE_NOT_LEARNING where nothing is learnable yet: EV below this

    @property
    def kl_stuck(self) -> float:
        """The KL below which POLICY_LOSS_STUCK counts the policy as not moving."""
        return self.kl_low / 10


_KL = View(S.LEARNER_DIR, ("mean_kl_loss",), "KL between the old and the new policy")

RULES = (
    Rule("ENTROPY_COLLAPSE", C.TRAIN_CURVES, C.WARN,
         "entropy / max entropy < {entropy_collapse_ratio:.0%} on 2 iterations (FAIL < "
         "{entropy_collapse_fail_ratio:.0%}) and falling (least-squares slope over {entropy_slope_window} "
         "iterations <= -{entropy_collapse_slope:g} of the maximum per iteration; a discrete policy first read at "
         "iteration 1 under {entropy_collapse_fail_ratio:.0%} fell inside it) or with the return stalled or "
         "dropped", CurveThresholds,
         evidence=("module_id", "entropy", "entropy_ratio", "entropy_max", "slope_per_iteration", "knobs"),
         knobs=("entropy_coeff", "lr"), view=View(S.LEARNER_DIR, ("entropy_ratio",), "entropy / its maximum"),
         needs=Needs(("entropy_slope_window",))),
    Rule("KL_TOO_LOW", C.TRAIN_CURVES, C.WARN,
         "median KL < {kl_low:g} over {kl_window} iterations while the entropy stays >= {entropy_high_ratio:.0%} of "
         "its maximum and the return does not rise: updates do not move the policy (an advisory while nothing shows "
         "the return is learnable: it never rose beyond return_noise_z sigmas of its noise and the value "
         "function never explained > {value_ev_signal:g} of it)", CurveThresholds,
         evidence=("module_id", "kl_median", "entropy_ratio", "knobs"), knobs=("lr",), view=_KL,
         needs=Needs(("kl_window",))),
    Rule("KL_TOO_HIGH", C.TRAIN_CURVES, C.WARN,
         "median KL > {kl_high:g} over {kl_window} iterations, with the return stalled or the entropy falling "
         "steeply", CurveThresholds, evidence=("module_id", "kl_median", "knobs"),
         knobs=("lr", "clip_param", "num_epochs"), view=_KL,
         needs=Needs(("kl_window",))),
    Rule("KL_SPIKE", C.TRAIN_CURVES, C.FAIL,
         "one iteration's KL > {kl_spike_factor:g}x the running median ({kl_spike_factor:g}x kl_target before 3 "
         "readings) and > {kl_high:g}", CurveThresholds, evidence=("module_id", "kl", "reference", "factor", "knobs"),
         knobs=("lr", "clip_param", "num_epochs", "grad_clip"), view=_KL),
    Rule("POLICY_LOSS_STUCK", C.TRAIN_CURVES, C.WARN,
         "|policy loss| < {policy_loss_zero:g} and KL < {kl_stuck:g} for {policy_loss_stuck_iters} iterations: no "
         "effective policy gradient (the traced clip fraction says whether the clip or the advantages stop it)",
         CurveThresholds, evidence=("module_id", "policy_loss", "kl", "clip_fraction", "knobs"),
         knobs=("lambda_", "clip_param", "lr"), view=View(S.LEARNER_DIR, ("policy_loss",), "policy loss"),
         needs=Needs(("policy_loss_stuck_iters",))),
    Rule("VALUE_DOMINATES", C.TRAIN_CURVES, C.WARN,
         "shared trunk (vf_share_layers): the value head's gradient into the shared layers >= "
         "{value_grad_ratio:g}x the policy head's, and vf_loss_coeff x vf_loss > {value_loss_ratio:g}x "
         "|policy_loss|", CurveThresholds, evidence=("module_id", "trunk_grad_ratio", "loss_ratio", "knobs"),
         knobs=("vf_loss_coeff", "model_config"),
         view=View(S.LEARNER_DIR, ("vf_pi_trunk_ratio",), "value / policy gradient into the shared trunk")),
    Rule("LR_DECAYED", C.TRAIN_CURVES, C.WARN,
         "the learning rate fell below {lr_floor_ratio:.0%} of its first value while the policy stopped moving: "
         "|KL| < {lr_frozen_kl:g} on each of {kl_window} iterations (frozen), or median KL < {kl_low:g} with the "
         "return stalled or never past its noise (no KL recorded: the return stalled)", CurveThresholds, evidence=("module_id", "lr", "lr_first", "knobs"),
         knobs=("lr",), view=View(S.LEARNER_DIR, ("default_optimizer_learning_rate",), "learning rate"),
         needs=Needs((2,), learns=False)),
    Rule("VALUE_NOT_LEARNING", C.TRAIN_CURVES, C.WARN,
         "RLlib's vf_explained_var <= {value_ev_max:g} on each of the last {value_ev_window} iterations while the "
         "return is not rising (stalled below its best, or dropped): the critic explains none of the returns, so "
         "the advantages are noise", CurveThresholds,
         evidence=("module_id", "vf_explained_var", "window", "vf_loss", "vf_loss_unclipped", "vf_clip_param",
                   "knobs"),
         knobs=("vf_clip_param", "vf_loss_coeff", "lr"),
         view=View(S.LEARNER_DIR, ("vf_explained_var",), "value function explained variance"),
         needs=Needs(("value_ev_window",))),
)


@dataclass
class ModuleCurves:
    """The curve rules of one RLModule; :meth:`add` one :class:`Reading` per iteration."""

    module_id: str
    knobs: A.Knobs = field(default_factory=A.Knobs)
    thresholds: Thresholds = DEFAULT
    action_space: Any = None
    entropy_max: float | None = None
    entropy_dims: int = 0
    entropy_kind: str = ""
    ratios: deque = field(default_factory=lambda: deque(maxlen=64))
    kls: deque = field(default_factory=lambda: deque(maxlen=64))
    stuck: int = 0
    lr_first: float | None = None
    first_entropies: list = field(default_factory=list)
    armed: dict = field(default_factory=dict)
    below: int = 0
    trunk_ratios: deque = field(default_factory=lambda: deque(maxlen=8))
    value_ratios: deque = field(default_factory=lambda: deque(maxlen=8))
    grad_norms: deque = field(default_factory=lambda: deque(maxlen=64))
    kl_measured: bool = False
    explained: deque = field(default_factory=lambda: deque(maxlen=64))
    first_iteration: int | None = None

    def __post_init__(self) -> None:
        if self.entropy_max is None:
            self.entropy_max, self.entropy_dims, self.entropy_kind = max_entropy(
                self.action_space, normalized=self.knobs.flag("normalize_actions") is not False)

    # -- the entropy ratio ---------------------------------------------------------------
    def entropy_ratio(self, h: float) -> float | None:
        """Entropy as a share of its maximum (see :func:`max_entropy`). Without a known
        action space: H over the run's first reading when that reading is log n for an
        integer n >= 2 (a fresh RLlib policy over n discrete actions is near uniform);
        otherwise None (a continuous policy's scale cannot be guessed: the rule stays off)."""
        if self.entropy_max is None and self.entropy_kind == "" and len(self.first_entropies) >= 1:
            h0 = self.first_entropies[0]
            n = round(math.exp(h0)) if h0 > 0.5 else 0
            if n >= 2 and abs(h0 - math.log(n)) <= 0.03 * math.log(n):
                self.entropy_max, self.entropy_dims, self.entropy_kind = math.log(n), 1, "discrete(first reading)"
            else:
                self.entropy_kind = "unknown"
        if self.entropy_max is None:
            return None
        if self.entropy_kind.startswith("box"):
            return min(1.0, math.exp((h - self.entropy_max) / max(1, self.entropy_dims)))
        return max(0.0, h / self.entropy_max)

    def _collapsed_in_first_iteration(self) -> bool:
        """A fresh discrete policy starts near uniform (RLlib's logits layer starts near 0):
        one read at training iteration 1 already under the FAIL ratio fell inside that
        iteration, with no earlier reading to fit a slope on. Not for a Box policy (its
        starting std against the box is the user's) nor a run resumed past iteration 1."""
        th = self.thresholds
        return (self.entropy_kind == "discrete" and self.first_iteration == 1 and len(self.ratios) >= 1
                and len(self.ratios) <= th.entropy_slope_window
                and self.ratios[0] < th.entropy_collapse_fail_ratio)

    # -- one iteration -------------------------------------------------------------------
    def add(self, r: Reading, run: RunContext) -> list[Finding]:
        th, out = self.thresholds, []
        if r.lr is not None and self.lr_first is None:
            self.lr_first = r.lr
        if r.grad_norm is not None:
            self.grad_norms.append(r.grad_norm)
        ratio = None
        if r.entropy is not None:
            if len(self.first_entropies) < 3:
                self.first_entropies.append(r.entropy)
            ratio = self.entropy_ratio(r.entropy)
            if ratio is not None:
                self.ratios.append(ratio)
        fall = least_squares_slope(list(self.ratios)[-th.entropy_slope_window:]) if ratio is not None else None
        steep = fall is not None and len(self.ratios) >= 2 and fall <= -th.entropy_collapse_slope
        if r.entropy is not None and self.first_iteration is None:
            self.first_iteration = r.iteration
        steep = steep or (ratio is not None and self._collapsed_in_first_iteration())
        for rule in (self._entropy, self._kl, self._policy_loss, self._value, self._lr, self._value_learning):
            f = rule(r, run, ratio, fall, steep)
            if f is not None:
                out.append(f)
        return out


    def _where(self) -> str:
        return f"module {self.module_id!r}"

    def _entropy(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        th = self.thresholds
        if ratio is None:
            return None
        self.below = self.below + 1 if ratio < th.entropy_collapse_ratio else 0
        second = steep or run.dropped or bool(run.stalled)
        if not once(self.armed, "entropy", self.below >= 2 and second):
            return None
        status = C.FAIL if ratio < th.entropy_collapse_fail_ratio else C.WARN
        knobs = A.entropy_knobs(self.knobs, r.entropy_coeff, r.lr)
        fell = slope is not None and len(self.ratios) >= 2 and slope <= -th.entropy_collapse_slope
        why = (f"falling at {slope:+.3f} of the maximum per iteration (fit over the last "
               f"{min(len(self.ratios), th.entropy_slope_window)})" if fell else
               f"fallen inside the first iteration (a fresh policy starts near uniform; {self.ratios[0]:.2%} of "
               f"the maximum at iteration 1)" if steep else
               "with the return " + ("dropped" if run.dropped else "stalled"))
        return Finding(C.ENTROPY_COLLAPSE, (
            f"{self._where()}: policy entropy {r.entropy:.4g} is {ratio:.1%} of its maximum "
            f"({self.entropy_max:.4g}, {self.entropy_kind}) on {self.below} iterations, {why}; expected >= "
            f"{th.entropy_collapse_ratio:.0%} (30-60% is usual for a healthy run): the policy is collapsing onto few actions "
            f"and stops exploring" + A.advice_text(knobs)),
            {"module_id": self.module_id, "entropy": r.entropy, "entropy_ratio": ratio, "entropy_max": self.entropy_max,
             "normalised_by": self.entropy_kind, "slope_per_iteration": slope, "return_stalled": run.stalled,
             "return_dropped": run.dropped, "threshold": th.entropy_collapse_ratio,
             "fail_below": th.entropy_collapse_fail_ratio, "slope_threshold": -th.entropy_collapse_slope,
             "knobs": [k.as_dict() for k in knobs]}, status=status)

    def _kl(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        th = self.thresholds
        if r.kl is None or self.knobs.use_kl_loss is False:
            return None
        if r.kl != 0.0:
            self.kl_measured = True
        if not self.kl_measured:  # RLlib logs 0.0 when it does not compute the KL (APPO's default)
            return None
        previous = list(self.kls)[-th.kl_window:]
        self.kls.append(max(0.0, r.kl))
        kl = max(0.0, r.kl)
        # KL_SPIKE: against the run's own median once it has one, before that against kl_target
        ref = statistics.median(previous) if len(previous) >= 3 else (self.knobs.kl_target or 0.01)
        spike = kl > th.kl_spike_factor * max(ref, 1e-12) and kl > th.kl_high
        if once(self.armed, "kl_spike", spike):
            knobs = A.spike_knobs(self.knobs, r.lr, kl, _median(self.grad_norms))
            basis = "the median of the previous iterations" if len(previous) >= 3 else "kl_target"
            return Finding(C.KL_SPIKE, (
                f"{self._where()}: KL between the old and the new policy jumped to {kl:.4g} in one iteration, "
                f"{kl / max(ref, 1e-12):.0f}x {basis} ({ref:.4g}); expected <= {th.kl_spike_factor:g}x: the policy "
                f"leapt in one update -- a step far too large, or a bug (log-probs of the wrong actions, an "
                f"advantage that carries gradients)" + A.advice_text(knobs)),
                {"module_id": self.module_id, "kl": kl, "reference": ref, "reference_basis": basis,
                 "factor": kl / max(ref, 1e-12), "threshold_factor": th.kl_spike_factor, "kl_high": th.kl_high,
                 "knobs": [k.as_dict() for k in knobs]})
        window = list(self.kls)[-th.kl_window:]
        if len(window) < th.kl_window:
            return None
        med = statistics.median(window)
        high = med > th.kl_high and (bool(run.stalled) or run.dropped or steep)
        if once(self.armed, "kl_high", high):
            knobs = A.kl_high_knobs(self.knobs, r.lr, med)
            return Finding(C.KL_TOO_HIGH, (
                f"{self._where()}: median KL {med:.4g} over the last {len(window)} iterations; expected "
                f"{th.kl_low:g}-{th.kl_high:g} (0.01-0.03 ideal), with the return {_trend(run)}"
                f"{' and the entropy falling fast' if steep else ''}: each update moves the policy too far"
                + A.advice_text(knobs)),
                {"module_id": self.module_id, "kl_median": med, "window": len(window), "kl_high": th.kl_high,
                 "return_stalled": run.stalled, "entropy_slope": slope, "knobs": [k.as_dict() for k in knobs]})
        low = (med < th.kl_low and ratio is not None and ratio >= th.entropy_high_ratio and run.stalled is True
               and not self._stuck_now(th))
        if once(self.armed, "kl_low", low):
            knobs = [x for x in [A.raise_lr(self.knobs, r.lr, med, "larger steps")] if x]
            if self.nothing_to_learn_seen(run, r):
                return self._nothing_to_learn(med, ratio, run, knobs)
            return Finding(C.KL_TOO_LOW, (
                f"{self._where()}: median KL {med:.4g} over the last {len(window)} iterations with the entropy "
                f"still at {ratio:.0%} of its maximum and the return not rising; expected KL >= {th.kl_low:g}: "
                f"the updates barely move the policy (a step size or a clip too small)" + A.advice_text(knobs)),
                {"module_id": self.module_id, "kl_median": med, "entropy_ratio": ratio, "kl_low": th.kl_low,
                 "return_stalled": run.stalled, "knobs": [k.as_dict() for k in knobs]})
        return None

    def nothing_to_learn_seen(self, run: RunContext, r: Reading) -> bool:
        """Whether nothing so far shows the return can be learnt: it never rose beyond its own
        noise (measured, and not zero) and the value function never explained a share of it.
        An env whose rewards are noise by design looks like this, and so does a run whose
        steps are too small to move anything yet: a rule must not then say which."""
        if run.learned is not False or not run.noise:
            return False
        evs = [e for e in list(self.explained) + [r.stat("vf_explained_var")] if e is not None]
        return not any(e > self.thresholds.value_ev_signal for e in evs)

    def _nothing_to_learn(self, med: float, ratio: float, run: RunContext, knobs: list) -> Finding:
        th = self.thresholds
        return advisory(C.KL_TOO_LOW, (
            f"{self._where()}: median KL {med:.4g} over the last {th.kl_window} iterations with the entropy at "
            f"{ratio:.0%} of its maximum, but the return never rose beyond {th.return_noise_z:g}x its noise (sigma "
            f"{run.noise:.3g} of the smoothed mean) and the value function never explained more than "
            f"{th.value_ev_signal:.0%} of it: nothing shows a learnable return yet -- rewards that do not depend on "
            f"the observations and actions (by design, or a bug in the reward), or steps too small to tell; if the "
            f"env is meant to be learnable, check the reward first" + A.advice_text(knobs)),
            {"module_id": self.module_id, "kl_median": med, "entropy_ratio": ratio, "kl_low": th.kl_low,
             "return_noise_sigma": run.noise, "value_ev_signal": th.value_ev_signal, "nothing_to_learn": True,
             "knobs": [k.as_dict() for k in knobs]})

    def _stuck_now(self, th: Thresholds) -> bool:
        return self.stuck >= th.policy_loss_stuck_iters

    def _policy_loss(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        th = self.thresholds
        if r.policy_loss is None or r.kl is None or not self.kl_measured:
            return None
        flat = abs(r.policy_loss) < th.policy_loss_zero and abs(r.kl) < th.kl_low / 10
        self.stuck = self.stuck + 1 if flat else 0
        if not once(self.armed, "stuck", self._stuck_now(th)):
            return None
        clip = r.clip_fraction
        knobs = A.stuck_knobs(self.knobs, r.lr, clip)
        if clip is None:
            why = "every ratio is clipped or the advantages carry no signal (the clip fraction was not traced)"
        elif clip >= 0.5:
            why = f"the clip fraction is {clip:.0%}: most ratios sit past the clip, which passes no gradient"
        else:
            why = (f"the clip fraction is {clip:.0%}, so the clip is not what stops it: the advantages carry no "
                   f"signal")
        return Finding(C.POLICY_LOSS_STUCK, (
            f"{self._where()}: |policy loss| < {th.policy_loss_zero:g} and KL < {th.kl_low / 10:g} on {self.stuck} "
            f"iterations in a row (now {r.policy_loss:.3g}, KL {r.kl:.3g}); expected a surrogate that moves: "
            + why + A.advice_text(knobs)),
            {"module_id": self.module_id, "policy_loss": r.policy_loss, "kl": r.kl, "iterations": self.stuck,
             "clip_fraction": clip, "knobs": [k.as_dict() for k in knobs]})

    def _value(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        """Only a shared trunk can be swamped: with separate networks Adam scales each
        network's step on its own (measured: vf_loss_coeff=1000 there learns to 474)."""
        th, k = self.thresholds, self.knobs
        if k.vf_share_layers is not True or r.vf_loss is None or r.policy_loss is None:
            return None
        coeff = k.vf_loss_coeff if k.vf_loss_coeff is not None else 1.0
        self.value_ratios.append(coeff * r.vf_loss / max(abs(r.policy_loss), 1e-8))
        if r.vf_pi_trunk_ratio is not None:
            self.trunk_ratios.append(r.vf_pi_trunk_ratio)
        n = 3
        if len(self.trunk_ratios) < n or len(self.value_ratios) < n:
            return None
        grad = statistics.median(list(self.trunk_ratios)[-n:])
        loss = statistics.median(list(self.value_ratios)[-n:])
        if not once(self.armed, "value", grad >= th.value_grad_ratio and loss >= th.value_loss_ratio):
            return None
        knobs = A.value_knobs(k, grad)
        return Finding(C.VALUE_DOMINATES, (
            f"{self._where()}: in the shared trunk (vf_share_layers=True) the value head's gradient is {grad:.3g}x "
            f"the policy head's (median of the last {n} traces) and vf_loss_coeff x vf_loss is {loss:.3g}x "
            f"|policy loss|; expected < {th.value_grad_ratio:g}x: the shared layers learn the value only and the "
            f"policy rides on features it did not shape" + A.advice_text(knobs)),
            {"module_id": self.module_id, "trunk_grad_ratio": grad, "loss_ratio": loss,
             "vf_loss_coeff": coeff, "threshold_grad": th.value_grad_ratio, "threshold_loss": th.value_loss_ratio,
             "knobs": [x.as_dict() for x in knobs]})

    def _lr(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        th = self.thresholds
        if r.lr is None or not self.lr_first:
            return None
        window = list(self.kls)[-th.kl_window:]
        # the return "stalled" (flat below its best) misses a return frozen near its start by a
        # decayed lr: a noisy return never holds flat, so with the policy measured still, a
        # return that never rose beyond its noise counts too (an annealed run that learned
        # and rests at its best is neither)
        frozen = "stalled" if run.stalled is True else "never rose beyond its noise" if run.learned is False else None
        full = len(window) >= th.kl_window
        still = full and statistics.median(window) < th.kl_low
        if full and max(abs(k) for k in window) < th.lr_frozen_kl:   # the updates move nothing at all
            frozen, still = f"did not move for {th.kl_window} iterations (|KL| < {th.lr_frozen_kl:g})", True
        stopped = (still and frozen is not None) if self.kl_measured else run.stalled is True
        decayed = r.lr < th.lr_floor_ratio * self.lr_first and stopped
        if not once(self.armed, "lr", decayed):
            return None
        knobs = A.lr_floor_knobs(self.knobs, self.lr_first, int(r.env_steps) if r.env_steps else None)
        why = ("the policy " + frozen if frozen.startswith("did not") else
               f"the policy stopped moving (KL < {th.kl_low:g}) and the return {frozen}") if self.kl_measured \
            else "the return stalled"
        return Finding(C.LR_DECAYED, (
            f"{self._where()}: the learning rate decayed to {r.lr:.3g}, {r.lr / self.lr_first:.1%} of its first value "
            f"{self.lr_first:.3g}, while {why}; "
            f"expected >= {th.lr_floor_ratio:.0%} until the return plateaus (a schedule to ~0 freezes the "
            f"critic)" + A.advice_text(knobs)),
            {"module_id": self.module_id, "lr": r.lr, "lr_first": self.lr_first, "floor_ratio": th.lr_floor_ratio,
             "knobs": [k.as_dict() for k in knobs]})

    def _value_learning(self, r: Reading, run: RunContext, ratio, slope, steep) -> Finding | None:
        """A critic whose predictions explain none of the returns' variance (DLR-RM/stable-baselines3#25:
        a PPO that "does not learn" at explained variance -1.57). Healthy RLlib PPO runs hover
        at 0-0.25 while the return climbs, which is why the return must also have stopped rising."""
        th, ev = self.thresholds, r.stat("vf_explained_var")
        if ev is None:
            return None
        self.explained.append(ev)
        window = list(self.explained)[-th.value_ev_window:]
        # where nothing shows the return is learnable (noise by design), the best critic predicts
        # its mean: EV ~ 0 is then right, and only a critic doing worse than the mean is wrong
        ceiling = th.value_ev_worse if self.nothing_to_learn_seen(run, r) else th.value_ev_max
        flat = len(window) >= th.value_ev_window and max(window) <= ceiling
        if not once(self.armed, "value_learning", flat and (run.stalled is True or run.dropped)):
            return None
        clip, unclipped = self.knobs.number("vf_clip_param"), r.stat("vf_loss_unclipped")
        knobs = _value_learning_knobs(self.knobs, r, clip, unclipped)
        clipped = (f"; vf_loss {r.vf_loss:.3g} sits at vf_clip_param {clip:g} while the unclipped squared error is "
                   f"{unclipped:.3g}: RLlib clips each sample's value loss at vf_clip_param, so most samples give "
                   f"the critic no gradient" if clip and unclipped and unclipped > clip and r.vf_loss is not None
                   else "")
        return Finding(C.VALUE_NOT_LEARNING, (
            f"{self._where()}: the value function's explained variance was <= {th.value_ev_max:g} on each of the "
            f"last {len(window)} iterations (now {ev:.3g}, lowest {min(window):.3g}) while the return "
            f"{'dropped' if run.dropped else 'stalled below its best'}; expected > {th.value_ev_max:g}: the critic "
            f"predicts the returns no better than their mean, so the advantages are mostly noise{clipped}"
            + A.advice_text(knobs)),
            {"module_id": self.module_id, "vf_explained_var": ev, "window": window, "threshold": th.value_ev_max,
             "vf_loss": r.vf_loss, "vf_loss_unclipped": unclipped, "vf_clip_param": clip,
             "return_stalled": run.stalled, "return_dropped": run.dropped, "knobs": [k.as_dict() for k in knobs]})


def _value_learning_knobs(k: A.Knobs, r: Reading, clip: float | None, unclipped: float | None) -> list[A.Knob]:
    """The clip first (RLlib's vf_clip_param is in squared-return units: 10 clips almost every
    sample of a task whose returns are in the hundreds); else the value loss's weight where a
    shared trunk splits the gradient; else a larger step for the critic."""
    if clip and unclipped and unclipped > clip:
        return [A.vf_clip_knob(clip, unclipped)]
    if k.vf_share_layers is True:
        coeff = k.vf_loss_coeff if k.vf_loss_coeff is not None else 1.0
        return [A.Knob("vf_loss_coeff", coeff, float(f"{coeff * 3:.2g}"),
                       "the value loss's weight in the shared trunk's gradient")]
    lr = r.lr if r.lr is not None else k.lr
    return [A.Knob("lr", lr, float(f"{lr * 3:.2g}"), "the critic's steps are too small to fit the returns")] \
        if lr else []

def _trend(run: RunContext) -> str:
    """What the return did, as the cross-check read it (None: too few iterations to say)."""
    if run.dropped:
        return "dropped"
    return {True: "stalled", False: "rising"}.get(run.stalled, "not yet judged (too few iterations)")


def _median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None
