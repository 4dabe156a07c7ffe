"""A runner's own record of why it is ending, in words: the components an exception inside
``sample()`` can be charged to, and the sentence a WORKER_DIED says about one.

The runner writes the record next to its lock file the moment an exception leaves
``sample()`` (or ``os._exit`` is called): :func:`flow1_ray.runner.crash_site.crash_site` fills
it; the node's probe reads it when the lock is released and :mod:`.incidents` puts
:func:`describe` into the death's message. A record is evidence from the runner, read as
untrusted input: every field is optional.
"""

from __future__ import annotations

from typing import Any

ENV = "env"
ENV_TO_MODULE = "env-to-module connector"
MODULE_TO_ENV = "module-to-env connector"
CONNECTOR = "connector"
RL_MODULE = "RLModule forward"
SAMPLING = "action sampling"
CALLBACK = "callback"
RLLIB = "RLlib"
RAY = "Ray"
USER = "user code"
#: the components a runner's death can be charged to, in the words the findings use
COMPONENTS = (ENV, ENV_TO_MODULE, MODULE_TO_ENV, CONNECTOR, RL_MODULE, SAMPLING, CALLBACK, RLLIB, RAY, USER)
#: a record older than this at the death is said with its age: the process lived on after it
STALE_S = 5.0


def _text(value: Any, limit: int = 300) -> str:
    return str(value)[:limit]


def describe(site: dict[str, Any]) -> str:
    """The cause in one clause: ``the env-to-module connector FeatureLookup raised ValueError:
    ... in __call__ (conn.py:12)``, ``the env called os._exit(3) in step (my_env.py:40)``.

    Args:
        site: the runner's record (``component``, ``component_class``, ``exception``,
            ``error``, ``frame``, ``call``, ``exit_call``, ``exit_code``); a record without a
            component is an env's step (what runners wrote before components were named).
    """
    comp = _text(site.get("component") or ENV, 60)
    cls = _text(site.get("component_class") or "", 80)
    who = {ENV: "the env", RLLIB: "RLlib's code", RAY: "Ray's code", CALLBACK: "a callback",
           USER: "code outside the env"}.get(comp)
    if who is None:
        who = f"the {comp} ({cls})" if comp in (RL_MODULE, SAMPLING) and cls else f"the {comp}{' ' + cls if cls else ''}"
    frame = _text(site.get("frame") or "?", 200)
    if site.get("exit_call"):
        return f"{who} called {_text(site['exit_call'], 20)}({_text(site.get('exit_code'), 40)}) in {frame}"
    call = site.get("call") or ("step" if not site.get("component") else "")
    if comp == ENV and call:
        who = f"env.{_text(call, 20)}"
    return f"{who} raised {_text(site.get('exception'), 80)}: {_text(site.get('error'))} in {frame}"


def cause_clause(site: dict[str, Any], died_at: float | None) -> str:
    """:func:`describe`, with the record's age when the process lived on after it for more
    than :data:`STALE_S` (then it is the last thing the runner recorded, not surely the cause)."""
    text = describe(site)
    ts = site.get("ts")
    if isinstance(ts, (int, float)) and isinstance(died_at, (int, float)) and died_at - ts > STALE_S:
        text = f"the last it recorded, {died_at - ts:.0f} s before the death: {text}"
    return text


def death_component(death: dict[str, Any]) -> str:
    """What a death is charged to, for the death counter's label: the recorded component
    (:data:`COMPONENTS`), else ``fatal signal``, ``flow1 stall kill``, ``node lost``, or ``not seen``.

    Args:
        death: the probe's death record (or a WORKER_DIED's evidence): ``exception``,
            ``exit_signal``, ``signal_inferred``, ``killed_by_flow1``, ``confirms_node_lost``.
    """
    exc = death.get("exception")
    if isinstance(exc, dict) and exc:
        comp = exc.get("component") or ENV
        return comp if comp in COMPONENTS else "not seen"
    if death.get("killed_by_flow1"):
        return "flow1 stall kill"
    if death.get("confirms_node_lost") or death.get("node_lost"):
        return "node lost"
    if death.get("exit_signal") and not death.get("signal_inferred"):
        return "fatal signal"
    return "not seen"
