"""PPO's trust region, measured: the clip fraction -- the share of probability ratios
new / sampling policy outside ``1 +- clip_param`` -- on flow1's traced updates (RLlib 2.60
does not log it). No Ray.

A clip fraction that stays high means each update pushes most ratios past the clip: the
steps are too large for the trust region, and the clipped samples give no gradient
(openai/baselines issues 975 and 456: KL rising while the clip fraction falls is a policy
about to crash). One that stays at 0 means the region never binds: with the return stalled
and the policy still exploring, the steps are too small to matter. Each needs a second
signal (the KL or the return), and PPO only: APPO's ratios are against a lagging behaviour
policy by design.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from ...common import codes as C
from ...common import schema as S
from .. import advice as A
from ..findings import Finding
from .learner_reading import Reading, RunContext, once
from ..rule import Needs, Rule, View
from ..thresholds import DEFAULT, Thresholds

#: algorithms whose ratios are against a lagging behaviour policy, not the last sampling one
OFF_POLICY_RATIOS = ("APPO", "IMPALA")
#: where the clip fraction lands in the learner table (a flow1 number, not RLlib's)
CLIP_FRACTION = "clip_fraction"


@dataclass(frozen=True)
class ClipThresholds:
    """TRAIN_CURVES: PPO's clip fraction on traced updates."""

    clip_saturated: float = 0.3      # CLIP_FRACTION: the median over the window above this ...
    clip_never: float = 0.001        # ... or every reading below this ...
    clip_window: int = 3             # ... over this many iterations with a traced update


RULES = (
    Rule("CLIP_FRACTION", C.TRAIN_CURVES, C.WARN,
         "PPO's clip fraction (ratios outside 1 +- clip_param, on traced updates) with a median > "
         "{clip_saturated:.0%} over {clip_window} iterations and the KL above the band or the return stalled "
         "(the steps overshoot the trust region), or < {clip_never:g} on each of them with the return stalled while "
         "the policy still explores (the region never binds)", ClipThresholds,
         evidence=("module_id", "clip_fraction", "window", "clip_param", "kl", "knobs"),
         knobs=("lr", "num_epochs", "clip_param"),
         view=View(S.LEARNER_DIR, (CLIP_FRACTION,), "clip fraction (ratios outside 1 +- clip_param)"),
         needs=Needs(("clip_window",), learns=False)),
)


@dataclass
class ModuleClipping:
    """CLIP_FRACTION for one RLModule; :meth:`add` one :class:`Reading` per iteration."""

    module_id: str
    knobs: A.Knobs = field(default_factory=A.Knobs)
    thresholds: Thresholds = DEFAULT
    fractions: deque = field(default_factory=lambda: deque(maxlen=32))
    armed: dict = field(default_factory=dict)

    def add(self, r: Reading, run: RunContext, kl_median: float | None, entropy_ratio: float | None,
            nothing_to_learn: bool = False) -> Finding | None:
        """``nothing_to_learn``: nothing shows the return is learnable yet
        (:meth:`~.learner_curves.ModuleCurves.nothing_to_learn_seen`): then a ratio that
        never reaches the clip says nothing about the step size."""
        th = self.thresholds
        if r.clip_fraction is None or (self.knobs.algo or "") in OFF_POLICY_RATIOS:
            return None
        self.fractions.append(r.clip_fraction)
        window = list(self.fractions)[-th.clip_window:]
        if len(window) < th.clip_window:
            return None
        med = statistics.median(window)
        clip = self.knobs.clip_param
        stalled = run.stalled is True or run.dropped
        kl_high = kl_median is not None and kl_median > th.kl_high
        high = med > th.clip_saturated and (kl_high or stalled)
        if once(self.armed, "high", high):
            knobs = [x for x in [A.lower_lr(self.knobs, r.lr, max(kl_median or 0.0, A.KL_AIM * 4),
                                            "smaller steps keep the ratios inside the clip")] if x]
            if self.knobs.num_epochs is not None and self.knobs.num_epochs > 5:
                knobs.append(A.Knob("num_epochs", self.knobs.num_epochs, max(3, self.knobs.num_epochs // 3),
                                    "fewer passes over one batch push fewer ratios past the clip"))
            why = (f"the KL {kl_median:.3g} above {th.kl_high:g}" if kl_high else
                   "the return " + ("dropped" if run.dropped else "stalled below its best"))
            return Finding(C.CLIP_FRACTION, (
                f"module {self.module_id!r}: {med:.0%} of the probability ratios fall outside 1 +- clip_param"
                f"{'' if clip is None else f' ({clip:g})'} (median clip fraction of the last {len(window)} traced "
                f"iterations) with {why}; expected 0.05-0.2 (up to {th.clip_saturated:.0%}): each update overshoots "
                f"the trust region, and a clipped sample gives the policy no gradient" + A.advice_text(knobs)),
                self._evidence(window, med, clip, kl_median, "saturated", knobs))
        never = (max(window) < th.clip_never and run.stalled is True and entropy_ratio is not None
                 and entropy_ratio >= 0.5 and not nothing_to_learn)
        if once(self.armed, "never", never):
            knobs = [x for x in [A.raise_lr(self.knobs, r.lr, kl_median or 0.0, "steps large enough to move the "
                                                                              "ratios to the clip")] if x]
            return Finding(C.CLIP_FRACTION, (
                f"module {self.module_id!r}: no probability ratio left 1 +- clip_param"
                f"{'' if clip is None else f' ({clip:g})'} on the last {len(window)} traced iterations (clip "
                f"fraction < {th.clip_never:g}) while the return stalled and the policy still explores (entropy "
                f"{entropy_ratio:.0%} of its maximum); expected some ratios at the clip: the updates are too small "
                f"to change what the policy does" + A.advice_text(knobs)),
                self._evidence(window, med, clip, kl_median, "never_reached", knobs))
        return None

    def _evidence(self, window, med, clip, kl, case, knobs) -> dict:
        return {"module_id": self.module_id, "clip_fraction": med, "window": window, "clip_param": clip, "kl": kl,
                "case": case, "knobs": [k.as_dict() for k in knobs]}
