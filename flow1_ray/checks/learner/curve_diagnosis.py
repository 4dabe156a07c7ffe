"""The learner side of a run judged from its result dicts, one iteration at a time.

Live, the driver's :class:`~flow1_ray.driver.learner_watch.LearnerWatch` feeds each
iteration's result to a :class:`CurveDiagnosis`; offline, ``flow1 diagnose`` feeds a
finished run's ``result.json`` (:func:`diagnose_curves`). The return is judged once, on the
run (REWARD_DROP, :mod:`.reward_drop`: one finding for the sampling and the learner side),
and smoothed with an EMA per episode (:class:`ReturnTrend`) for the cross-checks; the rest is
per RLModule (:mod:`.learner_curves`; Q-values and SAC's temperature: :mod:`.offpolicy`)
and, where flow1 traced the Learner, per layer (:mod:`.gradients`). No Ray here.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any, Iterable, Mapping

from ...common.events import Event
from ...common.schema import ALL_MODULES, RESULT_KEY
from ..advice import Knobs
from .clip_fraction import ModuleClipping
from ..curves import result_number, result_section
from .eval_gap import EvalGap
from .exploration import ExplorationRules
from ..findings import Finding
from .gradients import LayerRules
from .learner_curves import ModuleCurves
from .learner_reading import Reading, RunContext, least_squares_slope
from .offpolicy import ModuleOffPolicy
from .replay import ReplayRules
from .reward_drop import ReturnNoise, RunReturnDrop
from .sufficiency import DataCount, Sufficiency, sufficiency
from ..thresholds import DEFAULT, Thresholds


class ReturnTrend:
    """The return's EMA per episode (alpha ``return_ema_alpha``, 0.99 by default: an
    iteration of k episodes with mean m moves it by ``(1 - alpha**k)`` towards m), and
    whether it stalled: rose less than ``return_stall_gain`` of its level over
    ``return_stall_window`` iterations."""

    def __init__(self, thresholds: Thresholds = DEFAULT) -> None:
        self.th = thresholds
        self.ema: float | None = None
        self.history: deque = deque(maxlen=max(2, thresholds.return_stall_window + 1))
        self.first: float | None = None
        self.best: float | None = None

    def add(self, return_mean: float | None, episodes: float | None) -> None:
        if return_mean is None:
            return
        k = max(1.0, float(episodes or 1.0))
        w = self.th.return_ema_alpha ** k
        self.ema = return_mean if self.ema is None else w * self.ema + (1 - w) * return_mean
        self.first = self.ema if self.first is None else self.first
        self.best = self.ema if self.best is None else max(self.best, self.ema)
        self.history.append(self.ema)

    def stalled(self) -> bool | None:
        """None until the window is full; True when the EMA is flat *below the best it
        reached* (a run resting at its best level has converged, it has not stalled)."""
        if len(self.history) < self.history.maxlen or self.ema is None:
            return None
        then = self.history[0]
        flat = self.ema - then < self.th.return_stall_gain * max(abs(then), 1e-9)
        scale = max(abs(self.best), abs(self.best - self.first), 1e-9)
        below = self.ema < self.best - 0.05 * scale or abs(self.best - self.first) <= 0.05 * scale
        return bool(flat and below)


class CurveDiagnosis:
    """Streaming diagnosis over a run's results; :meth:`add` returns the new findings as Events."""

    def __init__(self, *, config: Any = None, action_space: Any = None, thresholds: Thresholds | None = None,
                 return_window: int | None = None, judge_return: bool = True) -> None:
        """``action_space``: one space for every module, or ``{module_id: space}``;
        ``judge_return=False`` when the caller judges REWARD_DROP itself."""
        self.th = thresholds or DEFAULT
        self.knobs = Knobs.from_config(config)
        self.action_space = action_space
        window = return_window or _config_get(config, "metrics_num_episodes_for_smoothing") or 100
        self.window = int(window)
        self.count = DataCount()             # the data each trend rule judges on (data sufficiency)
        self.noise = ReturnNoise(int(window))
        self.drop = RunReturnDrop(self.th, window=int(window), noise=self.noise) if judge_return else None
        self.trend = ReturnTrend(self.th)
        self.modules: dict[str, ModuleCurves] = {}
        self.layers: dict[str, LayerRules] = {}
        self.offpolicy: dict[str, ModuleOffPolicy] = {}
        self.clipping: dict[str, ModuleClipping] = {}
        online = _config_get(config, "input_") in (None, "sampler")
        self.exploration = ExplorationRules(self.knobs, _config_get(config, "epsilon"), self.th, online=online)
        self.replay = ReplayRules(config, self.knobs, self.th, online=online)
        self.eval_gap = EvalGap(config, self.th)
        self.return_abs_max: float | None = None
        self.dropped = False
        self.last: dict[str, dict] = {}
        self.learned = False                 # the return once rose beyond its noise
        self.first_episodes: float | None = None   # the episodes the first return reading averaged
        self.repeats: dict[str, dict] = {}   # "CODE:module": each finding's count, first and last iteration

    def _space(self, module_id: str) -> Any:
        if isinstance(self.action_space, Mapping):
            return self.action_space.get(module_id)
        return self.action_space

    def add(self, result: Mapping) -> list[Event]:
        it = int(result_number(result, "training_iteration") or 0)
        ret = result_number(result, "env_runners", "episode_return_mean")
        if ret is not None and self.first_episodes is None:   # how many episodes the first reading averages
            self.first_episodes = min(self.noise.window, result_number(result, "env_runners", "num_episodes_lifetime")
                                      or result_number(result, "env_runners", "num_episodes") or 1)
        self.trend.add(ret, result_number(result, "env_runners", "num_episodes"))
        self.count.add_iteration(it, ret, result_number(result, "env_runners", "num_episodes_lifetime"))
        self.noise.add(result_number(result, "env_runners", "episode_return_min"),
                       result_number(result, "env_runners", "episode_return_max"),
                       result_number(result, "env_runners", "num_episodes_lifetime"))
        findings: list[Finding] = []
        if self.drop is not None:
            f = self.drop.add(it, ret, result_number(result, "env_runners", "num_episodes_lifetime"))
            if f is not None:
                findings.append(f)
            self.dropped = self.drop.began is not None and self.drop.reported
        for key in ("episode_return_max", "episode_return_min", "episode_return_mean"):
            v = result_number(result, "env_runners", key)
            if v is not None:
                self.return_abs_max = max(abs(v), self.return_abs_max or 0.0)
        gained = None if self.trend.best is None else self.trend.best - self.trend.first
        learned = self.noise.gain_beyond(gained, self.th.return_noise_z, self.first_episodes) \
            if gained is not None else None   # gained: a first reading, so first_episodes is known
        self.learned = self.learned or bool(learned)
        run = RunContext(stalled=self.trend.stalled(), dropped=self.dropped, return_abs_max=self.return_abs_max,
                         learned=True if self.learned else learned, noise=self.noise.sigma,
                         episode_len_mean=result_number(result, "env_runners", "episode_len_mean"))
        steps = result_number(result, "num_env_steps_sampled_lifetime")
        findings += self.exploration.add(it, steps, run)
        findings += self.eval_gap.add(result)
        findings += self.replay.add(result, run)
        findings += self._modules(result, it, steps, run)
        return [f.to_event(iteration=it) for f in self._first_of_each(findings, it)]

    def _modules(self, result: Mapping, it: int, steps: float | None, run: RunContext) -> list[Finding]:
        """Each RLModule's learner numbers of this iteration, judged (and kept in ``self.last``)."""
        findings: list[Finding] = []
        learners = result_section(result, "learners")
        extras = result_section(result_section(result, RESULT_KEY), "learner")
        self.last = {}
        for mid, stats in learners.items():
            if mid == ALL_MODULES or not isinstance(stats, Mapping):
                continue
            mine = extras.get(mid) if isinstance(extras.get(mid), Mapping) else {}
            reading = Reading.from_learner_stats(it, stats, steps, mine)
            curves = self.modules.get(mid)
            if curves is None:
                curves = self.modules[mid] = ModuleCurves(mid, self.knobs, self.th, self._space(mid))
            findings += curves.add(reading, run)
            ratio = curves.ratios[-1] if curves.ratios and reading.entropy is not None else None
            findings += self._module_rules(mid, curves, reading, run, stats, mine, it, ratio)
            self.last[mid] = {k: v for k, v in {
                "entropy_ratio": ratio, "kl": reading.kl, "lr": reading.lr, "clip_fraction": reading.clip_fraction,
                "is_mean": reading.is_mean,
                "grad_norm": reading.grad_norm, "vf_pi_trunk_ratio": reading.vf_pi_trunk_ratio}.items()
                if v is not None}
            self.count.add_module_row(it, {**stats, **self.last[mid]})
        return findings

    def _module_rules(self, mid: str, curves: Any, reading: Reading, run: RunContext, stats: Mapping,
                      mine: Mapping, it: int, ratio: float | None) -> list[Finding]:
        """The off-policy, clipping and per-layer rules of one module at one iteration."""
        findings: list[Finding] = []
        off = self.offpolicy.get(mid)
        if off is None:
            off = self.offpolicy[mid] = ModuleOffPolicy(mid, self.knobs, self.th, self._space(mid))
        clipping = self.clipping.get(mid)
        if clipping is None:
            clipping = self.clipping[mid] = ModuleClipping(mid, self.knobs, self.th)
        kls = list(curves.kls)[-self.th.kl_window:]
        falling = len(curves.ratios) >= 2 and ratio is not None and least_squares_slope(
            list(curves.ratios)[-self.th.entropy_slope_window:]) <= -self.th.entropy_collapse_slope
        findings += off.add(reading, run, ratio, falling)
        f = clipping.add(reading, run, statistics.median(kls) if kls and curves.kl_measured else None, ratio,
                         curves.nothing_to_learn_seen(run, reading))
        if f is not None:
            findings.append(f)
        layers = self.layers.get(mid)
        if layers is None:
            layers = self.layers[mid] = LayerRules(mid, self.knobs, self.th)
        findings += layers.add(it, stats, mine, reading.lr, ratio)
        return findings

    def _first_of_each(self, findings: list[Finding], iteration: int) -> list[Finding]:
        """One row per finding: a rule that fires again for the same module at the same status
        (its signal left the range and came back, as a noisy signal does) adds to its count, not
        a row; an advisory that turns into a WARN is a new row."""
        out = []
        for f in findings:
            key = f"{f.code}:{f.evidence.get('module_id', '')}"
            key += ":advisory" if f.evidence.get("advisory") else ""
            seen = self.repeats.get(key)
            if seen is None:
                self.repeats[key] = {"count": 1, "first_iteration": iteration, "last_iteration": iteration}
                out.append(f)
            else:
                seen["count"] += 1
                seen["last_iteration"] = iteration
        return out

    def sufficiency(self) -> Sufficiency:
        """Which trend rules had enough data so far (:mod:`.sufficiency`)."""
        return sufficiency(self.count, self.th, self.window)

    def values(self) -> dict[str, Any]:
        """The numbers behind the rules, for ``result["flow1"]["learner"]`` (Tune passes them on)."""
        out: dict[str, Any] = {"return_ema": self.trend.ema, "return_stalled": self.trend.stalled()}
        out.update({mid: v for mid, v in self.last.items()})
        if self.replay.values:
            out["replay"] = dict(self.replay.values)
        again = {k: v["count"] for k, v in self.repeats.items() if v["count"] > 1}
        if again:
            out["repeats"] = again
        return out


def diagnose_curves(results: Iterable[Mapping], *, config: Any = None, action_space: Any = None,
                    thresholds: Thresholds | None = None) -> list[Event]:
    """Every finding of the learner-curve rules over a run's results, in order.

    Args:
        results: RLlib result dicts, one per iteration (new API stack keys, one ``learners/<module>``
            entry per module), as ``algo.train()`` returns them or as Tune writes them to ``result.json``.
        config: the run's ``AlgorithmConfig`` or its dict (the advice's current values, the return's
            smoothing window, what the exploration, replay and eval rules read); None: the first
            result's ``config`` entry, and without that the advice has no current values to start from.
        action_space: a gymnasium space, or ``{module_id: space}``, for the entropy maximum; None: the
            entropy ratio only where the first reading shows a uniform discrete policy.
        thresholds: the rules' thresholds; None: the defaults.

    Returns:
        The findings as :class:`Event` objects, each with its ``iteration``; a rule that fires again
        for the same module at the same status is not repeated.
    """
    return diagnose_run(results, config=config, action_space=action_space, thresholds=thresholds)[0]


def diagnose_run(results: Iterable[Mapping], *, config: Any = None, action_space: Any = None,
                 thresholds: Thresholds | None = None) -> tuple[list[Event], Sufficiency]:
    """:func:`diagnose_curves`, and which trend rules had enough data (:mod:`.sufficiency`)."""
    results = list(results)
    if config is None and results:
        config = results[0].get("config") if isinstance(results[0].get("config"), Mapping) else None
    diag = CurveDiagnosis(config=config, action_space=action_space, thresholds=thresholds)
    events: list[Event] = []
    for r in results:
        events += diag.add(r)
    return events, diag.sufficiency()


def _config_get(config: Any, name: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)
