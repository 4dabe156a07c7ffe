"""Findings: what a check says, before it becomes an :class:`~flow1_ray.common.events.Event`.

A per-step fault usually repeats (a dtype that turns float64 at step 6 stays float64), so
findings are aggregated by ``(code, key)``: the first occurrence keeps its message and
evidence, later ones only bump a counter. The message is built lazily, on the first hit,
so that a check running on every step pays for a counter increment and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from ..common import codes as C
from ..common.events import Event, utcnow
from .rule import Rule

RULES = (
    Rule("CHECKS_PASSED", "", C.PASS, "every check of a module passed; evidence has its statistics"),
)


@dataclass
class Finding:
    """One aggregated finding: the first occurrence plus how many times it recurred."""

    code: str
    message: str
    evidence: dict = field(default_factory=dict)
    status: str = ""
    module: str = ""
    env_step: int | None = None
    count: int = 1
    ts: datetime = field(default_factory=utcnow)  # when first seen

    def __post_init__(self) -> None:
        if not (self.status and self.module):   # the rule's defaults (FindingLog ranks statuses)
            spec = C.DEFAULTS.get(self.code)
            if spec is None:
                raise ValueError(f"unknown finding code {self.code!r}: declare it in a rule file's RULES")
            self.module, self.status = self.module or spec[0], self.status or spec[1]

    def to_event(self, **where) -> Event:
        ev, msg = dict(self.evidence), self.message
        if self.count > 1:
            ev["count"] = self.count
            msg = f"{msg} ({self.count} occurrences)"
        return Event(code=self.code, message=msg, evidence=ev, module=self.module, status=self.status,
                     ts=self.ts, env_step=self.env_step, **where)


ADVISORY_PREFIX = "advisory: "


def advisory(code: str, message: str, evidence: dict, env_step: int | None = None) -> Finding:
    """A finding that is not a fault: how the env must be fed (uint8 images to scale), or a
    property many good envs have by design (sparse goal rewards, episodes longer than the
    budget). It keeps its code and its numbers, so the log and the report show it, but its
    status is PASS: it never counts as a WARN and never changes an exit code."""
    return Finding(code, ADVISORY_PREFIX + message, {**evidence, "advisory": True}, status=C.PASS, env_step=env_step)


class FindingLog:
    """Aggregates findings by ``(code, key)``; keeps insertion order."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Finding] = {}
        self._sent: set[tuple[str, str]] = set()

    def hit(self, code: str, key: str, build: Callable[[], tuple[str, dict]],
            env_step: int | None = None, status: str = "") -> None:
        """Record one occurrence; ``build`` (message, evidence) runs only on the first."""
        f = self._items.get((code, key))
        if f is not None:
            f.count += 1
            if status and C.STATUS_RANK[status] > C.STATUS_RANK[f.status]:
                f.status = status
            return
        message, evidence = build()
        self._items[(code, key)] = Finding(code, message, evidence, status=status, env_step=env_step)

    def add(self, finding: Finding, key: str = "") -> None:
        """Record a finding built elsewhere (batch checks); same aggregation."""
        f = self._items.get((finding.code, key))
        if f is None:
            self._items[(finding.code, key)] = finding
        else:
            f.count += finding.count

    def put(self, finding: Finding, key: str = "") -> None:
        """Record a finding that is re-judged from the whole stream each time (replacing the
        last judgement, where ``add`` would add the counts up)."""
        self._items[(finding.code, key)] = finding

    def extend(self, findings: list[Finding]) -> None:
        for f in findings:
            self.add(f, key=str(f.evidence.get("path", "")))

    def pop_new(self) -> list[Finding]:
        """Findings whose key was not returned by an earlier call (live runs send each once)."""
        new = [f for k, f in self._items.items() if k not in self._sent]
        self._sent.update(self._items)
        return new

    def findings(self) -> list[Finding]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)
