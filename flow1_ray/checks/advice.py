"""Knob advice computed from the run's own config (symptom -> cause -> knob).

A finding that has a knob names the real RLlib setting, its current value in *this* run, a
value to try derived from it, and the line that applies it
(``config.training(entropy_coeff=0.01)``). The config is read duck-typed, so the same code
takes a live ``AlgorithmConfig`` and the plain dict of a finished run's ``params.json`` or
``result.json`` "config" entry. No Ray here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

#: PPO's usual KL sweet spot (0.01-0.03): advice aims a step size at its middle
KL_AIM = 0.015


@dataclass(frozen=True)
class Knob:
    """One suggested change: ``name`` from ``current`` to ``value``, in ``method``."""

    name: str
    current: Any
    value: Any
    why: str
    method: str = "training"

    def line(self) -> str:
        return f"config.{self.method}({self.name}={literal(self.value)})"

    def as_dict(self) -> dict:
        return {"knob": self.name, "current": self.current, "value": self.value, "why": self.why,
                "line": self.line(), "method": self.method}


def literal(v: Any) -> str:
    if isinstance(v, float):
        return _num(v)
    if isinstance(v, str) and v.startswith("DefaultModelConfig("):
        return v
    return repr(v)


def _num(x: float) -> str:
    """Two significant digits, as a Python literal (0.00015 -> 0.00015, 1.5e-06)."""
    if x == 0 or not math.isfinite(x):
        return repr(float(x))
    return repr(float(f"{x:.2g}"))


def _round(x: float) -> float:
    return float(f"{x:.2g}") if x and math.isfinite(x) else x


def _get(config: Any, name: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def _schedule_start(v: Any) -> float | None:
    """A float, or the first value of an RLlib schedule ``[[t0, v0], [t1, v1], ...]``."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], (list, tuple)) and len(v[0]) == 2:
        try:
            return float(v[0][1])
        except (TypeError, ValueError):
            return None
    return None


def _schedule(v: Any) -> tuple | None:
    """An RLlib schedule ``[[t0, v0], [t1, v1], ...]`` as ((t, v), ...) of numbers; None for a
    plain value or anything else."""
    if not isinstance(v, (list, tuple)) or not v:
        return None
    try:
        pairs = tuple((int(t), float(x)) for t, x in v)
    except (TypeError, ValueError):
        return None
    return pairs


@dataclass(frozen=True)
class Knobs:
    """The settings a curve finding can point at, as this run set them (None: unknown)."""

    algo: str | None = None
    lr: float | None = None
    lr_schedule: tuple | None = None         # the lr's schedule ((t, v), ...) where the config set one
    entropy_coeff: float | None = None
    kl_target: float | None = None
    use_kl_loss: bool | None = None
    vf_loss_coeff: float | None = None
    clip_param: float | None = None
    grad_clip: float | None = None
    num_epochs: int | None = None
    lambda_: float | None = None
    vf_share_layers: bool | None = None
    fcnet_hiddens: tuple | None = None
    known: bool = False
    numbers: Mapping[str, float] = field(default_factory=dict)   # every numeric setting, by name
    flags: Mapping[str, bool] = field(default_factory=dict)      # every bool setting, by name

    def number(self, name: str) -> float | None:
        """Any numeric setting of the config by its RLlib name (a schedule's first value),
        so that a rule can advise on a knob this class does not name (``vf_clip_param``)."""
        return self.numbers.get(name)

    def flag(self, name: str) -> bool | None:
        """Any bool setting of the config by its RLlib name (``explore``, ``double_q``)."""
        return self.flags.get(name)

    @classmethod
    def from_config(cls, config: Any) -> "Knobs":
        """Read an ``AlgorithmConfig`` or its dict form; missing settings stay None."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping) and hasattr(config, "to_dict") and not hasattr(config, "lr"):
            config = config.to_dict()
        model = _get(config, "model_config") or _get(config, "_model_config") or {}
        if not isinstance(model, Mapping):
            model = {k: getattr(model, k) for k in ("vf_share_layers", "fcnet_hiddens") if hasattr(model, k)}
        lr_raw = _get(config, "lr")
        algo = _get(config, "algo_class")
        algo_name = getattr(algo, "__name__", None) if algo is not None and not isinstance(algo, str) else algo

        def num(name: str) -> float | None:
            return _schedule_start(_get(config, name))

        epochs = _get(config, "num_epochs")
        hidden = model.get("fcnet_hiddens")
        return cls(
            algo=str(algo_name) if algo_name else None,
            lr=_schedule_start(lr_raw), lr_schedule=_schedule(lr_raw),
            entropy_coeff=num("entropy_coeff"), kl_target=num("kl_target"),
            use_kl_loss=_get(config, "use_kl_loss"), vf_loss_coeff=num("vf_loss_coeff"),
            clip_param=num("clip_param"), grad_clip=num("grad_clip"),
            num_epochs=int(epochs) if isinstance(epochs, (int, float)) and not isinstance(epochs, bool) else None,
            lambda_=num("lambda_") if _get(config, "lambda_") is not None else num("lambda"),
            vf_share_layers=model.get("vf_share_layers"),
            fcnet_hiddens=tuple(hidden) if isinstance(hidden, (list, tuple)) else None,
            known=True, numbers=_numbers(config), flags=_flags(config),
        )


def _numbers(config: Any) -> dict[str, float]:
    """The config's numeric settings (and schedules' first values), by name."""
    items = config.items() if isinstance(config, Mapping) else vars(config).items() if hasattr(config, "__dict__") \
        else ()
    out = {}
    for name, v in items:
        x = _schedule_start(v)
        if isinstance(name, str) and not name.startswith("_") and x is not None and math.isfinite(x):
            out[name] = x
    return out


def _flags(config: Any) -> dict[str, bool]:
    items = config.items() if isinstance(config, Mapping) else vars(config).items() if hasattr(config, "__dict__") \
        else ()
    return {name: v for name, v in items if isinstance(name, str) and not name.startswith("_") and isinstance(v, bool)}


def lower_lr(k: Knobs, lr_now: float | None, kl: float, why: str) -> Knob | None:
    """A step size that brings the KL back to the band's middle: KL grows roughly with the
    square of the step, so lr x sqrt(aim / KL), at most /20 and at least /2."""
    lr = lr_now if lr_now is not None else k.lr
    if lr is None or lr <= 0 or kl <= 0:
        return None
    factor = min(0.5, max(0.05, math.sqrt(KL_AIM / kl)))
    return Knob("lr", lr, _round(lr * factor), why)


def raise_lr(k: Knobs, lr_now: float | None, kl: float, why: str) -> Knob | None:
    lr = lr_now if lr_now is not None else k.lr
    if lr is None or lr <= 0:
        return None
    factor = 10.0 if kl <= 0 else min(10.0, max(2.0, math.sqrt(KL_AIM / kl)))
    return Knob("lr", lr, _round(lr * factor), why)


def entropy_knobs(k: Knobs, coeff_now: float | None, lr_now: float | None) -> list[Knob]:
    """Entropy collapsed: a stronger entropy bonus (0.01 when there is none: the usual and
    the PPO papers' usual value), and a smaller step when the lr is high for Adam."""
    coeff = coeff_now if coeff_now is not None else k.entropy_coeff
    out = []
    if coeff is not None:
        value = 0.01 if coeff <= 0 else _round(min(0.1, max(0.01, 3.0 * coeff)))
        out.append(Knob("entropy_coeff", coeff, value,
                        "an entropy bonus keeps the policy from collapsing onto one action"))
    lr = lr_now if lr_now is not None else k.lr
    if lr is not None and lr > 1e-3:
        out.append(Knob("lr", lr, _round(lr / 10), "steps this large push the policy to a corner in a few updates"))
    return out


def kl_high_knobs(k: Knobs, lr_now: float | None, kl: float) -> list[Knob]:
    out = [x for x in [lower_lr(k, lr_now, kl, f"KL grows with the step size; aim at KL ~{KL_AIM}")] if x]
    if k.clip_param is not None and k.clip_param > 0.2:
        out.append(Knob("clip_param", k.clip_param, 0.2, "a tighter trust region"))
    if k.num_epochs is not None and k.num_epochs > 10:
        out.append(Knob("num_epochs", k.num_epochs, max(3, k.num_epochs // 3),
                        "fewer passes over the same batch move the policy less per iteration"))
    return out


def spike_knobs(k: Knobs, lr_now: float | None, kl: float, grad_norm: float | None) -> list[Knob]:
    out = kl_high_knobs(k, lr_now, kl)
    if k.grad_clip is None and grad_norm is not None and grad_norm > 0:
        out.append(Knob("grad_clip", None, _round(max(0.5, grad_norm)),
                        "clip the global gradient norm at its usual size"))
    return out


def value_knobs(k: Knobs, ratio: float, aim: float = 10.0) -> list[Knob]:
    """The value head swamps the shared trunk: scale vf_loss_coeff so its gradient there is
    ~``aim`` x the policy's (the gradient is linear in the coefficient), or split the trunk."""
    out = []
    if k.vf_loss_coeff is not None and ratio > 0:
        out.append(Knob("vf_loss_coeff", k.vf_loss_coeff, _round(k.vf_loss_coeff * aim / ratio),
                        f"the value gradient into the shared layers scales with it: aim at ~{aim:g}x the policy's"))
    out.append(Knob("model_config", "vf_share_layers=True", "DefaultModelConfig(vf_share_layers=False)",
                    "separate value and policy networks do not compete (Adam scales each on its own)",
                    method="rl_module"))
    return out


def vf_clip_knob(clip: float, unclipped: float) -> Knob:
    """RLlib's PPO clamps each sample's squared value error at ``vf_clip_param`` (in squared-return
    units: 10 clips almost every sample of a task whose returns are in the hundreds), and a
    clamped sample passes the critic no gradient: open the clip to twice the unclipped error."""
    return Knob("vf_clip_param", clip, _round(2 * unclipped),
                "twice the unclipped squared value error, so the value loss is not clipped away")


def lr_floor_knobs(k: Knobs, lr_first: float, t_now: int | None) -> list[Knob]:
    """The run's lr schedule with each point kept at or above 10 % of the first lr (where the
    config set no schedule: one from the first lr to that floor at the current step)."""
    first = k.lr_schedule[0][1] if k.lr_schedule else lr_first   # the schedule's own start, else the first lr seen
    end = _round(first * 0.1)
    why = "keep 10-20% of the first lr at the end (cosine-like); a schedule to ~0 freezes the critic"
    if k.lr_schedule:
        return [Knob("lr", [[t, v] for t, v in k.lr_schedule], [[t, max(v, end)] for t, v in k.lr_schedule], why)]
    return [Knob("lr", lr_first, [[0, _round(lr_first)], [int(t_now or 1_000_000), end]], why)]


def stuck_knobs(k: Knobs, lr_now: float | None, clip_fraction: float | None = None) -> list[Knob]:
    """No effective policy gradient: with most ratios past the clip (measured), the step is
    too large for the region -- lr down, the region wider; otherwise the advantages (lambda)
    or a step too small."""
    if clip_fraction is not None and clip_fraction >= 0.5:
        out = [x for x in [lower_lr(k, lr_now, KL_AIM * 4, "smaller steps keep the ratios inside the clip")] if x]
        if k.clip_param is not None and k.clip_param < 0.3:
            out.append(Knob("clip_param", k.clip_param, _round(min(0.3, k.clip_param * 1.5)),
                            "a wider trust region"))
        return out
    out = []
    if k.lambda_ is not None and k.lambda_ > 0.97:
        out.append(Knob("lambda_", k.lambda_, 0.95, "GAE lambda > 0.97 makes advantages too noisy to use"))
    if k.clip_param is not None and k.clip_param < 0.3:
        out.append(Knob("clip_param", k.clip_param, _round(min(0.3, k.clip_param * 1.5)),
                        "a wider trust region lets the ratio move before it is clipped"))
    x = raise_lr(k, lr_now, 0.0, "updates this small leave the policy where it was")
    if x:
        out.append(x)
    return out


def explode_knobs(k: Knobs, typical_norm: float) -> list[Knob]:
    value = _round(max(0.5, 2.0 * typical_norm))
    if k.grad_clip is not None and k.grad_clip <= value:
        value = _round(k.grad_clip / 2)
    return [Knob("grad_clip", k.grad_clip, value, "clip the global norm near twice its usual size"),
            Knob("grad_clip_by", None, "global_norm", "one clip for the whole module")]


def dormant_knobs(k: Knobs, lr_now: float | None) -> list[Knob]:
    out = []
    if k.fcnet_hiddens:
        wider = [int(h) * 2 for h in k.fcnet_hiddens]
        out.append(Knob("model_config", f"fcnet_hiddens={list(k.fcnet_hiddens)}",
                        f"DefaultModelConfig(fcnet_hiddens={wider})",
                        "more units keep capacity while some go dormant", method="rl_module"))
    lr = lr_now if lr_now is not None else k.lr
    if lr is not None and lr > 0:
        out.append(Knob("lr", lr, _round(lr / 3), "large steps push units into dead zones"))
    return out


def advice_text(knobs: list[Knob]) -> str:
    """``try entropy_coeff 0.0 -> 0.01: config.training(entropy_coeff=0.01)`` (first knob),
    with the others listed after it."""
    if not knobs:
        return ""
    first, rest = knobs[0], knobs[1:]
    text = f"; try {first.name} {show(first.current)} -> {show(first.value)}: {first.line()}"
    if rest:
        text += " (also: " + ", ".join(f"{x.name} -> {show(x.value)}" for x in rest) + ")"
    return text


def show(v: Any) -> str:
    if isinstance(v, float):
        return _num(v)
    return str(v)


#: the most settings a run's start record keeps (an AlgorithmConfig has ~250)
MAX_SETTINGS = 400


def config_settings(config: Any) -> dict[str, Any]:
    """The settings a diagnosis reads from a run's config, as plain JSON: every numeric and bool
    setting by its RLlib name (a schedule ``[[t, v], ...]`` kept whole), the algorithm's name and
    the default model's ``fcnet_hiddens`` / ``vf_share_layers``; {} for no config. Written into
    ``run.json`` (``config``) at the start, so that a run directory says what its run was set to
    (:meth:`Knobs.from_config` reads it back)."""
    if config is None:
        return {}
    if not isinstance(config, Mapping) and hasattr(config, "to_dict") and not hasattr(config, "lr"):
        config = config.to_dict()
    items = config.items() if isinstance(config, Mapping) else vars(config).items() if hasattr(config, "__dict__") \
        else ()
    out: dict[str, Any] = {}
    for name, v in items:
        if len(out) >= MAX_SETTINGS or not isinstance(name, str) or name.startswith("_"):
            continue
        if isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(v)):
            out[name] = v
        elif _schedule_start(v) is not None and isinstance(v, (list, tuple)) and len(v) <= 64:
            out[name] = [[float(t), float(x)] for t, x in v]
    knobs = Knobs.from_config(config)
    if knobs.algo:
        out["algo_class"] = knobs.algo
    model = {k: v for k, v in (("vf_share_layers", knobs.vf_share_layers),
                               ("fcnet_hiddens", list(knobs.fcnet_hiddens) if knobs.fcnet_hiddens else None))
             if v is not None}
    if model:
        out["model_config"] = model
    return out
