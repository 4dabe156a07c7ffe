"""The train/eval gap: RLlib's evaluation runners report a return far from the training
runners' for a sustained window, and the config differences that explain it (an eval env
whose episode limit is half the training env's turns a learned "play for time" into a reward
of zero). No Ray.

Read from ``result["evaluation"]["env_runners"]`` (``episode_return_mean``,
``episode_len_mean``) against ``result["env_runners"]`` at the same iteration. An eval
return *below* the training return is a finding whatever explains it; one *above* it only
when the eval env is another task (its ``env`` or ``env_config`` differs): a greedy
evaluation (``explore=False``, RLlib's usual override) of a stochastic policy scoring higher
is by design (measured: PPO CartPole, greedy eval 105-224 against a training return of
64-177).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...common import codes as C
from .. import advice as A
from ..curves import result_number
from ..findings import Finding
from ..rule import Rule
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class EvalGapThresholds:
    """TRAIN_CURVES: evaluation against training."""

    eval_gap: float = 0.3            # TRAIN_EVAL_GAP: |eval - train| above this share of the larger |return| ...
    eval_window: int = 3             # ... on each of this many evaluations in a row
    eval_len_ratio: float = 0.7      # eval and train episode lengths differ when their ratio is below this (or above 1/this)
    eval_min_episodes: int = 15      # ... and at least this many evaluation episodes over the window (where counted)


RULES = (
    Rule("TRAIN_EVAL_GAP", C.TRAIN_CURVES, C.WARN,
         "the evaluation runners' return differs from the training runners' by more than {eval_gap:.0%} of the "
         "larger on {eval_window} evaluations in a row (at least {eval_min_episodes} evaluation episodes in all) -- "
         "below it whatever the cause, above it only when the eval env is another task (its env or env_config "
         "differ) -- naming the config differences",
         EvalGapThresholds,
         evidence=("train_return", "eval_return", "gap", "train_len", "eval_len", "differences", "knobs"),
         knobs=("evaluation_config",)),
)

#: evaluation_config keys that change what the eval runners see or do
_EXPLAINING = ("env", "env_config", "explore", "clip_rewards", "observation_filter", "normalize_actions",
               "clip_actions", "env_to_module_connector", "module_to_env_connector", "gamma")


def _get(config: Any, name: str) -> Any:
    return A._get(config, name)


def config_differences(config: Any) -> dict[str, tuple[Any, Any]]:
    """``{setting: (training value, evaluation value)}`` for what ``evaluation_config``
    overrides among the settings that change the task or the actions (``env_config`` per key)."""
    ev = _get(config, "evaluation_config")
    if ev is not None and not isinstance(ev, Mapping):
        ev = {k: _get(ev, k) for k in _EXPLAINING if _get(ev, k) is not None}
    out: dict[str, tuple[Any, Any]] = {}
    for key, value in (ev or {}).items():
        if key not in _EXPLAINING:
            continue
        train = _get(config, key)
        if key == "env_config" and isinstance(value, Mapping):
            base = train if isinstance(train, Mapping) else {}
            for k, v in value.items():
                if base.get(k) != v:
                    out[f"env_config.{k}"] = (base.get(k), v)
        elif train != value and not callable(value):
            out[key] = (train, value)
    return out


@dataclass
class EvalGap:
    """TRAIN_EVAL_GAP over a run's results; :meth:`add` one result per iteration."""

    config: Any = None
    thresholds: Thresholds = DEFAULT
    gaps: deque = field(default_factory=lambda: deque(maxlen=16))
    episodes: deque = field(default_factory=lambda: deque(maxlen=16))
    armed: bool = True

    def add(self, result: Mapping) -> list[Finding]:
        th = self.thresholds
        ev_ret = result_number(result, "evaluation", "env_runners", "episode_return_mean")
        tr_ret = result_number(result, "env_runners", "episode_return_mean")
        if ev_ret is None or tr_ret is None:
            return []
        ev_len = result_number(result, "evaluation", "env_runners", "episode_len_mean")
        tr_len = result_number(result, "env_runners", "episode_len_mean")
        diffs = config_differences(self.config)
        len_ratio = ev_len / tr_len if ev_len and tr_len else None
        # another task only by its config: episode lengths follow the return in many envs
        # (CartPole's length is its return), so they name a time limit but prove nothing alone
        other_task = any(k == "env" or k.startswith("env_config") for k in diffs)
        scale = max(abs(ev_ret), abs(tr_ret), 1e-9)
        gap = (ev_ret - tr_ret) / scale
        self.gaps.append(gap)
        self.episodes.append(result_number(result, "evaluation", "env_runners", "num_episodes"))
        window = list(self.gaps)[-th.eval_window:]
        counted = [n for n in list(self.episodes)[-th.eval_window:] if n is not None]
        # a mean of a few episodes is noise: PPO CartPole early on, 2 episodes an evaluation,
        # read 14 against 22 three times in a row on a healthy run
        enough = len(counted) < len(window) or sum(counted) >= th.eval_min_episodes
        below = all(g < -th.eval_gap for g in window)
        above = all(g > th.eval_gap for g in window) and other_task
        active = len(window) >= th.eval_window and (below or above) and enough
        if not active:
            self.armed = True
            return []
        if not self.armed:
            return []
        self.armed = False
        knobs = self._knobs(diffs)
        lens = (f"; its episodes last {ev_len:.4g} steps against {tr_len:.4g} in training"
                if len_ratio is not None and not th.eval_len_ratio <= len_ratio <= 1 / th.eval_len_ratio else "")
        named = ("; evaluation_config differs in " + ", ".join(f"{k} ({a!r} in training, {b!r} in evaluation)"
                                                               for k, (a, b) in diffs.items())) if diffs else \
            "; evaluation_config changes nothing that alters the task or the actions: the policy does well only on " \
            "what it trained on (its seeds, its exploration noise)"
        return [Finding(C.TRAIN_EVAL_GAP, (
            f"the evaluation return {ev_ret:.4g} is {abs(gap):.0%} {'below' if below else 'above'} the training "
            f"return {tr_ret:.4g} on {len(window)} evaluations in a row{lens}{named}; expected within "
            f"{th.eval_gap:.0%}: the training curve does not say how the policy does on the task you evaluate"
            + A.advice_text(knobs)),
            {"train_return": tr_ret, "eval_return": ev_ret, "gap": gap, "window": window, "train_len": tr_len,
             "eval_len": ev_len, "differences": {k: [a, b] for k, (a, b) in diffs.items()},
             "threshold": th.eval_gap, "knobs": [k.as_dict() for k in knobs]})]

    def _knobs(self, diffs: dict) -> list[A.Knob]:
        """Evaluate on the training task: each differing env_config key (and env) back to its
        training value; ``explore`` is left as the user set it (a greedy evaluation is usual)."""
        ev = _get(self.config, "evaluation_config")
        if not diffs or not isinstance(ev, Mapping):
            return []
        fixed = {k: v for k, v in ev.items() if k != "env_config" and k != "env"}
        env_cfg = dict(ev.get("env_config") or {})
        changed = False
        for key, (train, _) in diffs.items():
            if key.startswith("env_config."):
                name = key.split(".", 1)[1]
                if train is None:
                    env_cfg.pop(name, None)
                else:
                    env_cfg[name] = train
                changed = True
            elif key == "env":
                changed = True
        if not changed:
            return []
        if env_cfg:
            fixed["env_config"] = env_cfg
        return [A.Knob("evaluation_config", dict(ev), fixed,
                       "evaluate on the task the policy trains on (or train on the one you evaluate)",
                       method="evaluation")]
