"""IMPORT_RESOLVE: which gym API is really in play?

``import gym`` that silently resolves to gymnasium (an alias shim, a vendored copy) makes
code written for one API run against the other; an env that answers ``step`` with the old
4-tuple or ``reset`` with a bare observation mixes the two APIs inside one rollout.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from typing import Any

import gymnasium

from ...common import codes as C
from ..findings import Finding
from ..rule import Rule

RULES = (
    Rule("GYM_ALIASED", C.IMPORT_RESOLVE, C.FAIL, "`import gym` resolves to gymnasium, or two gym APIs are mixed"),
)


def _resolve_gym() -> Any:
    mod = sys.modules.get("gym")
    if mod is not None:
        return mod
    try:
        if importlib.util.find_spec("gym") is None:
            return None
    except (ImportError, ValueError):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module("gym")
        except Exception:  # a broken gym install is not ours to diagnose here
            return None


def gym_alias_findings(env: Any = None) -> list[Finding]:
    """GYM_ALIASED when ``import gym`` is gymnasium, or ``env`` is an old ``gym.Env``."""
    gym = _resolve_gym()
    if gym is None:
        return []
    registry = getattr(getattr(getattr(gym, "envs", None), "registration", None), "registry", None)
    aliased = (gym is gymnasium or getattr(gym, "__name__", "") == "gymnasium"
               or type(registry).__module__.startswith("gymnasium")
               or registry is gymnasium.envs.registration.registry)
    if aliased:
        return [Finding(C.GYM_ALIASED,
                        f"`import gym` resolves to gymnasium {gymnasium.__version__} "
                        f"(module {getattr(gym, '__name__', '?')} from {getattr(gym, '__file__', '?')}): expected "
                        f"the real gym or no gym; code written for gym's API runs against gymnasium's. "
                        f"Fix: pip uninstall gym, and import gymnasium explicitly",
                        {"gym_module": getattr(gym, "__name__", "?"), "gym_file": str(getattr(gym, "__file__", "")),
                         "gymnasium_version": gymnasium.__version__})]
    gym_env = getattr(gym, "Env", None)
    if env is not None and isinstance(gym_env, type):
        base = getattr(env, "unwrapped", env)
        if isinstance(base, gym_env) and not isinstance(base, gymnasium.Env):
            return [Finding(C.GYM_ALIASED,
                            f"env {type(base).__name__} is a gym {getattr(gym, '__version__', '?')} Env, expected a "
                            f"gymnasium.Env: two gym APIs are mixed (wrap it with shimmy or port it)",
                            {"env_class": type(base).__name__, "gym_version": getattr(gym, "__version__", "?")})]
    return []


def old_api_finding(call: str, got: str) -> Finding:
    """GYM_ALIASED for a reset/step that answers in the pre-0.26 gym API."""
    expected = "(obs, info)" if call == "reset" else "(obs, reward, terminated, truncated, info)"
    return Finding(C.GYM_ALIASED,
                   f"{call}() returned {got}, expected {expected}: the env speaks the old gym API "
                   f"inside a gymnasium rollout (port it, or wrap it with shimmy)",
                   {"call": call, "expected": expected, "actual": got})
