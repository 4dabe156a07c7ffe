"""The job's actors as Ray's GCS holds them (a private API, the only one that works without
the dashboard): :func:`job_actors` for the driver's startup watch (actors that cannot be
placed, or are slow to construct) and :func:`starting_actors` for the hub's stall judgement
(a runner waiting in ``ray.get`` while an actor of the run is still starting is slow, not hung).
"""

from __future__ import annotations

#: the GCS states of an actor that is not up yet: waiting for a place or its arguments, inside
#: its constructor (a worker process assigned), or being restarted after a death
STARTING_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING")
#: flow1's own actors: no runner ever waits on them (every call to them is fire-and-forget)
FLOW1_CLASSES = ("Flow1Hub", "NodeProbe", "StateClusterer")


def job_actors(job_id_hex: str) -> list[dict]:
    """The job's actors from the GCS: class, state, required resources, node."""
    from ray._private import state as st
    from ray.core.generated import gcs_pb2

    acc = st.state._connect_and_get_accessor()
    out = []
    for raw in acc.get_actor_table(None, None):
        a = gcs_pb2.ActorTableData.FromString(raw)
        if a.job_id.hex() != job_id_hex:
            continue
        out.append({"class": a.class_name, "state": gcs_pb2.ActorTableData.ActorState.Name(a.state),
                    "resources": {k: float(v) for k, v in a.required_resources.items()},
                    "node_id": a.address.node_id.hex(), "actor_id": a.actor_id.hex(),
                    # a pending actor with a worker process is placed and inside its constructor
                    # (measured: pid and worker id set; an unplaced one has neither)
                    "pid": int(a.pid), "constructing": bool(a.address.worker_id) and a.pid > 0})
    return out


def starting_actors(job_id_hex: str) -> list[str]:
    """The job's actors other than flow1's that are not up yet, one "Class (pid N, in its
    constructor)" each; RLlib's Learner actors (inside Ray Train's wrapper) named as such."""
    out = []
    for a in job_actors(job_id_hex):
        if a["state"] not in STARTING_STATES or any(c in a["class"] for c in FLOW1_CLASSES):
            continue
        name = "a Learner actor" if "_WrappedExecutable" in a["class"] else a["class"]
        how = ("being restarted" if a["state"] == "RESTARTING" else
               f"pid {a['pid']}, in its constructor" if a["constructing"] else "not placed yet")
        out.append(f"{name} ({how})")
    return out
