"""The corpus of real reported faults (``tests/envs/corpus.py``; each case's thread and its
established cause in the case): every fault named by a code of its cause, every fixed twin
silent. ``python scripts/corpus.py`` prints the same verdicts beside gymnasium's and SB3's
checkers."""

from __future__ import annotations

import pytest

from corpus import NAMED, cases, loud, verdict
from flow1_ray import check_env

CASES = cases()


def test_the_corpus_holds_its_cases_with_their_threads():
    assert len(CASES) >= 19 and len({c.id for c in CASES}) == len(CASES)
    assert all(c.address.startswith("https://github.com/") and c.cause and c.names for c in CASES)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_a_reported_fault_is_named_with_its_cause_and_its_fixed_twin_is_silent(c):
    fault = check_env(c.fault(), steps=c.steps, seed=0, **c.options)
    assert verdict(c, fault) == NAMED, (c.cause, [e.log_line() for e in loud(fault)])
    twin = check_env(c.twin(), steps=c.steps, seed=0, **c.options)
    assert loud(twin) == [], [e.log_line() for e in loud(twin)]
