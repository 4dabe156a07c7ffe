"""Exploration that is off, or that ends before it can help: a switch nobody sees, since no
number RLlib reports says that the runners stopped exploring. Judged from the run's config and, for an epsilon schedule, from where the
run is on it. No Ray; a finished run's ``params.json`` config works too.

RLlib's ``explore`` (``config.env_runners(explore=...)``) turns the training EnvRunners'
action sampling on or off: with ``explore=False`` a PPO runner takes the distribution's
mode and a DQN runner never takes an epsilon step, so the learner trains on one action per
state. DQN's ``epsilon`` is a schedule ``[[t0, e0], [t1, e1], ...]`` over sampled env steps
(RLlib's default ``[(0, 1.0), (10000, 0.05)]``), and learning starts at
``num_steps_sampled_before_learning_starts`` (1,000): a schedule that is over by then has
spent its exploration on a buffer the learner has not looked at yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...common import codes as C
from .. import advice as A
from ..findings import Finding
from .learner_reading import RunContext
from ..rule import Rule
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class ExplorationThresholds:
    """TRAIN_CURVES: exploration switched off or spent before learning."""

    epsilon_high: float = 0.5          # EPSILON_SCHEDULE: epsilon still >= this ...
    epsilon_late_factor: float = 20.0  # ... after this x the steps before learning starts, with the return stalled


RULES = (
    Rule("EXPLORATION_OFF", C.TRAIN_CURVES, C.WARN,
         "the training EnvRunners do not explore (config explore=False): they act with the policy's mode (or the "
         "greedy Q action) and the learner trains on one action per state",
         evidence=("explore", "algo", "knobs"), knobs=("explore",)),
    Rule("EPSILON_SCHEDULE", C.TRAIN_CURVES, C.WARN,
         "an epsilon schedule that ends before learning starts (its last step <= "
         "num_steps_sampled_before_learning_starts), or epsilon still >= {epsilon_high:g} after "
         "{epsilon_late_factor:g}x those steps with the return stalled", ExplorationThresholds,
         evidence=("epsilon", "learning_starts", "env_steps", "knobs"), knobs=("epsilon",)),
)


def epsilon_at(schedule: list, t: float) -> float | None:
    """An RLlib piecewise-linear schedule's value at ``t`` (the last value after its end)."""
    pts = sorted((float(a), float(b)) for a, b in schedule)
    if not pts:
        return None
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / max(t1 - t0, 1e-12)
    return pts[-1][1]


def _schedule(v: Any) -> list | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [(0.0, float(v))]
    try:
        pts = [(float(a), float(b)) for a, b in v]
    except (TypeError, ValueError):
        return None
    return pts or None


@dataclass
class ExplorationRules:
    """The run's exploration settings, read once from its config; :meth:`add` per iteration."""

    knobs: A.Knobs = field(default_factory=A.Knobs)
    epsilon: Any = None                 # the config's epsilon (a float or a schedule), None: not epsilon-greedy
    thresholds: Thresholds = DEFAULT
    online: bool = True                 # False: offline RL (input_ is data, not "sampler"): nothing explores
    said: set = field(default_factory=set)

    def add(self, iteration: int, env_steps: float | None, run: RunContext) -> list[Finding]:
        out = []
        if not self.online:
            return out
        if self.knobs.flag("explore") is False and "off" not in self.said:
            self.said.add("off")
            knob = A.Knob("explore", False, True, "sample actions from the policy (and epsilon for DQN) while "
                          "training; evaluation can stay greedy with evaluation_config={'explore': False}",
                          method="env_runners")
            out.append(Finding(C.EXPLORATION_OFF, (
                f"the training EnvRunners do not explore (explore=False{self._algo()}): they take the policy's "
                f"most likely action (DQN: never a random one), so the learner sees one action per state and "
                f"cannot find a better one; expected explore=True while training" + A.advice_text([knob])),
                {"explore": False, "algo": self.knobs.algo, "knobs": [knob.as_dict()]}))
        if self.knobs.flag("explore") is not False:
            f = self._epsilon(env_steps, run)
            if f is not None:
                out.append(f)
        return out

    def _algo(self) -> str:
        return f", {self.knobs.algo}" if self.knobs.algo else ""

    def _epsilon(self, env_steps: float | None, run: RunContext) -> Finding | None:
        th, sched = self.thresholds, _schedule(self.epsilon)
        if sched is None:
            return None
        starts = self.knobs.number("num_steps_sampled_before_learning_starts") or 0.0
        end_t, end_v = max(sched)[0], sorted(sched)[-1][1]
        if len(sched) > 1 and starts > 0 and end_t <= starts and "early" not in self.said:
            self.said.add("early")
            aim = [[0, sched[0][1]], [int(max(10 * starts, 10_000)), end_v]]
            knob = A.Knob("epsilon", [list(p) for p in sched], aim,
                          "decay over the steps the learner trains on, not the ones before it starts")
            return Finding(C.EPSILON_SCHEDULE, (
                f"the epsilon schedule ends at step {end_t:g} (epsilon {end_v:g}), before learning starts at "
                f"{starts:g} sampled steps (num_steps_sampled_before_learning_starts): every random action went "
                f"into the buffer before the first update, and the learner explores at {end_v:g} from then on"
                + A.advice_text([knob])),
                {"epsilon": [list(p) for p in sched], "learning_starts": starts, "env_steps": env_steps,
                 "knobs": [knob.as_dict()]})
        if env_steps is None or "late" in self.said:
            return None
        eps = epsilon_at(sched, env_steps)
        late = max(starts, 1000.0) * th.epsilon_late_factor
        if eps is not None and eps >= th.epsilon_high and env_steps >= late and run.stalled is True:
            self.said.add("late")
            t_end = int(max(env_steps / 2, starts * 10))
            aim = [[0, sched[0][1]], [t_end, min(end_v, 0.05)]]
            knob = A.Knob("epsilon", [list(p) for p in sched], aim, "reach a small epsilon while the run still learns")
            return Finding(C.EPSILON_SCHEDULE, (
                f"epsilon is still {eps:.3g} after {env_steps:g} sampled steps ({env_steps / max(starts, 1):.0f}x "
                f"the steps before learning starts) with the return stalled; expected it to fall below "
                f"{th.epsilon_high:g} well before now: most actions are still random, so the policy's return "
                f"cannot show what it learned" + A.advice_text([knob])),
                {"epsilon": [list(p) for p in sched], "epsilon_now": eps, "learning_starts": starts,
                 "env_steps": env_steps, "knobs": [knob.as_dict()]})
        return None
