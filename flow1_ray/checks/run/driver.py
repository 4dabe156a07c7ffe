"""The driver's own hangs judged: a build waiting for actors the cluster cannot place, a slow
start, a ``train()`` or ``algo.stop()`` that never returns. The thread that watches them is
:mod:`flow1_ray.driver.watchdog`; what it reads from the GCS is judged here, with no Ray: the
actor rows come from the GCS actor table, the resource totals from ``ray.cluster_resources()``
and ``ray.available_resources()``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...common import codes as C
from ..rule import Rule

RULES = (
    Rule("STOP_STALLED", C.WORKER, C.WARN, "algo.stop() has not returned for stop_timeout_s, with the driver's stack"),
    Rule("DRIVER_STALLED", C.WORKER, C.WARN,
         "train() has not returned for max(120 s, 5x the median iteration), with the driver's stack"),
    Rule("ACTOR_UNPLACEABLE", C.RESOURCE, C.FAIL,
         "the Algorithm's build waited > 15 s for actors the cluster cannot place now (who waits for what, who "
         "holds it), or its config asks for more than the cluster has"),
    Rule("SLOW_START", C.RESOURCE, C.PASS,
         "advisory: the build waited > startup_timeout_s for actors that are placed and still in their "
         "constructor (an env with a long init, a busy machine); a WARN once that lasts "
         "10x startup_timeout_s; or a runner that waited > stall_timeout_s in ray.get while an actor of the run "
         "was starting, and steps again", evidence=("waited_s", "constructing", "starting")),
)

#: a build whose placed actors are still constructing after this x startup_timeout_s is a WARN
SLOW_START_FACTOR = 10

PENDING_STATES = ("PENDING_CREATION", "DEPENDENCIES_UNREADY")


def explain_pending(actors: list[dict], totals: dict[str, float], available: dict[str, float]) -> list[str]:
    """One sentence per class of pending actor: what it waits for and who holds it.
    Pure: the lists come from :func:`job_actors` and ``ray.cluster_resources()`` /
    ``ray.available_resources()``."""
    pending = [a for a in actors if a["state"] in PENDING_STATES and not a.get("constructing")]
    alive = [a for a in actors if a["state"] == "ALIVE" or a.get("constructing")]
    lines = []
    for (cls, res), n in Counter((a["class"], tuple(sorted(a["resources"].items()))) for a in pending).items():
        need = dict(res)
        parts = []
        for k, v in need.items():
            if k.startswith("node:") or v <= 0:
                continue
            total, free = totals.get(k, 0.0), available.get(k, 0.0)
            if total < v:
                parts.append(f"{k} {v:g}, and the cluster has {total:g} in all: it can never be placed")
                continue
            if free >= v:
                continue
            holders = Counter(a["class"] for a in alive if a["resources"].get(k, 0) > 0)
            held = sum(a["resources"].get(k, 0) for a in alive)
            who = ", ".join(f"{c} x{m}" for c, m in holders.most_common()) or "no actor of this job"
            parts.append(f"{k} {v:g}; {held:g}/{total:g} {k} held by {who} (free {free:g})")
        if parts:
            lines.append(f"{n} {cls} actor(s) wait for " + "; ".join(parts))
    return lines


def explain_constructing(actors: list[dict]) -> list[str]:
    """One sentence per class of actor placed but still in its constructor (an env with a
    long init, a busy machine): a slow start, not a missing resource."""
    slow = [a for a in actors if a["state"] in PENDING_STATES and a.get("constructing")]
    lines = []
    for cls, group in _by_class(slow).items():
        pids = ", ".join(str(a["pid"]) for a in group[:4]) + (", ..." if len(group) > 4 else "")
        lines.append(f"{len(group)} {cls} actor(s) placed and still in their constructor (pid {pids})")
    return lines


def _by_class(actors: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for a in actors:
        out.setdefault(a["class"], []).append(a)
    return out


def config_needs(config: Any) -> dict[str, float]:
    """CPUs and GPUs the Algorithm's actors ask for (EnvRunners, evaluation runners,
    Learner actors); the driver's own share is already held."""
    def g(name: str, default: float = 0.0) -> float:
        v = getattr(config, name, default)
        try:
            return float(v or 0)
        except (TypeError, ValueError):
            return default

    runners = g("num_env_runners") + g("evaluation_num_env_runners")
    learners = g("num_learners")
    cpus = runners * g("num_cpus_per_env_runner", 1.0)
    gpus = runners * g("num_gpus_per_env_runner")
    if learners > 0:
        cpus += learners * (g("num_cpus_per_learner", 1.0) if g("num_gpus_per_learner") == 0 else 0.0)
        gpus += learners * g("num_gpus_per_learner")
    return {"CPU": cpus, "GPU": gpus}
