"""A finding's declaration, written once beside the function that raises it.

A :class:`Rule` holds everything a reader of a finding needs that is not the finding's own
numbers: its code, the module it belongs to, its default status, the thresholds family it is
judged against, the trigger text (rendered from those thresholds, so the text never states a
number the rule does not use), the evidence keys it writes, the RLlib knobs its advice may
turn, and the signal the report and the panel chart for it. Rule files list theirs in a
module-level ``RULES`` tuple; :mod:`.catalogue` collects them, and the code constants of
:mod:`flow1_ray.common.codes`, the README's table of codes and ``configs/thresholds.json`` are
generated from that collection (``python -m flow1_ray.checks.catalogue --write``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class View:
    """What the report and the panel chart for a finding: ``columns`` of the run-directory
    table ``table``, under ``title``."""

    table: str
    columns: tuple[str, ...]
    title: str


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
