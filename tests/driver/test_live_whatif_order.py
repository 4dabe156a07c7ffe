"""The live what-if tests the diagnosis's change first (driver/live_whatif.diagnosis_first): the
sick PPO run's findings as its advice, in the order they came."""

from __future__ import annotations

from flow1_ray.common import codes as C
from flow1_ray.driver.live_whatif import diagnosis_first
from flow1_ray.whatif.plan import Advice

from sick_findings import sick_ppo


def _advice(events):
    return [Advice(e.code, e.evidence.get("module_id"), e.status, tuple(e.evidence.get("knobs") or []), e.message,
                   e.iteration) for e in events if e.evidence.get("knobs")]


def test_the_most_likely_causes_change_is_the_first_branch():
    events = sick_ppo()
    came = _advice(list(reversed(events)))   # the value clip's advice first, as it came
    assert came[0].code == C.VALUE_NOT_LEARNING
    ordered = diagnosis_first(events, came)
    assert ordered[0].code == C.KL_SPIKE and ordered[0].knobs[0]["knob"] == "lr"
    assert sorted(a.code for a in ordered) == sorted(a.code for a in came)   # nothing dropped


def test_no_diagnosis_leaves_the_order_as_it_came():
    came = _advice(sick_ppo())
    assert diagnosis_first([], came) == came
