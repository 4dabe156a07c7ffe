"""A finding's declaration, written once beside the function that raises it.

A :class:`Rule` holds everything a reader of a finding needs that is not the finding's own
numbers: its code, the module it belongs to, its default status, the thresholds family it is
judged against, the trigger text (rendered from those thresholds, so the text never states a
number the rule does not use), the evidence keys it writes, the RLlib knobs its advice may
turn, the signal the report and the panel chart for it, and, for a rule that judges a trend,
the least data it needs (:class:`Needs`). Rule files list theirs in a
module-level ``RULES`` tuple; :mod:`.catalogue` collects them, and the code constants of
:mod:`flow1_ray.common.codes`, the README's table of codes and ``configs/thresholds.json`` are
generated from that collection (``python -m flow1_ray.checks.catalogue --write``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .thresholds import DEFAULT


@dataclass(frozen=True)
class View:
    """What the report and the panel chart for a finding: ``columns`` of the run-directory
    table ``table``, under ``title``."""

    table: str
    columns: tuple[str, ...]
    title: str


@dataclass(frozen=True)
class Needs:
    """The least data a trend rule judges on (data sufficiency): ``iterations`` summed (ints and
    names of threshold fields), counted as the iterations in which the rule's signal was
    recorded (its :class:`View`'s columns, in any RLModule; a rule with no view counts the
    iterations with an episode return), and ``episode_windows`` smoothing windows of episodes
    (RLlib's ``metrics_num_episodes_for_smoothing``, 100 by default). ``learns``: the rule says
    whether the run learns (the return, the policy's entropy and KL, the critic, SAC's
    temperature), so a run too short for every such rule is "not enough data to judge
    learning", never a PASS."""

    iterations: tuple[int | str, ...] = ()
    episode_windows: int = 0
    learns: bool = True

    def least_iterations(self, thresholds: Any = None) -> int:
        """The iterations it needs, under ``thresholds`` (the defaults when None)."""
        th = DEFAULT if thresholds is None else thresholds
        return int(sum(v if isinstance(v, int) else getattr(th, v) for v in self.iterations))

    def text(self, thresholds: Any = None, window: int = 100) -> str:
        """The need in words: "5 iterations with its signal, and 200 episodes"."""
        out = f"{self.least_iterations(thresholds)} iterations with its signal"
        if self.episode_windows:
            out += (f" and {self.episode_windows} smoothing windows of episodes ({self.episode_windows * window} "
                    f"at metrics_num_episodes_for_smoothing={window})")
        return out


@dataclass(frozen=True)
class Rule:
    """One finding code and what it means (see the module docstring)."""

    code: str
    module: str
    status: str
    trigger: str
    thresholds: type | None = None
    evidence: tuple[str, ...] = ()
    knobs: tuple[str, ...] = ()
    view: View | None = None
    needs: Needs | None = None

    def text(self, thresholds: Any = None) -> str:
        """The trigger with the thresholds' values in it: the defaults, or a run's own
        (any object with the family's fields, e.g. a whole :class:`Thresholds`). A family's
        properties (a value derived from its fields) can be named too."""
        if self.thresholds is None:
            return self.trigger
        fam = self.thresholds() if thresholds is None else self.thresholds(
            **{f.name: getattr(thresholds, f.name) for f in dataclasses.fields(self.thresholds)})
        return self.trigger.format_map(_Attributes(fam))


class _Attributes:
    """``str.format_map`` over an object's attributes."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getitem__(self, name: str) -> Any:
        return getattr(self.obj, name)
