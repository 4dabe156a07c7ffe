"""One iteration of one RLModule's learner numbers, as the curve rules read them. No Ray.

RLlib 2.60 reports them in ``result["learners"][module_id]`` (``entropy``, ``mean_kl_loss``,
``policy_loss``, ``vf_loss``, ``default_optimizer_learning_rate``...); flow1's learner tracing
adds its own under ``"flow1"``. A :class:`Reading` keeps the named ones as fields and every
other number by its RLlib name (:meth:`Reading.stat`), so a rule can read a stat nobody
named here (``vf_explained_var``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..curves import finite


@dataclass
class Reading:
    """One iteration's learner numbers for one module (None where RLlib did not report it)."""

    iteration: int
    env_steps: float | None = None
    entropy: float | None = None
    kl: float | None = None
    policy_loss: float | None = None
    vf_loss: float | None = None
    total_loss: float | None = None
    lr: float | None = None
    entropy_coeff: float | None = None
    grad_norm: float | None = None
    vf_pi_trunk_ratio: float | None = None   # from flow1's learner tracing (shared trunk only)
    clip_fraction: float | None = None       # share of traced ratios outside 1 +- clip_param (flow1's tracing)
    is_mean: float | None = None             # mean behaviour / learner ratio clamped to [0, 2] (flow1's tracing, IMPALA)
    reward_min: float | None = None          # the traced train batch's reward range (flow1's tracing)
    reward_max: float | None = None
    stats: Mapping[str, float] = field(default_factory=dict)   # every finite number, by RLlib's name

    def stat(self, name: str) -> float | None:
        """Any finite number RLlib reported for this module, by its name (None if absent)."""
        return self.stats.get(name)

    @classmethod
    def from_learner_stats(cls, iteration: int, stats: dict, env_steps: float | None = None,
                           extras: dict | None = None) -> "Reading":
        """``stats``: ``result["learners"][module_id]`` (RLlib 2.60 names)."""
        def f(*names: str) -> float | None:
            for n in names:
                v = finite(stats.get(n))
                if v is not None:
                    return v
            return None

        lr = f("default_optimizer_learning_rate", "curr_lr")
        traced = stats.get("flow1")
        extras = {**(traced if isinstance(traced, dict) else {}), **(extras or {})}
        return cls(iteration=iteration, env_steps=env_steps, entropy=f("entropy"), kl=f("mean_kl_loss"),
                   policy_loss=f("policy_loss"), vf_loss=f("vf_loss"), total_loss=f("total_loss"),
                   lr=lr, entropy_coeff=f("curr_entropy_coeff"),
                   grad_norm=f("gradients_default_optimizer_global_norm") or finite(extras.get("grad_norm")),
                   vf_pi_trunk_ratio=finite(extras.get("vf_pi_trunk_ratio")),
                   reward_min=finite(extras.get("reward_min")), reward_max=finite(extras.get("reward_max")),
                   clip_fraction=_quotient(extras.get("clipped"), extras.get("ratios")),
                   is_mean=_quotient(extras.get("is_sum"), extras.get("is_n")),
                   stats={k: v for k, v in ((k, finite(x)) for k, x in stats.items()) if v is not None})


def _quotient(num: Any, den: Any) -> float | None:
    n, d = finite(num), finite(den)
    return n / d if n is not None and d else None


def max_entropy(action_space: Any, normalized: bool = False) -> tuple[float | None, int, str]:
    """The entropy a policy over ``action_space`` has at most, with the number of action
    dimensions and how it is normalised: ``"discrete"`` (ratio = H / log n) or ``"box"``
    (ratio = exp((H - H_max) / d): the action distribution's width per dimension as a share
    of the box's -- a Gaussian has no maximum entropy, the box it is clipped to has).
    ``normalized``: the policy acts in RLlib's normalized action space (``normalize_actions``,
    True by default: the Gaussian lives in [-1, 1] per dimension, unsquashed into the box
    after sampling), so each bounded dimension is 2 wide whatever the env's box.
    (None, 0, "") when the space has no finite maximum."""
    if action_space is None:
        return None, 0, ""
    try:
        import gymnasium.spaces as S

        if isinstance(action_space, S.Discrete):
            return (math.log(action_space.n) if action_space.n > 1 else None), 1, "discrete"
        if isinstance(action_space, S.MultiDiscrete):
            h = float(np.sum(np.log(np.asarray(action_space.nvec, dtype=float))))
            return (h if h > 0 else None), int(np.size(action_space.nvec)), "discrete"
        if isinstance(action_space, S.MultiBinary):
            d = int(np.prod(action_space.shape))
            return d * math.log(2), d, "discrete"
        if isinstance(action_space, S.Box):
            width = np.asarray(action_space.high, dtype=float) - np.asarray(action_space.low, dtype=float)
            if not np.all(np.isfinite(width)) or np.any(width <= 0):
                return None, 0, ""
            if normalized:
                return float(width.size * math.log(2.0)), int(width.size), "box (normalized to [-1, 1])"
            return float(np.sum(np.log(width))), int(width.size), "box"
    except Exception:
        return None, 0, ""
    return None, 0, ""


def once(armed: dict, key: str, active: bool) -> bool:
    """True the first time ``active`` holds since it last did not: one finding per incident,
    re-armed when the signal is back in range (``armed`` is the rule's own dict)."""
    if not active:
        armed[key] = True
        return False
    if armed.get(key, True):
        armed[key] = False
        return True
    return False


def least_squares_slope(values: list[float]) -> float:
    """Least-squares slope per step of ``values`` (0 for fewer than 2)."""
    if len(values) < 2:
        return 0.0
    y = np.asarray(values, dtype=float)
    x = np.arange(len(y), dtype=float)
    x -= x.mean()   # the closed form (polyfit's lstsq took ~0.15 ms of each driver hook)
    return float(x @ (y - y.mean()) / (x @ x))


@dataclass
class RunContext:
    """What the return says, for the cross-checks: stalled (its EMA rose < 2 % over the
    window) and dropped (REWARD_DROP holds); and its scale, for the Q range."""

    stalled: bool | None = None
    dropped: bool = False
    learned: bool | None = None              # the return ever rose beyond its noise (None: noise not known yet)
    noise: float | None = None               # sigma of the smoothed return by chance (ReturnNoise)
    return_abs_max: float | None = None      # the largest |episode return| seen so far (bounds Q without tracing)
    episode_len_mean: float | None = None
