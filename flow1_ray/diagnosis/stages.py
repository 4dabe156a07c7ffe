"""Where a finding sits in a run's data flow, and which findings can follow from which.

A run's data flows env -> runners -> sampling -> learner. A fault upstream shows downstream: a
NaN observation, a reward computed after the env moved its goal or a runner that dies every
iteration all leave the learner's curves looking sick, and those curves then carry advice of
their own (lr down, a wider value clip) that would treat the symptom. The diagnosis names the
most upstream finding that explains others as the primary symptom and lists what follows from
it under it (:func:`follows`), not as advice of its own.

Stages, upstream first: ``env`` (the env's contract on live data), ``pipeline`` (what the
connectors and the RLModule make of it: what the module sees and emits), ``liveness`` (runners and
learners alive and answering), ``sampling`` (what the learner is fed: exploration, replay,
discarded samples), ``learning`` (the learner's curves and gradients). ``performance``
(a slow step, contention, memory growth) explains no curve: a finding there is primary only
when nothing else is found.
"""

from __future__ import annotations

from ..common import codes as C

ENV, PIPELINE, LIVENESS, SAMPLING, LEARNING, PERFORMANCE = ("env", "pipeline", "liveness", "sampling", "learning",
                                                             "performance")
#: upstream first; performance last (it explains no other finding)
STAGES = (ENV, PIPELINE, LIVENESS, SAMPLING, LEARNING, PERFORMANCE)
RANK = {s: i for i, s in enumerate(STAGES)}

_BY_MODULE = {C.ENV_SPEC: ENV, C.IMPORT_RESOLVE: ENV, C.REWARD_LOGIC: ENV, C.ACTION_PIPE: ENV, C.OBS_FLOW: ENV,
              C.REWARD_STATS: ENV, C.PIPELINE: PIPELINE, C.WORKER: LIVENESS, C.RESOURCE: PERFORMANCE, C.MEMORY: PERFORMANCE,
              C.TRAIN_CURVES: LEARNING, C.GRADIENT_FLOW: LEARNING, C.STATE_ACTION: LEARNING}
_BY_CODE = {
    "REWARD_DROP": LEARNING, "STEP_DURATION_OUTLIER": PERFORMANCE,
    "NO_SAMPLES": SAMPLING, "RUNNER_SAMPLES_DISCARDED": SAMPLING,
    "EXPLORATION_OFF": SAMPLING, "EPSILON_SCHEDULE": SAMPLING,
    "REPLAY_UNDERFILLED": SAMPLING, "REPLAY_CAPACITY": SAMPLING, "REPLAY_RATIO": SAMPLING,
    "REPLAY_MEMORY": PERFORMANCE, "STOP_STALLED": PERFORMANCE, "DRIVER_STALLED": LIVENESS,
    "ACTOR_UNPLACEABLE": LIVENESS,
}
#: env findings that leave the data the learner reads intact (a step's duration, an info
#: dict edited in place, a reset that differs under one seed): they explain no curve
_ENV_HARMLESS = frozenset({"STEP_DURATION_OUTLIER", "INFO_MUTATION_DETECTED", "NONDETERMINISTIC_RESET"})
#: the env's own crash or hang: it ends or stops a runner, as a death does
_ENV_DEATHS = frozenset({"ENV_CRASHED", "ENV_HUNG"})
#: a runner or learner gone, or one that stopped answering
DEATHS = frozenset({"WORKER_DIED", "WORKER_STALLED", "LEARNER_DIED", "LEARNER_STALLED", "NODE_LOST"})
#: liveness findings that starve the learner however often they happen
_STARVING = frozenset({"LEARNER_DIED", "LEARNER_STALLED", "NODE_LOST", "DRIVER_STALLED"})


def stage(code: str) -> str | None:
    """The stage of a finding code; None for flow1's own codes (its watchers, the what-if,
    its internal errors: what flow1 did or did not see, never the run's symptom)."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    module = (C.DEFAULTS.get(code) or ("", ""))[0]
    return _BY_MODULE.get(module)


def follows(up_code: str, down_code: str, deaths: int, linked: bool = False) -> str | None:
    """Why a finding ``down_code`` may follow from ``up_code`` upstream of it, or None when
    it does not. ``deaths``: the runs' death and stall findings (a runner lost once and
    restarted explains no curve; one lost every iteration does); ``linked``: ``down_code``
    names ``up_code`` as its origin (a WORKER_DIED whose likely origin is an ENV_CRASHED).
    Findings of one learning stage follow from each other through a cause
    (:mod:`.causes`), not here."""
    up, down = stage(up_code), stage(down_code)
    if up is None or down is None or up == PERFORMANCE or down == PERFORMANCE:
        return None
    if linked:
        return f"{down_code} names {up_code} as its likely origin (same process, just before)"
    if RANK[down] <= RANK[up]:
        return None
    if up == ENV and up_code in _ENV_DEATHS:
        up = LIVENESS   # it kills or stops its runner: it explains what a death explains
    if up == ENV:
        if up_code in _ENV_HARMLESS:
            return None
        if down == LIVENESS:
            return None   # a death follows from the env only where it names it (``linked``)
        reader = {LEARNING: "learner", PIPELINE: "RLModule"}.get(down, "sampler")
        return (f"the {reader} reads data the env made wrong "
                f"({up_code}): its readings are not the algorithm's until the env is fixed")
    if up == PIPELINE:
        if down != LEARNING:
            return None   # what the module sees and emits explains what it learns, not a death
        return (f"the learner learns from what the connectors and the RLModule made of the env's data ({up_code}): "
                f"its readings are not the algorithm's until the pipeline is fixed")
    if up == LIVENESS:
        if down == SAMPLING:
            return f"a runner or learner lost ({up_code}) leaves iterations with fewer or no samples"
        if up_code in _STARVING or deaths >= 2:
            return (f"{deaths} death(s) or stall(s) of runners or learners ({up_code}): the learner trains on "
                    f"what the survivors and the restarted runners sample, its curves follow")
        return None
    if up == SAMPLING and down == LEARNING:
        return f"the learner learns from what sampling feeds it ({up_code})"
    return None
