"""The causes a learning symptom can have, each with the signs in a run that speak for it and
against it, and the knobs that change it.

A :class:`Cause` is declared once, here, beside the others that compete for the same symptoms:
``symptoms`` are the findings it explains (they become the chain under the primary symptom),
``signs`` the indicators that support it and ``against`` those that contradict it. A sign reads
one *signal* (the KL, the clip fraction, the entropy, a config setting): two signs on one signal
count once, so "supported by 2 independent signals" means two different things measured, as the
design's rule for a verdict asks. A sign is a finding of the run (any of ``codes`` at WARN or
FAIL, with ``when`` true of its evidence) or a setting of the run's config (``setting`` of
:class:`~flow1_ray.checks.advice.Knobs`: True, False, or None where the run does not say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..checks.advice import Knobs

#: policy-gradient algorithms whose step size and clip these causes read
POLICY_GRADIENT = ("PPO", "APPO", "IMPALA")


@dataclass(frozen=True)
class Sign:
    """One indicator: ``signal`` is what it reads, ``text`` what it says when it holds."""

    signal: str
    text: str
    codes: tuple[str, ...] = ()
    when: Callable[[Mapping[str, Any]], bool] | None = None
    setting: Callable[[Knobs], bool | None] | None = None
    algos: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cause:
    """A root cause of learning symptoms (see the module docstring)."""

    id: str
    text: str
    symptoms: tuple[str, ...]
    signs: tuple[Sign, ...]
    against: tuple[Sign, ...] = ()
    knobs: tuple[str, ...] = ()
    algos: tuple[str, ...] = ()


def _case(name: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda ev: ev.get("case") == name


def _lr_high(k: Knobs) -> bool | None:
    return None if k.lr is None else k.lr > 1e-3


def _lr_tiny(k: Knobs) -> bool | None:
    return None if k.lr is None else k.lr < 1e-5


def _lr_q_high(k: Knobs) -> bool | None:
    return None if k.lr is None else k.lr >= 0.01


def _stale_settings(k: Knobs) -> bool | None:
    b, it = k.number("broadcast_interval"), k.number("circular_buffer_iterations_per_batch")
    return None if b is None and it is None else (b or 1) > 1 or (it or 0) > 2


def _epochs_many(k: Knobs) -> bool | None:
    return None if k.num_epochs is None else k.num_epochs >= 10


def _no_entropy_bonus(k: Knobs) -> bool | None:
    return None if k.entropy_coeff is None else k.entropy_coeff <= 0


def _shared_trunk(k: Knobs) -> bool | None:
    return k.vf_share_layers


def _no_grad_clip(k: Knobs) -> bool | None:
    return None if not k.known else not k.grad_clip


def _single_q(k: Knobs) -> bool | None:
    v = k.flag("double_q")
    return None if v is None else not v


_KL_HIGH = Sign("KL", "the KL between the policy before and after an update is above its band",
                ("KL_SPIKE", "KL_TOO_HIGH"))
_KL_LOW = Sign("KL", "the KL stays below its band: the updates barely change the policy", ("KL_TOO_LOW",))
_CLIP_SATURATED = Sign("clip fraction", "most probability ratios fall outside the clip", ("CLIP_FRACTION",),
                       when=_case("saturated"))
_CLIP_NEVER = Sign("clip fraction", "no probability ratio reaches the clip", ("CLIP_FRACTION",),
                   when=_case("never_reached"))
_ENTROPY = Sign("entropy", "the policy's entropy collapsed", ("ENTROPY_COLLAPSE",))
_LAG = Sign("importance ratio", "the behaviour policy is far behind the learner's (mean importance ratio)",
            ("POLICY_LAG",))
_GRAD_BLOWUP = Sign("gradient norm", "the gradient norm jumped far above its running median", ("GRADIENT_EXPLODING",))

CAUSES: tuple[Cause, ...] = (
    Cause("step_too_large",
          "the policy's update step is too large for its trust region: each iteration moves the policy far "
          "from the one that sampled its batch (lr, num_epochs, clip_param)",
          symptoms=("KL_SPIKE", "KL_TOO_HIGH", "CLIP_FRACTION", "ENTROPY_COLLAPSE", "REWARD_DROP",
                    "VALUE_NOT_LEARNING", "GRADIENT_ZERO", "GRADIENT_EXPLODING", "DORMANT_UNITS", "ERROR_FIXATION",
                    "NEW_FIXATION", "POLICY_LOSS_STUCK", "POLICY_LAG"),
          signs=(_KL_HIGH, _CLIP_SATURATED, _ENTROPY, _GRAD_BLOWUP, _LAG,
                 Sign("lr", "lr is above 1e-3, past Adam's usual range for a policy gradient", setting=_lr_high,
                      algos=POLICY_GRADIENT),
                 Sign("num_epochs", "num_epochs >= 10 passes over each batch", setting=_epochs_many,
                      algos=POLICY_GRADIENT)),
          against=(_KL_LOW, _CLIP_NEVER),
          knobs=("lr", "num_epochs", "clip_param"), algos=POLICY_GRADIENT),
    Cause("stale_samples",
          "the runners sample with weights far behind the learner's: each batch is learnt from after the "
          "policy moved on (broadcast_interval, circular_buffer_iterations_per_batch)",
          symptoms=("POLICY_LAG", "ENTROPY_COLLAPSE", "REWARD_DROP"),
          signs=(_LAG,
                 Sign("weight broadcast", "the runners get new weights only every few updates, or each batch is "
                                          "learnt from more than twice", setting=_stale_settings)),
          knobs=("broadcast_interval", "circular_buffer_iterations_per_batch"), algos=("APPO", "IMPALA")),
    Cause("no_entropy_bonus",
          "the policy settles on one action before it has explored: no entropy bonus holds it open",
          symptoms=("ENTROPY_COLLAPSE", "ERROR_FIXATION", "NEW_FIXATION", "REWARD_DROP"),
          signs=(_ENTROPY,
                 Sign("state-action map", "state clusters fixed on one action", ("ERROR_FIXATION", "NEW_FIXATION")),
                 Sign("entropy_coeff", "entropy_coeff is 0", setting=_no_entropy_bonus, algos=POLICY_GRADIENT)),
          against=(Sign("KL", "the KL is above its band: a step this large collapses the entropy whatever the "
                              "bonus", ("KL_SPIKE", "KL_TOO_HIGH")),),
          knobs=("entropy_coeff",), algos=POLICY_GRADIENT),
    Cause("step_too_small",
          "the updates barely move the policy: the step is too small, or the schedule decayed it away",
          symptoms=("KL_TOO_LOW", "POLICY_LOSS_STUCK", "LR_DECAYED", "CLIP_FRACTION", "REWARD_DROP"),
          signs=(_KL_LOW, _CLIP_NEVER,
                 Sign("policy loss", "the policy loss is stuck at 0", ("POLICY_LOSS_STUCK",)),
                 Sign("lr schedule", "the lr schedule fell below its floor", ("LR_DECAYED",)),
                 Sign("lr", "lr is below 1e-5", setting=_lr_tiny)),
          against=(_KL_HIGH, _CLIP_SATURATED),
          knobs=("lr", "clip_param", "lambda_")),
    Cause("value_loss_clipped",
          "the critic's loss is clipped away: vf_clip_param (in squared-return units) sits far below the "
          "value error, so most samples give the critic no gradient",
          symptoms=("VALUE_NOT_LEARNING", "GRADIENT_ZERO"),
          signs=(Sign("value fit", "the critic explains none of the returns and its loss sits at vf_clip_param",
                      ("VALUE_NOT_LEARNING",),
                      when=lambda ev: _num(ev.get("vf_loss_unclipped")) > _num(ev.get("vf_clip_param"), 1e300)),
                 Sign("critic gradient", "the value layers' gradient is exactly 0, cut by the clipped value loss",
                      ("GRADIENT_ZERO",), when=lambda ev: ev.get("cause") == "value_loss_clipped")),
          knobs=("vf_clip_param",), algos=("PPO",)),
    Cause("value_swamps_trunk",
          "the value head's gradient swamps the policy's in the layers they share",
          symptoms=("VALUE_DOMINATES", "POLICY_LOSS_STUCK", "ENTROPY_COLLAPSE"),
          signs=(Sign("trunk gradients", "the value gradient into the shared layers dwarfs the policy's",
                      ("VALUE_DOMINATES",)),
                 Sign("vf_share_layers", "the policy and the value function share their layers",
                      setting=_shared_trunk)),
          knobs=("vf_loss_coeff", "model_config"), algos=POLICY_GRADIENT),
    Cause("gradient_blowup",
          "the gradients blow up: an update's size is unbounded",
          symptoms=("GRADIENT_EXPLODING", "Q_DIVERGENCE", "KL_SPIKE", "REWARD_DROP"),
          signs=(_GRAD_BLOWUP,
                 Sign("Q values", "the Q estimates diverge", ("Q_DIVERGENCE",)),
                 Sign("grad_clip", "no gradient clipping (grad_clip unset)", setting=_no_grad_clip)),
          knobs=("grad_clip", "grad_clip_by")),
    Cause("nonfinite_update",
          "an update's loss or gradient went NaN/inf and RLlib zeroed it (or skipped the update), so the module "
          "learns nothing from those batches: the update's dump, run again by `flow1 replay`, names the operation, "
          "the layer and the batch rows that made it (an observation far outside its range, a log of 0, a sqrt "
          "at 0, an overflow)",
          symptoms=("LEARNER_NONFINITE", "GRADIENT_EXPLODING", "REWARD_DROP"),
          signs=(Sign("NaN guard", "a loss or a gradient was NaN/inf on an update", ("LEARNER_NONFINITE",)),
                 Sign("observations", "observations left their declared space or held NaN/inf",
                      ("OBS_OUT_OF_BOUNDS", "OBS_NAN_INF")))),
    Cause("q_step_too_large",
          "the Q-learning step is too large: each update overshoots its own targets (lr)",
          symptoms=("Q_DIVERGENCE", "GRADIENT_EXPLODING", "REWARD_DROP"),
          signs=(Sign("Q values", "the Q estimates diverge", ("Q_DIVERGENCE",)),
                 _GRAD_BLOWUP,
                 Sign("lr", "lr is 0.01 or more, past Adam's usual range for Q-learning", setting=_lr_q_high)),
          knobs=("lr", "critic_lr", "grad_clip"), algos=("DQN", "SAC")),
    Cause("q_overestimation",
          "the Q targets chase their own overestimates (a single Q network, a target updated too often, a "
          "step too large)",
          symptoms=("Q_DIVERGENCE", "REWARD_DROP"),
          signs=(Sign("Q values", "the Q estimates diverge", ("Q_DIVERGENCE",)),
                 Sign("double_q", "double_q is off", setting=_single_q, algos=("DQN",))),
          knobs=("target_network_update_freq", "double_q", "lr", "tau"), algos=("DQN", "SAC")),
    Cause("forward_cuts_gradient",
          "the RLModule's forward cuts the gradient of layers it trains (a `* 0`, a detach, an output no "
          "loss term uses): a bug in the module, no knob fixes it",
          symptoms=("GRADIENT_ZERO", "POLICY_LOSS_STUCK", "VALUE_NOT_LEARNING"),
          signs=(Sign("layer gradients", "a trained layer's gradient is exactly 0 and the loss does not explain it",
                      ("GRADIENT_ZERO",), when=lambda ev: ev.get("cause") in ("zero_passed_back", "not_in_loss",
                                                                              "unknown")),)),
    Cause("plasticity_loss",
          "units of the network go dormant: it loses the capacity to learn what comes next",
          symptoms=("DORMANT_UNITS", "GRADIENT_VANISHING", "REWARD_DROP"),
          signs=(Sign("activations", "a hidden layer's units are dormant", ("DORMANT_UNITS",)),
                 Sign("layer gradients", "a layer's gradient vanishes against its stack's", ("GRADIENT_VANISHING",))),
          knobs=("model_config", "lr")),
    Cause("temperature",
          "SAC's temperature (alpha) runs away from the entropy target",
          symptoms=("ALPHA_COLLAPSE", "ALPHA_EXPLODING", "REWARD_DROP"),
          signs=(Sign("alpha", "alpha collapsed or exploded", ("ALPHA_COLLAPSE", "ALPHA_EXPLODING")),),
          knobs=("target_entropy", "alpha_lr", "initial_alpha"), algos=("SAC",)),
)


def _num(v: Any, default: float = float("-inf")) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def causes_of(code: str, algo: str | None) -> list[Cause]:
    """The causes that explain ``code`` for this algorithm (all where it is unknown)."""
    return [c for c in CAUSES if code in c.symptoms and (not c.algos or algo is None or algo in c.algos)]
