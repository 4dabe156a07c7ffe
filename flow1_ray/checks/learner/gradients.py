"""Per-layer gradient and plasticity rules over what flow1's Learner tracing reported.

The tracing (:mod:`flow1_ray.learner.tracer`) logs, every ``grad_every`` updates, each
layer's gradient RMS, the module's global norm, the count of non-finite gradients and each
hidden layer's share of dormant units; RLlib carries them into
``result["learners"][module]["flow1"]``. Thresholds are relative to the module itself: a
healthy DQN's global norm is ~0.005 and a healthy APPO's ~43 (RLlib CartPole defaults,
measured), so no absolute bound fits both. No Ray here.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...common import codes as C
from ...common import schema as S
from .. import advice as A
from ..findings import Finding
from ..rule import Rule
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class GradientThresholds:
    """GRADIENT_FLOW: per-layer norms traced on the Learner (dormant units: Sokar et al. 2023,
    "The Dormant Neuron Phenomenon in Deep Reinforcement Learning")."""

    grad_vanishing_ratio: float = 1e-3       # a layer's gradient RMS < this x the median layer RMS of its stack
    grad_exploding_factor: float = 100.0     # a module's gradient norm > this x its own running median
    grad_persist_traces: int = 3             # vanishing / dormant findings need this many traces in a row
    grad_zero_traces: int = 2                # GRADIENT_ZERO needs this many traces in a row
    dormant_tau: float = 0.025               # a unit is dormant when its normalised mean |activation| <= tau
    dormant_share: float = 0.5               # DORMANT_UNITS: more than this share of a layer's units
    grad_saturated_share: float = 0.95       # GRADIENT_ZERO's cause activations_saturated: the tanh/sigmoid after the layer at a bound on this share of its outputs


RULES = (
    Rule("GRADIENT_VANISHING", C.GRADIENT_FLOW, C.WARN,
         "a layer's gradient RMS < {grad_vanishing_ratio:g} x the median layer's of its own stack, on "
         "{grad_persist_traces} traces", GradientThresholds),
    Rule("GRADIENT_EXPLODING", C.GRADIENT_FLOW, C.WARN,
         "a module's gradient norm > {grad_exploding_factor:g}x its own running median (FAIL: NaN/inf gradients)",
         GradientThresholds, knobs=("grad_clip", "grad_clip_by")),
    Rule("GRADIENT_ZERO", C.GRADIENT_FLOW, C.FAIL,
         "a trained layer's gradient exactly 0 on {grad_zero_traces} traces in a row, naming the layer and the "
         "loss term that cuts it (the value loss clamped at vf_clip_param, a zero coefficient, a `* 0` in the "
         "forward, an output no loss term uses)", GradientThresholds,
         evidence=("module_id", "layers", "cause", "reach", "knobs"), knobs=("vf_clip_param", "vf_loss_coeff")),
    Rule("LEARNER_NONFINITE", C.GRADIENT_FLOW, C.FAIL,
         "a module's loss NaN/inf on an update (every update's loss checked before the optimizer steps), or a "
         "gradient NaN/inf on a traced update; the update's state is dumped to repro/ for `flow1 replay`",
         evidence=("module_id", "loss_updates", "grad_updates", "repro")),
    Rule("DORMANT_UNITS", C.GRADIENT_FLOW, C.WARN,
         "loss of plasticity: > {dormant_share:.0%} of a hidden layer's units dormant (normalised mean "
         "|activation| <= {dormant_tau:g}, Sokar et al. 2023) on {grad_persist_traces} traces", GradientThresholds,
         knobs=("model_config", "lr")),
)

#: the key under ``result["learners"][module]`` where the tracing's numbers land
TRACE_KEY = "flow1"


def _stack(layer: str) -> str:
    """The container a layer is one of: ``a.net.mlp.2`` -> ``a.net.mlp``; a named layer
    (``a.fc_out``) -> ``a``."""
    head, _, last = layer.rpartition(".")
    return head or layer


def _index(layer: str) -> int:
    """A layer's position in its stack (``...mlp.2`` -> 2; 0 when it has none)."""
    last = layer.rsplit(".", 1)[-1]
    return int(last) if last.isdigit() else 0


def _serves_value(layer: str) -> bool:
    """A layer of the value function by RLlib's names: the value head ``vf.*`` and the
    critic's encoder ``encoder.critic_encoder.*`` (a custom module's ``value``/``critic``)."""
    return any(p == "vf" or p.startswith(("critic", "value", "vf_")) for p in layer.split("."))


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x


@dataclass
class LayerRules:
    """GRADIENT_ZERO / GRADIENT_VANISHING / GRADIENT_EXPLODING / DORMANT_UNITS for one module."""

    module_id: str
    knobs: A.Knobs = field(default_factory=A.Knobs)
    thresholds: Thresholds = DEFAULT
    zero_runs: dict = field(default_factory=dict)
    small_runs: dict = field(default_factory=dict)
    dormant_runs: dict = field(default_factory=dict)
    norms: deque = field(default_factory=lambda: deque(maxlen=32))
    reported: set = field(default_factory=set)

    def add(self, iteration: int, stats: Mapping, extras: Mapping | None = None, lr: float | None = None,
            entropy_ratio: float | None = None) -> list[Finding]:
        """``entropy_ratio``: the policy's entropy as a share of its maximum this iteration
        (a policy collapsed onto one action passes its layers no gradient)."""
        tr = stats.get(TRACE_KEY) if isinstance(stats, Mapping) else None
        if not isinstance(tr, Mapping):
            return []
        out: list[Finding] = self._nonfinite(tr, lr)
        if not (_num(tr.get("traces")) or 0) > 0:
            return out
        rms = {k: _num(v) for k, v in (tr.get("grad_rms") or {}).items() if _num(v) is not None}
        reach = {k: _num(v) for k, v in (tr.get("reach") or {}).items() if _num(v) is not None}
        saturated = {k: _num(v) for k, v in (tr.get("saturated") or {}).items() if _num(v) is not None}
        out += self._zero(rms, reach, stats, entropy_ratio, saturated)
        out += self._vanishing(rms)
        out += self._exploding(tr, lr)
        out += self._dormant(tr.get("dormant") or {}, lr)
        return out

    def _once(self, key: str) -> bool:
        if key in self.reported:
            return False
        self.reported.add(key)
        return True

    def _zero(self, rms: dict, reach: Mapping, stats: Mapping, entropy_ratio: float | None,
              saturated: Mapping | None = None) -> list[Finding]:
        """One finding per group of zero layers with one cause: the value function's layers
        and the others are cut by different loss terms (a clamped value loss, a collapsed
        policy), so each group is judged on its own."""
        th, out = self.thresholds, []
        for layer, v in rms.items():
            self.zero_runs[layer] = self.zero_runs.get(layer, 0) + 1 if v == 0.0 else 0
        zero = sorted(layer for layer, n in self.zero_runs.items() if n >= th.grad_zero_traces)
        value = [layer for layer in zero if _serves_value(layer)]
        for group in (value, [layer for layer in zero if layer not in value]):
            if not group or not self._once("zero:" + ",".join(group)):
                continue
            cause, why, knobs = self._zero_cause(group, reach, stats, entropy_ratio, saturated or {})
            them = "them" if len(group) > 1 else "it"
            out.append(Finding(C.GRADIENT_ZERO, (
                f"module {self.module_id!r}: the gradient of layer{'s' if len(group) > 1 else ''} "
                f"{', '.join(group)} is exactly 0 on {th.grad_zero_traces} traced updates in a row while the "
                f"module trains; expected a non-zero gradient on every trained layer: "
                + why.format(them=them) + A.advice_text(knobs)),
                {"module_id": self.module_id, "layers": group, "traces_in_a_row": th.grad_zero_traces,
                 "layers_traced": len(rms), "cause": cause, "reach": {k: reach.get(k) for k in group},
                 "saturated": {k: (saturated or {}).get(k) for k in group if (saturated or {}).get(k) is not None},
                 "entropy_ratio": entropy_ratio, "knobs": [k.as_dict() for k in knobs]}))
        return out

    def _zero_cause(self, zero: list[str], reach: Mapping, stats: Mapping, entropy_ratio: float | None,
                    saturated: Mapping) -> tuple[str, str, list[A.Knob]]:
        """Which loss term does not reach the layers, from the traced update's reach (does
        the loss's gradient arrive at the layer's output at all, and is it all 0?) and
        RLlib's loss stats. PPO on Pendulum with RLlib's defaults: the critic's layers are
        reached by exact zeros because every sample's squared value error (~2e5) is clamped
        at vf_clip_param=10 -- the forward is fine, the loss cuts the gradient."""
        got = [reach.get(layer) for layer in zero]
        value_only = all(_serves_value(layer) for layer in zero)
        clip, coeff = self.knobs.number("vf_clip_param"), self.knobs.vf_loss_coeff
        vf, unclipped = _num(stats.get("vf_loss")), _num(stats.get("vf_loss_unclipped"))
        if value_only and -1 not in got and clip and vf is not None and unclipped and unclipped > clip \
                and vf >= 0.9 * clip:
            return "value_loss_clipped", (
                f"the loss reaches {{them}} but passes back exactly 0. They serve only the value function, and "
                f"PPO's value loss is clamped at vf_clip_param={clip:g} on almost every sample (vf_loss "
                f"{vf:.3g} against an unclipped squared error of {unclipped:.3g}): a clamped sample gives the "
                f"critic no gradient, so it never learns -- the model's forward is fine, the value loss's clip "
                f"cuts the gradient"), [A.vf_clip_knob(clip, unclipped)]
        if value_only and -1 not in got and coeff == 0:
            return "value_loss_off", (
                "the loss reaches {them} but passes back exactly 0. They serve only the value function, and "
                "vf_loss_coeff=0 weights the value loss by 0: the critic never learns"), [
                A.Knob("vf_loss_coeff", 0.0, 1.0, "RLlib's default weight of the value loss")]
        if not value_only and -1 not in got and entropy_ratio is not None \
                and entropy_ratio < self.thresholds.entropy_collapse_fail_ratio:
            knobs = A.entropy_knobs(self.knobs, _num(stats.get("curr_entropy_coeff")),
                                    _num(stats.get("default_optimizer_learning_rate")))
            return "policy_collapsed", (
                f"the loss reaches {{them}} but passes back exactly 0: the policy has collapsed onto one action "
                f"(entropy {entropy_ratio:.1%} of its maximum), its saturated distribution gives the log-probability "
                f"no gradient, so the policy's layers stop learning -- the collapse is the cause "
                f"(ENTROPY_COLLAPSE), not the model's forward"), knobs
        saturated_cause = self._saturated_cause(zero, got, stats, saturated)
        if saturated_cause is not None:
            return saturated_cause
        if got and all(g == 0 for g in got):
            return "zero_passed_back", (
                "the loss reaches {them} but passes back exactly 0: something between these layers and the "
                "loss multiplies their gradient by 0 (a `* 0` or a mask of zeros, a clamp/min/max that is "
                "saturated on every sample, a loss term weighted by 0) -- look at the model's forward and the "
                "loss terms that use these outputs"), []
        if got and all(g == -1 for g in got):
            return "not_in_loss", (
                "no loss term uses {them}: the layers' outputs take part in the forward but never in the loss "
                "(a detach, or a head whose output no loss term reads) -- no knob fixes this, the model's "
                "forward does"), []
        return "unknown", (
            "the loss does not reach {them} (a detach, a multiplication by 0, a head cut from the graph) "
            "-- no knob fixes this, the model's forward does"), []

    def _saturated_cause(self, zero: list[str], got: list, stats: Mapping,
                         saturated: Mapping) -> tuple[str, str, list[A.Knob]] | None:
        """activations_saturated: every zero layer sits below an activation of its own stack
        pinned at its bounds (its derivative exactly 0 in float32); None otherwise."""
        share = self.thresholds.grad_saturated_share
        pinned = [layer for layer in zero if (saturated.get(layer) or 0.0) >= share]
        # a layer below a saturated activation of its own stack gets nothing through it either
        cut = all(any(_stack(p) == _stack(layer) and _index(layer) <= _index(p) for p in pinned) for layer in zero)
        if got and all(g == 0 for g in got) and pinned and cut:
            shares = [saturated[p] for p in pinned]
            lr = _num(stats.get("default_optimizer_learning_rate")) or self.knobs.lr
            knobs = [A.Knob("lr", lr, A._round(lr / 10), "smaller steps keep the weights in the activation's "
                                                          "working range")] if lr else []
            if self.knobs.grad_clip is None and self.knobs.known:
                knobs.append(A.Knob("grad_clip", None, 0.5, "a bounded step per update"))
            return "activations_saturated", (
                f"the loss reaches {{them}} but passes back exactly 0: the activation (tanh, sigmoid) after "
                f"{', '.join(pinned)} sits at its bounds on {min(shares):.0%} or more of its outputs, where its "
                f"derivative is exactly 0 in float32 -- the pre-activations grew far past the activation's range "
                f"(weights blown up by steps too large), so nothing flows back through it to the layers below"), knobs
        return None

    def _vanishing(self, rms: dict) -> list[Finding]:
        """A layer against the other layers of its own stack (``encoder.actor_encoder.net.mlp``
        for ``...mlp.0``), never against another network's: separate value and policy networks
        live at different scales by design (``vf_loss_coeff=1000`` makes the critic's gradients
        ~1000x the actor's, and Adam scales each parameter on its own: measured, a healthy run)."""
        th, out = self.thresholds, []
        stacks: dict[str, dict[str, float]] = {}
        for layer, v in rms.items():
            stacks.setdefault(_stack(layer), {})[layer] = v
        for stack, layers in stacks.items():
            live = [v for v in layers.values() if v > 0]
            if len(live) < 2:
                continue
            med = statistics.median(live)
            for layer, v in layers.items():
                small = 0 < v < th.grad_vanishing_ratio * med
                self.small_runs[layer] = self.small_runs.get(layer, 0) + 1 if small else 0
                if self.small_runs[layer] >= th.grad_persist_traces and self._once("vanish:" + layer):
                    out.append(Finding(C.GRADIENT_VANISHING, (
                        f"module {self.module_id!r}: layer {layer} gets a gradient RMS of {v:.3g}, "
                        f"{v / med:.2g}x the median layer of its stack {stack} ({med:.3g}) on "
                        f"{self.small_runs[layer]} traces; expected >= {th.grad_vanishing_ratio:g}x: the signal "
                        f"dies before it reaches this layer (saturated activations, a tiny init scale) and it "
                        f"barely learns"),
                        {"module_id": self.module_id, "layer": layer, "stack": stack, "grad_rms": v,
                         "median_layer_rms": med, "ratio_threshold": th.grad_vanishing_ratio}))
        return out

    def _exploding(self, tr: Mapping, lr: float | None) -> list[Finding]:
        th, out = self.thresholds, []
        bad = _num(tr.get("grad_nonfinite")) or 0
        norm = _num(tr.get("grad_norm"))
        if bad > 0 and "learner_nonfinite" not in self.reported and self._once("nonfinite"):
            knobs = A.explode_knobs(self.knobs, statistics.median(self.norms) if self.norms else 1.0)
            out.append(Finding(C.GRADIENT_EXPLODING, (
                f"module {self.module_id!r}: {int(bad)} gradient tensor(s) held NaN/inf on traced updates; "
                f"expected finite gradients (RLlib zeroes them and goes on, the run learns nothing from that "
                f"batch)" + A.advice_text(knobs)),
                {"module_id": self.module_id, "nonfinite": int(bad), "knobs": [k.as_dict() for k in knobs]},
                status=C.FAIL))
        if norm is None or not math.isfinite(norm):
            return out
        if len(self.norms) >= 5:
            med = statistics.median(self.norms)
            if med > 0 and norm > th.grad_exploding_factor * med and self._once(f"explode:{len(self.norms)}"):
                knobs = A.explode_knobs(self.knobs, med)
                out.append(Finding(C.GRADIENT_EXPLODING, (
                    f"module {self.module_id!r}: gradient norm {norm:.3g} is {norm / med:.0f}x its running median "
                    f"({med:.3g}); expected <= {th.grad_exploding_factor:g}x" + A.advice_text(knobs)),
                    {"module_id": self.module_id, "grad_norm": norm, "median": med,
                     "factor_threshold": th.grad_exploding_factor, "knobs": [k.as_dict() for k in knobs]}))
        self.norms.append(norm)
        return out

    def _nonfinite(self, tr: Mapping, lr: float | None) -> list[Finding]:
        """LEARNER_NONFINITE: the guard on every update (learner/nan_guard.py) found a NaN/inf
        loss or gradient; once per module, naming the dump of the update's state."""
        loss, grad = _num(tr.get(S.NONFINITE_LOSS)) or 0, _num(tr.get(S.NONFINITE_GRAD)) or 0
        if not (loss > 0 or grad > 0) or not self._once("learner_nonfinite"):
            return []
        entry = S.learner_repro_entry(_num(tr.get(S.LEARNER_REPRO_ID)), C.LEARNER_NONFINITE)
        what = " and ".join(([f"its loss was NaN/inf on {int(loss)} update(s)"] if loss else []) +
                            ([f"a gradient was NaN/inf on {int(grad)} checked update(s)"] if grad else []))
        where = (f"; the first such update's batch, weights and optimizer state are in {entry} (`flow1 replay` "
                 f"runs it again and names the layer or operation that made the NaN/inf)") if entry else \
            "; no dump of it reached the run directory (repro_max=0, or it could not be sent)"
        return [Finding(C.LEARNER_NONFINITE, (
            f"module {self.module_id!r}: {what} this iteration; expected finite losses and gradients (RLlib "
            f"zeroes a NaN gradient, or skips the update, and goes on: the module learns nothing from that batch, "
            f"and an inf turned into the largest float poisons Adam's moments){where}"),
            {"module_id": self.module_id, "loss_updates": int(loss), "grad_updates": int(grad), "repro": entry},
            status=C.FAIL)]

    def _dormant(self, dormant: Mapping, lr: float | None) -> list[Finding]:
        th, out = self.thresholds, []
        for layer, share in dormant.items():
            s = _num(share)
            if s is None:
                continue
            self.dormant_runs[layer] = self.dormant_runs.get(layer, 0) + 1 if s > th.dormant_share else 0
            if self.dormant_runs[layer] >= th.grad_persist_traces and self._once("dormant:" + layer):
                knobs = A.dormant_knobs(self.knobs, lr)
                out.append(Finding(C.DORMANT_UNITS, (
                    f"module {self.module_id!r}: {s:.0%} of the units of {layer} are dormant (normalised mean "
                    f"|activation| <= {th.dormant_tau:g}) on {self.dormant_runs[layer]} traces; expected <= "
                    f"{th.dormant_share:.0%}: the network is losing its capacity to learn (loss of plasticity, "
                    f"Sokar et al. 2023)" + A.advice_text(knobs)),
                    {"module_id": self.module_id, "layer": layer, "dormant_share": s, "tau": th.dormant_tau,
                     "threshold": th.dormant_share, "knobs": [k.as_dict() for k in knobs]}))
        return out
