"""Enough data to judge learning? Counted per trend rule, before any curve verdict is trusted.

A run of two iterations has no trend: its KL window, its entropy slope and its return's best
level are not there yet, and a report that said PASS on it would say the run learns when
nothing was looked at. Each trend rule declares the least data it judges on
(:class:`~flow1_ray.checks.rule.Needs`, shown in its reference entry); :class:`DataCount`
counts, per rule, the iterations in which its signal was recorded (in any RLModule) and the
episodes completed, from a run's result dicts (live, ``flow1 diagnose``) or from its run
directory's tables (``flow1 report``), and :func:`sufficiency` says which rules could judge.
A rule whose signal the run never recorded (SAC's alpha in a PPO run) does not apply. When no
rule that says whether the run learns could judge, the learning verdict is "not enough data
to judge learning", with the counts and the nearest need. No Ray here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...common import codes as C
from ...common import schema as S
from ..rule import Needs
from ..thresholds import DEFAULT, Thresholds

#: RLlib's default ``metrics_num_episodes_for_smoothing``
DEFAULT_WINDOW = 100
#: iterations remembered per signal column: every need is far below it, so a long run's count
#: stays bounded and still meets them
KEEP = 64


def trend_rules() -> dict[str, tuple[Needs, tuple[str, ...]]]:
    """code -> (what it needs, the columns of its signal; () for the return), from the data the
    catalogue generates (:data:`flow1_ray.common.codes.NEEDS`): no rule file is imported."""
    return {c: (Needs(tuple(its), windows, learns), tuple(cols)) for c, (its, windows, learns, cols) in C.NEEDS.items()}


def iterations(n: int) -> str:
    return f"{n} iteration" + ("" if n == 1 else "s")


@functools.lru_cache(maxsize=1)
def signal_columns() -> frozenset[str]:
    """The columns the trend rules' views read: the only ones counted."""
    return frozenset(c for _, cols in trend_rules().values() for c in cols)


def _present(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


@dataclass
class DataCount:
    """What a run recorded so far: iterations, iterations with a return, episodes completed,
    and per signal column the iterations in which some RLModule recorded it."""

    iterations: int = 0
    returns: int = 0
    episodes: int | None = None
    signals: dict[str, set] = field(default_factory=dict)   # column -> iterations with it
    window: int | None = None     # the run's metrics_num_episodes_for_smoothing, where recorded

    def add_iteration(self, iteration: int, return_mean: Any, episodes_lifetime: Any) -> None:
        self.iterations += 1
        self.returns += _present(return_mean)
        if _present(episodes_lifetime):
            self.episodes = max(int(episodes_lifetime), self.episodes or 0)

    def add_module_row(self, iteration: int, row: Mapping) -> None:
        """One RLModule's numbers of one iteration (a learner-table row, or RLlib's stats)."""
        wanted = signal_columns()
        for col, v in row.items():
            if col in wanted and _present(v):
                its = self.signals.setdefault(col, set())
                if len(its) < KEEP:
                    its.add(iteration)

    def had(self, columns: tuple[str, ...]) -> int | None:
        """The iterations with a rule's signal (its ``columns``; () for the return); None when
        the run never recorded it."""
        if not columns:
            return self.returns or None
        its = set().union(*(self.signals.get(c, set()) for c in columns))
        return len(its) or None

    def columns(self) -> dict[str, int]:
        return {c: len(v) for c, v in sorted(self.signals.items())}


@dataclass(frozen=True)
class Sufficiency:
    """Which trend rules could judge, and the learning verdict's standing."""

    enough: bool                  # some rule that says whether the run learns could judge
    judged: tuple[str, ...]       # codes whose need was met
    short: dict[str, str]         # code -> "needs ..., had ..." for rules that apply but could not judge
    line: str | None              # "not enough data to judge learning: ..." (None when enough)
    counts: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"enough": self.enough, "judged": list(self.judged), "short": dict(self.short), "line": self.line,
                "counts": self.counts}


def sufficiency(count: DataCount, thresholds: Thresholds = DEFAULT, window: int | None = None) -> Sufficiency:
    """Judge ``count`` against every trend rule's need (``window``: the run's
    ``metrics_num_episodes_for_smoothing``)."""
    window = int(window or count.window or DEFAULT_WINDOW)
    judged, short, nearest = [], {}, []
    rules = trend_rules()
    for code, (needs, columns) in sorted(rules.items()):
        had = count.had(columns)
        if had is None:
            continue   # the run never recorded its signal: the rule does not apply
        need = needs.least_iterations(thresholds)
        episodes_needed = needs.episode_windows * window
        ok = had >= need and (not episodes_needed or count.episodes is None or count.episodes >= episodes_needed)
        if ok:
            judged.append(code)
            continue
        got = f"had {had}" + (f" and {count.episodes} episodes" if episodes_needed and count.episodes is not None else "")
        short[code] = f"needs {needs.text(thresholds, window)}; {got}"
        if needs.learns:
            nearest.append((need, code, needs.text(thresholds, window)))
    enough = any(rules[c][0].learns for c in judged)
    counts = {"iterations": count.iterations, "episodes": count.episodes, "signals": count.columns()}
    line = None
    if not enough:
        eps = f"{count.episodes} episodes" if count.episodes is not None else "episodes not counted"
        if nearest:
            need, _, text = min(nearest)
            codes = ", ".join(c for n, c, _ in sorted(nearest) if n == need)
            first = (f"the first learning rules ({codes}) each need {text}" if "," in codes
                     else f"the first learning rule ({codes}) needs {text}")
        else:
            first = "no learning signal was recorded (no return, no learner stats)"
        line = f"not enough data to judge learning: {iterations(count.iterations)}, {eps}; {first}"
    return Sufficiency(enough, tuple(judged), short, line, counts)


def count_from_tables(metrics_rows: Iterable[Mapping], learner_rows: Iterable[Mapping]) -> DataCount:
    """A run directory's count: one metrics row per iteration (its ``episode_return_mean`` and
    ``episodes``, the lifetime count, absent in run directories written before it) and the
    learner table's per-module rows."""
    count = DataCount()
    seen = set()
    for r in metrics_rows:
        it = r.get("iteration")
        if isinstance(it, int) and not isinstance(it, bool) and it not in seen:
            seen.add(it)
            count.add_iteration(it, r.get("episode_return_mean"), r.get(S.EPISODES))
            w = r.get(S.SMOOTHING_WINDOW)
            if isinstance(w, int) and not isinstance(w, bool) and w > 0:
                count.window = w
    for r in learner_rows:
        if r.get("kind") == S.KIND_MODULE and isinstance(r.get("iteration"), int):
            count.add_module_row(r["iteration"], {k: v for k, v in r.items()
                                                  if k not in ("iteration", "module_id", "kind", "layer")})
    return count
