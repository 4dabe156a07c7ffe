"""Lock-file liveness for Learner actors (``num_learners >= 1``): the EnvRunners' mechanism
(:mod:`flow1_ray.liveness.lockfile`), so a dead Learner is LEARNER_DIED within a probe
period and a hung one LEARNER_STALLED with its stack.

A Learner is *busy* from ``before_gradient_based_update`` to ``after_gradient_based_update``
(RLlib calls both from ``Learner.update`` on the instance, so wrapping them there works for
every algorithm) and makes *progress* at each ``compute_gradients``; busy with no progress
for ``stall_timeout_s`` is a stall (a stuck collective, a loss that never returns). Between
updates it is idle, however long the EnvRunners take.

An exception that leaves the update's parts (the learner connector's batch, the forward pass
and loss in ``_update``, the hooks around them) is recorded next to the lock with its
component and frame before it goes on to RLlib untouched, and so is an ``os._exit``: the
Learner's death, when it comes, says why (LEARNER_DIED). Ray calls the actor's ``update``
through the class, not the instance, so the parts it calls through ``self`` are wrapped (none
of them calls another: an exception is recorded once). Installed with the tracing through
``foreach_learner`` (:mod:`flow1_ray.driver.learner_watch`); a Learner in the driver
(``num_learners=0``) is the driver's, watched by the driver watchdog instead.
"""

from __future__ import annotations

import os
from typing import Any

from .crash_site import recording, watch_os_exit
from .holder import WorkerLiveness
from .lockdir import job_lock_dir

ATTR = "_flow1_liveness"
#: a learner's watchdog writes at least this often (bounds how late a stall's stack is)
WATCHDOG_TICK_S = 0.5


def attach(learner: Any, rank: int, heartbeat_interval_s: float, stall_timeout_s: float) -> str | None:
    """Give this Learner actor a lock file (once); returns its key (the actor id), or None
    when the Learner is not an actor of its own."""
    import ray

    if getattr(learner, ATTR, None) is not None:
        return getattr(learner, ATTR).key
    ctx = ray.get_runtime_context()
    actor_id = ctx.get_actor_id()
    if actor_id is None or int(getattr(getattr(learner, "config", None), "num_learners", 0) or 0) < 1:
        return None
    meta = {"worker_index": rank, "role": "learner", "actor_id": actor_id, "node_id": ctx.get_node_id(),
            "local": False, "kind": "learner"}
    lv = WorkerLiveness(job_lock_dir(ctx.get_job_id(), ctx.get_node_id()), f"{actor_id}.{os.getpid()}", meta,
                        heartbeat_interval_s=min(heartbeat_interval_s, WATCHDOG_TICK_S, stall_timeout_s / 8),
                        stall_timeout_s=stall_timeout_s, arm_faulthandler=True)
    lv.key = actor_id
    before = recording(learner.before_gradient_based_update, lv.record_cause, learner)
    after = recording(learner.after_gradient_based_update, lv.record_cause, learner)
    grads = learner.compute_gradients

    def before_update(*args: Any, **kwargs: Any) -> Any:
        lv.busy()
        return before(*args, **kwargs)

    def after_update(*args: Any, **kwargs: Any) -> Any:
        try:
            out = after(*args, **kwargs)
        finally:
            lv.idle()
        if lv.cause_recorded:   # an update went through after the recorded error: it was not the end
            lv.clear_cause()
        return out

    def compute_gradients(*args: Any, **kwargs: Any) -> Any:
        lv.step_begin()
        try:
            return grads(*args, **kwargs)
        finally:
            lv.step_end()

    learner.before_gradient_based_update = before_update
    learner.after_gradient_based_update = after_update
    learner.compute_gradients = compute_gradients
    for name in ("_create_iterator_if_necessary", "_update"):   # the learner connector; forward and loss
        if callable(getattr(learner, name, None)):
            setattr(learner, name, recording(getattr(learner, name), lv.record_cause, learner))
    watch_os_exit(lv.record_cause)
    setattr(learner, ATTR, lv)
    return actor_id



def learner_keys(algorithm: Any) -> list[str]:
    """Actor ids of the Algorithm's Learner actors (none with ``num_learners=0``); the
    actor manager's mapping, as for EnvRunners (asking a hung Learner would block)."""
    group = getattr(algorithm, "learner_group", None)
    manager = getattr(group, "_worker_manager", None)
    return [h._actor_id.hex() for h in getattr(manager, "_actors", {}).values()]
