"""Where a run's actors are found: their names, and the key in Ray's internal KV that
tells an EnvRunner which run it belongs to. Shared by the run (which creates the actors
and writes the keys) and the EnvRunners (which only look them up)."""

from __future__ import annotations

#: the Ray namespace of flow1's named actors and of its keys in Ray's internal KV
NAMESPACE = "flow1"

KV_PREFIX = "flow1:runner:"


def hub_name(run_id: str) -> str:
    """The run's hub: Recorder, monitor, the hub node's probe and (on CPU) the clusterer."""
    return f"flow1-hub-{run_id}"


def states_name(run_id: str) -> str:
    """The run's StateClusterer actor, when it has one of its own (a GPU share)."""
    return f"flow1-states-{run_id}"


def kv():
    from ray.experimental import internal_kv
    return internal_kv


def runner_run_id(actor_id: str) -> str | None:
    """The run an EnvRunner actor belongs to (written by its Algorithm), or None yet."""
    v = kv()._internal_kv_get(KV_PREFIX + actor_id, namespace=NAMESPACE)
    return v.decode() if v else None


def local_prefixes_key(run_id: str) -> str:
    """The KV key holding the run's local runner prefixes (the Algorithm process's own)."""
    return f"flow1:run:{run_id}:local"


def run_keys(run_id: str) -> tuple[list[str], list[str]]:
    """The runner and learner keys the run's Algorithm registered, and its local prefixes,
    from Ray's KV: what a restarted hub needs to watch again without waiting for the driver."""
    import json

    store = kv()
    keys = []
    for raw in store._internal_kv_list(KV_PREFIX, namespace=NAMESPACE):
        name = raw.decode()
        if name.startswith(KV_PREFIX) and store._internal_kv_get(name, namespace=NAMESPACE) == run_id.encode():
            keys.append(name[len(KV_PREFIX):])
    local = store._internal_kv_get(local_prefixes_key(run_id), namespace=NAMESPACE)
    return sorted(keys), (json.loads(local) if local else [])
