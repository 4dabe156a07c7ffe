"""What flow1 did for the user, said as findings: a learner snapshot saved after a return
drop or a loss plateau, a guard's checkpoint or stop on a FAIL (``on_fail``), a live what-if
started and its verdicts. The driver raises them (:mod:`flow1_ray.driver.learner_watch`,
:mod:`flow1_ray.driver.live_whatif`); they are declared here so that the catalogue finds
every code in its own package.
"""

from __future__ import annotations

from ...common import codes as C
from ..rule import Rule

RULES = (
    Rule("LEARNER_SNAPSHOT", C.TRAIN_CURVES, C.PASS,
         "the latest train batch and per-layer gradient norms were saved under snapshots/ (after a return drop "
         "or a loss plateau)"),
    Rule("GUARD_ACTION", C.FLOW1, C.PASS, "on_fail: flow1 saved a checkpoint and/or stopped the run because of a FAIL"),
    Rule("WHATIF_STARTED", C.FLOW1, C.PASS,
         "with_options(whatif=True): a finding advised knobs; flow1 branched the run from a checkpoint to test them "
         "(the branches, the seeds, the checkpoint)"),
    Rule("WHATIF_VERDICT", C.FLOW1, C.PASS,
         "a live what-if's verdict on one advice: held / did not hold / harmful / inconclusive / knob not in effect, "
         "with the signal, the seeds' values and the one-sided rank test's p; or why there is none (the run "
         "stopped first, a branch failed)"),
)
