"""PIPE_RUNNER_FAILED: the EnvRunner a config makes could not be built, or raised while it
sampled, named by where the exception was raised (the env, a connector and which one, the
RLModule, the action sampling), read from its traceback as a runner's death is."""

from __future__ import annotations

from typing import Any

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule
from ..run.death_cause import RL_MODULE, describe

RULES = (
    Rule("PIPE_RUNNER_FAILED", C.PIPELINE, C.FAIL,
         "building the config's EnvRunner, or sampling with it, raised: the component (env, connector, RLModule, "
         "action sampling) and the user's frame",
         evidence=("when", "step", "exception", "component", "component_class", "frame")),
)


def runner_failed(site: dict[str, Any], when: str, step: int) -> Finding:
    """The finding of an exception whose site :func:`flow1_ray.liveness.crash_site.crash_site`
    read; ``when``: "build" or "sample"."""
    doing = "building the config's EnvRunner" if when == "build" else f"sampling at step {step}"
    if when == "build" and site.get("component") == RL_MODULE and not site.get("during"):
        site = {**site, "during": "setup"}   # the RLModule's construction, not a forward pass
    return Finding(C.PIPE_RUNNER_FAILED, f"{doing}: {describe(site)}",
                   {"when": when, "step": step, **site}, env_step=step if when == "sample" else None)
