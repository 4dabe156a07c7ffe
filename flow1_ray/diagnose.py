"""``diagnose_curves``: the learner side of a run read from its result dicts, live or offline.

Live, :class:`CurveDiagnosis` takes each iteration's result in ``on_train_result``; offline,
``flow1 diagnose PATH`` reads a finished run's Tune/RLlib ``result.json`` (one JSON object
per line; its ``config`` entry or a ``params.json`` beside it gives the knobs), so a run made
without flow1 can be read too. The return is judged once, on the run (REWARD_DROP of
:mod:`.checks.curves`: one finding for the sampling and the learner side), and smoothed with
an EMA per episode (alpha ``return_ema_alpha``, 0.99 by default) for the cross-checks; the
rest is per RLModule (:mod:`.checks.learner_curves`) and, where flow1 traced the Learner, per layer
(:mod:`.checks.gradients`). No Ray here.

A result file is data, never code: nothing it names is imported (its config's ``env`` may
be ``my_pkg.envs:Env`` or a registered id whose entry point imports a package); only an env
the user names (``--env``) is made, for its action space. A signal the rules need that is
absent or all NaN is listed as not assessable (:func:`not_assessable`), never silence.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any, Iterable, Mapping

from .checks.advice import Knobs
from .checks.curves import result_number
from .checks.findings import Finding
from .checks.gradients import LayerRules
from .checks.learner_curves import ModuleCurves
from .checks.learner_reading import Reading, RunContext
from .checks.reward_drop import RunReturnDrop
from .checks.thresholds import DEFAULT, Thresholds
from .errors import Flow1InputError
from .events import Event
from .schema import ALL_MODULES

#: Where flow1 puts its own numbers in a result (``result["flow1"]["learner"][module]``).
FLOW1_KEY = "flow1"


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
        self.drop = RunReturnDrop(self.th, window=int(window)) if judge_return else None
        self.trend = ReturnTrend(self.th)
        self.modules: dict[str, ModuleCurves] = {}
        self.layers: dict[str, LayerRules] = {}
        self.dropped = False
        self.last: dict[str, dict] = {}

    def _space(self, module_id: str) -> Any:
        if isinstance(self.action_space, Mapping):
            return self.action_space.get(module_id)
        return self.action_space

    def add(self, result: Mapping) -> list[Event]:
        it = int(result_number(result, "training_iteration") or 0)
        ret = result_number(result, "env_runners", "episode_return_mean")
        self.trend.add(ret, result_number(result, "env_runners", "num_episodes"))
        findings: list[Finding] = []
        if self.drop is not None:
            f = self.drop.add(it, ret, result_number(result, "env_runners", "num_episodes_lifetime"))
            if f is not None:
                findings.append(f)
            self.dropped = self.drop.began is not None and self.drop.reported
        run = RunContext(stalled=self.trend.stalled(), dropped=self.dropped)
        steps = result_number(result, "num_env_steps_sampled_lifetime")
        learners = _section(result, "learners")
        extras = _section(_section(result, FLOW1_KEY), "learner")
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
            layers = self.layers.get(mid)
            if layers is None:
                layers = self.layers[mid] = LayerRules(mid, self.knobs, self.th)
            findings += layers.add(it, stats, mine, reading.lr)
            ratio = curves.ratios[-1] if curves.ratios and reading.entropy is not None else None
            self.last[mid] = {k: v for k, v in {
                "entropy_ratio": ratio, "kl": reading.kl, "lr": reading.lr,
                "grad_norm": reading.grad_norm, "vf_pi_trunk_ratio": reading.vf_pi_trunk_ratio}.items()
                if v is not None}
        return [f.to_event(iteration=it) for f in findings]

    def values(self) -> dict[str, Any]:
        """The numbers behind the rules, for ``result["flow1"]["learner"]`` (Tune passes them on)."""
        out: dict[str, Any] = {"return_ema": self.trend.ema, "return_stalled": self.trend.stalled()}
        out.update({mid: v for mid, v in self.last.items()})
        return out


def diagnose_curves(results: Iterable[Mapping], *, config: Any = None, action_space: Any = None,
                    thresholds: Thresholds | None = None) -> list[Event]:
    """Every finding of the learner-curve rules over a run's results, in order.

    ``results``: RLlib result dicts (new API stack keys, one ``learners/<module>`` entry per
    module), as ``algo.train()`` returns them or as Tune writes them to ``result.json``.
    ``config``: the run's ``AlgorithmConfig`` or its dict; without one, the first result's
    ``config`` entry is used, and without that the advice has no current values to start from.
    ``action_space``: a gymnasium space or ``{module_id: space}`` for the entropy maximum."""
    results = list(results)
    if config is None and results:
        config = results[0].get("config") if isinstance(results[0].get("config"), Mapping) else None
    diag = CurveDiagnosis(config=config, action_space=action_space, thresholds=thresholds)
    events: list[Event] = []
    for r in results:
        events += diag.add(r)
    return events


def read_results(path: str | Path) -> tuple[list[dict], dict | None]:
    """A run's results and config from a ``result.json`` (or the directory holding it).
    Raises :class:`Flow1InputError` with one line on anything unreadable."""
    p = Path(path)
    if p.is_dir():
        candidates = [p / "result.json"] + sorted(p.glob("*/result.json"))
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise Flow1InputError(f"no result.json in {p}")
        p = found[0]
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise Flow1InputError(f"cannot read {p}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise Flow1InputError(f"{p} is not a text file (expected one JSON object per line)") from None
    results = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise Flow1InputError(f"{p}:{n}: not JSON ({e.msg}); expected one RLlib result object per line") from None
        if not isinstance(r, dict):
            raise Flow1InputError(f"{p}:{n}: expected a JSON object, actual {type(r).__name__}")
        results.append(r)
    if not results:
        raise Flow1InputError(f"{p} holds no results")
    if not any(isinstance(r.get("learners"), dict) or any(k.startswith("learners/") for k in r) for r in results):
        raise Flow1InputError(f"{p}: no 'learners' entries; expected RLlib results of the new API stack")
    config = results[0].get("config") if isinstance(results[0].get("config"), dict) else None
    params = p.parent / "params.json"
    if config is None and params.is_file():
        try:
            loaded = json.loads(params.read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else None
        except (OSError, json.JSONDecodeError):
            config = None
    return results, config


#: the run-level signal the rules read: label -> path in a result
RUN_SIGNALS = {"episode return (env_runners/episode_return_mean)": ("env_runners", "episode_return_mean")}
#: each RLModule's signals: label -> the learner stats names that carry it
MODULE_SIGNALS = {"entropy": ("entropy",), "KL": ("mean_kl_loss",), "policy loss": ("policy_loss",),
                  "value loss": ("vf_loss",), "learning rate": ("default_optimizer_learning_rate", "curr_lr")}


def not_assessable(results: list[Mapping], action_space: Any = None) -> tuple[list[str], bool]:
    """What the curve rules cannot judge in these results -- each signal absent or never a
    finite number, per RLModule, and the entropy maximum without an action space -- and
    whether anything at all can be judged (False: every signal absent or NaN)."""
    from .checks.curves import finite

    out: list[str] = []
    judged = False
    for label, path in RUN_SIGNALS.items():
        if any(result_number(r, *path) is not None for r in results):
            judged = True
        else:
            out.append(f"{label}: absent or never a finite number")
    modules: dict[str, dict[str, bool]] = {}
    for r in results:
        for mid, stats in _section(r, "learners").items():
            if mid == ALL_MODULES or not isinstance(stats, Mapping):
                continue
            seen = modules.setdefault(str(mid), {k: False for k in MODULE_SIGNALS})
            for label, names in MODULE_SIGNALS.items():
                seen[label] = seen[label] or any(finite(stats.get(n)) is not None for n in names)
    if not modules:
        out.append("learner numbers (learners/<module>/...): absent")
    for mid, seen in sorted(modules.items()):
        missing = [label for label, ok in seen.items() if not ok]
        judged = judged or len(missing) < len(seen)
        if len(missing) == len(seen):
            out.append(f"module {mid}: no learner number is ever finite")
        elif missing:
            out.append(f"module {mid}: {', '.join(missing)} absent or never finite")
    if action_space is None and judged:
        out.append("entropy / max entropy: no action space (name the env with --env); ENTROPY_COLLAPSE not judged")
    return out, judged


def action_space_of(env_id: str, required: bool = False) -> Any:
    """The action space of a registered gymnasium env (made and closed at once); None when
    it cannot be made, unless ``required`` (the user named it): then a clear error. Only
    for an env id the user gave: making an env may import the module its id names."""
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except Exception as e:
        if required:
            raise Flow1InputError(f"cannot make env {env_id!r} for its action space: {type(e).__name__}: {e}") from None
        return None
    try:
        return env.action_space
    finally:
        try:
            env.close()
        except Exception:
            pass


def _section(result: Mapping, key: str) -> dict:
    """``result[key]`` as a nested dict, also when Tune flattened it to ``key/a/b`` keys."""
    v = result.get(key)
    if isinstance(v, Mapping):
        return dict(v)
    prefix = key + "/"
    out: dict = {}
    for k, val in result.items():
        if isinstance(k, str) and k.startswith(prefix):
            parts = k[len(prefix):].split("/")
            d = out
            for part in parts[:-1]:
                d = d.setdefault(part, {})
                if not isinstance(d, dict):
                    break
            else:
                d[parts[-1]] = val
    return out


def _config_get(config: Any, name: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)
