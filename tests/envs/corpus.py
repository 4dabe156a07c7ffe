"""The corpus of real reported faults: each case a fault users reported in a public thread,
whose cause the thread established (a maintainer said it, the reporter confirmed the fix, or a
merged PR fixed it), reproduced as a tiny env with exactly that fault, beside its fixed twin
(the same env with the fix). ``names`` are the codes that name the established cause; a case
flow1 cannot name says why in ``gap``.

The cases live in ``corpus_env.py`` (single-agent) and ``corpus_multi.py`` (RLlib
MultiAgentEnv); ``scripts/corpus.py`` runs them all and prints flow1's verdict per case
against the established cause, beside gymnasium's and SB3's ``check_env`` on the same envs;
``tests/envcheck/test_corpus.py`` holds the same verdicts in the suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

NAMED, MISNAMED, MISSED = "named", "mis-named", "missed"


@dataclass(frozen=True)
class Case:
    """One reported fault: where it was reported, what the thread established, the faulty env
    and its fixed twin, and the codes that name the cause."""

    id: str
    category: str
    address: str
    cause: str
    fault: Callable[[], Any]
    twin: Callable[[], Any]
    names: frozenset
    steps: int = 1000
    options: dict = field(default_factory=dict)   # check_env keyword arguments (audit_reward=True)
    multi_agent: bool = False
    gap: str = ""                                  # why flow1 cannot name it, where it cannot


def case(id: str, category: str, address: str, cause: str, fault: Callable, twin: Callable, names: set,
         **kw: Any) -> Case:
    return Case(id, category, address, cause, fault, twin, frozenset(names), **kw)


def loud(report: Any) -> list:
    """A report's WARN and FAIL events."""
    return [e for e in report.events if e.status in ("WARN", "FAIL")]


def verdict(c: Case, report: Any) -> str:
    """named: a WARN/FAIL with a code that names the cause; mis-named: WARN/FAIL, none of them;
    missed: nothing loud."""
    codes = {e.code for e in loud(report)}
    if codes & c.names:
        return NAMED
    return MISNAMED if codes else MISSED


def cases() -> list[Case]:
    import corpus_env
    import corpus_multi

    return corpus_env.CASES + corpus_multi.CASES
