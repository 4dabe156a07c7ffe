"""The off-policy learners' own curves: Q-values against what the rewards allow (DQN, SAC) and
SAC's temperature against its target entropy. No Ray.

RLlib 2.60 reports them per module in ``result["learners"][module_id]``: ``qf_mean``,
``qf_max``, ``qf_min``, ``td_error_mean`` (the mean |TD error|), and for SAC ``alpha_value``,
``logps`` (the mean log-probability of the policy's actions: its entropy is ``-logps``) and
``target_entropy``. So every rule here works on a plain ``result.json`` too; the bound the
Q-values are judged against is tighter with Flow1Callbacks, whose learner tracing reads the
train batch's reward range (without it, the episodes' returns bound it).

Measured (RLlib defaults, seed 0): DQN CartPole's Q stays in [0.4, 46] while returns are
20-500 (all rewards 1, gamma 0.99: Q may take [0, 100]), TD error 0.4-3; ``lr=0.5`` sends
``qf_min`` to -105 and ``qf_max`` to 148 with a TD error of 100 (a Q of -105 when every
reward is +1). SAC Pendulum (rewards in [-16.3, 0]) keeps Q in [-67, 0.2]; its alpha falls
1.0 -> 0.58 in 2,000 steps while the entropy (0.68) stays above the target (-1): by design.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...common import codes as C
from ...common import schema as S
from .. import advice as A
from ..findings import Finding
from .learner_reading import Reading, RunContext, least_squares_slope, once
from ..rule import Needs, Rule, View
from ..thresholds import DEFAULT, Thresholds


#: IMPALA's mean importance ratio as flow1's tracing measures it (APPO's is RLlib's mean_IS)
IS_MEAN = "is_mean"


@dataclass(frozen=True)
class OffPolicyThresholds:
    """TRAIN_CURVES of Q-learning and SAC: the Q range the rewards allow and SAC's temperature."""

    q_excess: float = 0.25           # Q_DIVERGENCE: qf_max / qf_min beyond the range the rewards allow by this share of it ...
    q_window: int = 2                # ... on this many iterations in a row ...
    q_td_share: float = 0.25         # ... and the mean |TD error| above this share of that range, or doubled
    alpha_floor: float = 1e-3        # ALPHA_COLLAPSE: SAC's alpha below this ...
    alpha_ceiling: float = 10.0      # ALPHA_EXPLODING: alpha above this x its initial value ...
    alpha_window: int = 3            # ... on this many iterations, with the entropy below its target
    is_mean_high: float = 1.4        # POLICY_LAG (APPO): the mean IS ratio (RLlib clips it at 2) at or above this ...
    is_window: int = 2               # ... on this many iterations, with the entropy collapsing or the return stalled


_Q = View(S.LEARNER_DIR, ("qf_mean", "qf_max", "qf_min"), "Q values")
_ALPHA = View(S.LEARNER_DIR, ("alpha_value",), "SAC temperature alpha")
_LAG = View(S.LEARNER_DIR, ("diff_num_grad_updates_vs_sampler_policy", "mean_IS", IS_MEAN), "policy lag and IS ratio")

RULES = (
    Rule("Q_DIVERGENCE", C.TRAIN_CURVES, C.WARN,
         "qf_max or qf_min beyond the range the rewards and gamma allow ([min(0, r_min), max(0, r_max)] / (1 - "
         "gamma^n_step); from the episodes' returns without tracing) by more than {q_excess:.0%} of it on "
         "{q_window} iterations in a row, and the mean |TD error| above {q_td_share:.0%} of that range or doubled",
         OffPolicyThresholds,
         evidence=("module_id", "qf_min", "qf_max", "q_range", "range_from", "td_error_mean", "knobs"),
         knobs=("lr", "critic_lr", "tau", "target_network_update_freq", "double_q", "grad_clip"), view=_Q),
    Rule("ALPHA_COLLAPSE", C.TRAIN_CURVES, C.WARN,
         "SAC's alpha < {alpha_floor:g} on {alpha_window} iterations while the policy's entropy (-logps) is below "
         "target_entropy, or falls with alpha not adapting: the entropy bonus is gone and the policy stops exploring",
         OffPolicyThresholds, evidence=("module_id", "alpha", "entropy", "target_entropy", "knobs"),
         knobs=("initial_alpha", "alpha_lr"), view=_ALPHA,
         needs=Needs(("alpha_window",))),
    Rule("ALPHA_EXPLODING", C.TRAIN_CURVES, C.WARN,
         "SAC's alpha > {alpha_ceiling:g}x initial_alpha and rising on {alpha_window} iterations while the entropy "
         "stays below target_entropy: the target cannot be reached and the entropy term swamps the reward",
         OffPolicyThresholds, evidence=("module_id", "alpha", "entropy", "target_entropy", "knobs"),
         knobs=("target_entropy", "alpha_lr"), view=_ALPHA,
         needs=Needs(("alpha_window",))),
    Rule("POLICY_LAG", C.TRAIN_CURVES, C.WARN,
         "APPO, IMPALA: the mean importance ratio between the behaviour policy and the learner's (APPO: RLlib's "
         "mean_IS; IMPALA, which logs none: measured on traced updates the same way; each clipped at 2) >= "
         "{is_mean_high:g} on {is_window} iterations, with the entropy collapsing or the return stalled: the samples "
         "come from a policy too far behind the learner (its lag: diff_num_grad_updates_vs_sampler_policy)",
         OffPolicyThresholds,
         evidence=("module_id", "mean_IS", "var_IS", "policy_lag", "knobs"),
         knobs=("lr", "broadcast_interval", "circular_buffer_iterations_per_batch"), view=_LAG,
         needs=Needs(("is_window",), learns=False)),
)


@dataclass
class ModuleOffPolicy:
    """The off-policy rules of one RLModule; :meth:`add` one :class:`Reading` per iteration."""

    module_id: str
    knobs: A.Knobs = field(default_factory=A.Knobs)
    thresholds: Thresholds = DEFAULT
    action_space: Any = None
    reward_lo: float | None = None      # the traced train batches' reward range, running
    reward_hi: float | None = None
    outside: int = 0
    inside: int = 0
    tds: deque = field(default_factory=lambda: deque(maxlen=64))
    alphas: deque = field(default_factory=lambda: deque(maxlen=16))
    entropies: deque = field(default_factory=lambda: deque(maxlen=16))
    armed: dict = field(default_factory=dict)
    is_high: int = 0

    def add(self, r: Reading, run: RunContext, entropy_ratio: float | None = None,
            entropy_falling: bool = False) -> list[Finding]:
        lo, hi = r.reward_min, r.reward_max
        if lo is not None and hi is not None:
            self.reward_lo = lo if self.reward_lo is None else min(self.reward_lo, lo)
            self.reward_hi = hi if self.reward_hi is None else max(self.reward_hi, hi)
        return [f for f in (self._q(r, run), self._alpha(r), self._lag(r, run, entropy_ratio, entropy_falling))
                if f is not None]

    # -- Q-values ------------------------------------------------------------------------
    def q_range(self, run: RunContext) -> tuple[float, float, str] | None:
        """The interval a Q-value can take: the discounted sum of rewards in the reward range
        seen (n-step rewards bootstrap with gamma^n); without a reward range, +-the largest
        of the largest |episode return| and the mean |reward| per step / (1 - gamma) (an
        episode truncated before 1 / (1 - gamma) steps bootstraps past its return)."""
        gamma = self.knobs.number("gamma") or 0.99
        n = int(self.knobs.number("n_step") or 1)
        horizon = 1.0 / max(1e-9, 1.0 - gamma ** max(1, n))
        if self.reward_lo is not None and self.reward_hi is not None:
            return min(0.0, self.reward_lo) * horizon, max(0.0, self.reward_hi) * horizon, (
                f"rewards in [{self.reward_lo:.3g}, {self.reward_hi:.3g}] (traced train batches), gamma {gamma:g}"
                + (f", n_step {n}" if n > 1 else ""))
        if run.return_abs_max is None:
            return None
        per_step = run.return_abs_max / max(1.0, run.episode_len_mean or 1.0)
        b = max(run.return_abs_max, per_step / max(1e-9, 1.0 - gamma))
        return -b, b, f"|episode return| up to {run.return_abs_max:.3g} (no reward range traced), gamma {gamma:g}"

    def _q(self, r: Reading, run: RunContext) -> Finding | None:
        th = self.thresholds
        qmax, qmin, td = r.stat("qf_max"), r.stat("qf_min"), r.stat("td_error_mean")
        if qmax is None or qmin is None:
            return None
        if td is not None:
            self.tds.append(abs(td))
        bound = self.q_range(run)
        if bound is None:
            return None
        lo, hi, basis = bound
        width = hi - lo
        if not width > 0:   # no non-zero reward seen yet: any Q is as good as another
            return None
        beyond = qmax > hi + th.q_excess * width or qmin < lo - th.q_excess * width
        self.outside = self.outside + 1 if beyond else 0
        tds = list(self.tds)
        td_big = td is not None and abs(td) > th.q_td_share * width
        td_grew = len(tds) >= 6 and statistics.median(tds[-3:]) > 2 * statistics.median(tds[:3])
        # one finding per incident: a critic back in range re-arms the rule only after 5
        # iterations there (a diverging critic swings in and out of range: one incident)
        self.inside = 0 if beyond else self.inside + 1
        if self.inside >= 5:
            self.armed["q"] = True
        if not (self.outside >= th.q_window and (td_big or td_grew)) or not self.armed.get("q", True):
            return None
        self.armed["q"] = False
        knobs = _q_knobs(self.knobs)
        side = (f"qf_min {qmin:.3g} < {lo:.3g}" if qmin < lo - th.q_excess * width else
                f"qf_max {qmax:.3g} > {hi:.3g}")
        td_text = (f"the mean |TD error| {abs(td):.3g} is {abs(td) / width:.0%} of that range" if td_big else
                   f"the mean |TD error| doubled ({statistics.median(tds[:3]):.3g} -> {statistics.median(tds[-3:]):.3g})")
        return Finding(C.Q_DIVERGENCE, (
            f"module {self.module_id!r}: the Q-values left the range the rewards allow on {self.outside} "
            f"iterations in a row ({side}; Q in [{qmin:.3g}, {qmax:.3g}], allowed [{lo:.3g}, {hi:.3g}] from "
            f"{basis}), and {td_text}; expected Q inside that range: values no policy can earn here, the critic "
            f"bootstraps on its own errors" + A.advice_text(knobs)),
            {"module_id": self.module_id, "qf_min": qmin, "qf_max": qmax, "qf_mean": r.stat("qf_mean"),
             "q_range": [lo, hi], "range_from": basis, "td_error_mean": td, "iterations": self.outside,
             "excess": th.q_excess, "knobs": [k.as_dict() for k in knobs]})

    # -- SAC's temperature ---------------------------------------------------------------
    def _alpha(self, r: Reading) -> Finding | None:
        th = self.thresholds
        alpha, logps, target = r.stat("alpha_value"), r.stat("logps"), r.stat("target_entropy")
        if alpha is None or logps is None or target is None:
            return None
        self.alphas.append(alpha)
        self.entropies.append(-logps)
        n = th.alpha_window
        if len(self.alphas) < n:
            return None
        alphas, ents = list(self.alphas)[-n:], list(self.entropies)[-n:]
        below = all(h < target for h in ents)
        frozen = max(alphas) - min(alphas) <= 1e-6 * max(abs(alphas[0]), 1e-12)
        falling = least_squares_slope(ents) < 0 and ents[-1] < ents[0]
        collapse = all(a < th.alpha_floor for a in alphas) and (below or (frozen and falling))
        if once(self.armed, "alpha_low", collapse):
            knobs = _alpha_low_knobs(self.knobs, frozen)
            why = ("below its target" if below else "falling while alpha does not move (a fixed alpha: alpha_lr=0)")
            return Finding(C.ALPHA_COLLAPSE, (
                f"module {self.module_id!r}: SAC's temperature alpha is {alpha:.3g} (< {th.alpha_floor:g} on {n} "
                f"iterations) with the policy's entropy {-logps:.3g} {why} (target_entropy {target:.3g}); "
                f"expected alpha to rise while the entropy is under its target: the entropy bonus is gone and the "
                f"policy stops exploring" + A.advice_text(knobs)),
                {"module_id": self.module_id, "alpha": alpha, "entropy": -logps, "target_entropy": target,
                 "alpha_frozen": frozen, "entropy_window": ents, "floor": th.alpha_floor,
                 "knobs": [k.as_dict() for k in knobs]})
        initial = self.knobs.number("initial_alpha") or 1.0
        rising = all(b > a for a, b in zip(alphas, alphas[1:]))
        if once(self.armed, "alpha_high", all(a > th.alpha_ceiling * initial for a in alphas) and rising and below):
            knobs = _alpha_high_knobs(self.knobs, r, _action_dims(self.action_space))
            return Finding(C.ALPHA_EXPLODING, (
                f"module {self.module_id!r}: SAC's temperature alpha rose to {alpha:.3g}, "
                f"{alpha / initial:.0f}x initial_alpha {initial:g}, on each of {n} iterations while the policy's "
                f"entropy {-logps:.3g} stays below target_entropy {target:.3g}; expected the entropy to reach its "
                f"target and alpha to settle: the target is out of the policy's reach and the entropy term swamps "
                f"the reward" + A.advice_text(knobs)),
                {"module_id": self.module_id, "alpha": alpha, "initial_alpha": initial, "entropy": -logps,
                 "target_entropy": target, "ceiling": th.alpha_ceiling, "knobs": [k.as_dict() for k in knobs]})
        return None


    # -- APPO, IMPALA: samples from a policy far behind the learner ---------------------------
    def _lag(self, r: Reading, run: RunContext, entropy_ratio: float | None, falling: bool) -> Finding | None:
        """RLlib's APPO weighs each sample by exp(behaviour - target) clipped to [0, 2]
        (``mean_IS``, ``var_IS``); IMPALA logs no such number, so flow1's tracing computes the
        same mean from the traced update's own forward output (``is_mean``). Measured, CartPole: healthy 1.0-1.18 with a lag of ~5.6
        updates; ``lr=0.05`` drives it to 1.53-1.82 at the same lag, the entropy to 0.002."""
        th = self.thresholds
        mean_is, traced = r.stat("mean_IS"), False
        if mean_is is None and r.is_mean is not None:   # IMPALA: flow1's tracing measured it
            mean_is, traced = r.is_mean, True
        if mean_is is None:
            return None
        self.is_high = self.is_high + 1 if mean_is >= th.is_mean_high else 0
        collapsing = falling or (entropy_ratio is not None and entropy_ratio < th.entropy_collapse_ratio)
        second = collapsing or run.stalled is True or run.dropped
        if not once(self.armed, "lag", self.is_high >= th.is_window and second):
            return None
        lag = r.stat("diff_num_grad_updates_vs_sampler_policy")
        knobs = _lag_knobs(self.knobs, r.lr)
        why = ("the entropy collapsing" if collapsing else
               "the return " + ("dropped" if run.dropped else "stalled below its best"))
        return Finding(C.POLICY_LAG, (
            f"module {self.module_id!r}: the mean importance ratio behaviour / target policy is {mean_is:.3g} on "
            f"{self.is_high} iterations ({'measured on traced updates, ' if traced else ''}each clipped at 2; "
            f"expected near 1, healthy <= 1.2) with {why}"
            f"{'' if lag is None else f', the samples {lag:.3g} updates behind the learner'}: each update moves the "
            f"policy so far that the runners' samples no longer describe it, and the clipped ratios bias the "
            f"update" + A.advice_text(knobs)),
            {"module_id": self.module_id, "mean_IS": mean_is, "measured_by": "flow1 tracing" if traced else "RLlib",
             "var_IS": r.stat("var_IS"), "policy_lag": lag,
             "threshold": th.is_mean_high, "knobs": [k.as_dict() for k in knobs]})


def _lag_knobs(k: A.Knobs, lr_now: float | None) -> list[A.Knob]:
    out = []
    lr = lr_now if lr_now is not None else k.lr
    if lr:
        out.append(A.Knob("lr", lr, A._round(lr / 10), "smaller steps keep the learner near its runners' policy"))
    b = k.number("broadcast_interval")
    if b is not None and b > 1:
        out.append(A.Knob("broadcast_interval", int(b), 1, "send the runners new weights after every update"))
    it = k.number("circular_buffer_iterations_per_batch")
    if it is not None and it > 2:
        out.append(A.Knob("circular_buffer_iterations_per_batch", int(it), 2, "fewer updates on each old batch"))
    return out


def _q_knobs(k: A.Knobs) -> list[A.Knob]:
    """A diverging critic: slower target updates, double Q, a smaller step, a clipped gradient."""
    out: list[A.Knob] = []
    tau, freq = k.number("tau"), k.number("target_network_update_freq")
    if tau is not None and tau < 1.0 and tau > 0.01:
        out.append(A.Knob("tau", tau, 0.005, "a slower-moving target stops the critic chasing itself"))
    elif freq is not None and (tau is None or tau >= 1.0) and 0 < freq < 500:
        out.append(A.Knob("target_network_update_freq", int(freq), 500,
                          "a target copied this often lets the critic chase itself"))
    if k.flag("double_q") is False:
        out.append(A.Knob("double_q", False, True, "double Q learning removes the max operator's overestimate"))
    for name in ("lr", "critic_lr"):
        lr = k.number(name)
        if lr:
            out.append(A.Knob(name, lr, A._round(lr / 10), "the critic's steps overshoot its targets"))
            break
    if k.grad_clip is None and k.known:
        out.append(A.Knob("grad_clip", None, 10.0, "a bounded step per update"))
    return out


def _alpha_low_knobs(k: A.Knobs, frozen: bool) -> list[A.Knob]:
    out = []
    alpha_lr = k.number("alpha_lr")
    if frozen and alpha_lr is not None and alpha_lr <= 0:
        out.append(A.Knob("alpha_lr", alpha_lr, 3e-4, "let alpha adapt towards the target entropy (RLlib's default)"))
    initial = k.number("initial_alpha")
    if initial is not None and initial < 0.1:
        out.append(A.Knob("initial_alpha", initial, 1.0, "start from RLlib's default temperature"))
    return out


def _action_dims(space: Any) -> int | None:
    shape = getattr(space, "shape", None)
    return int(np.prod(shape)) if shape else None


def _alpha_high_knobs(k: A.Knobs, r: Reading, dims: int | None) -> list[A.Knob]:
    out = []
    target = r.stat("target_entropy")
    if target is not None:
        aim = -(dims or 1.0)
        if target > aim:
            out.append(A.Knob("target_entropy", target, "auto",
                              f"RLlib's 'auto' is -dim(actions) ({aim:g} here): an entropy a squashed Gaussian can reach"))
    alpha_lr = k.number("alpha_lr")
    if alpha_lr:
        out.append(A.Knob("alpha_lr", alpha_lr, A._round(alpha_lr / 10), "a slower temperature"))
    return out
