"""A runner's (or a Learner's) own record of why it is ending, in words: the components an
exception inside ``sample()`` (or a Learner's ``update()``) can be charged to, and the sentence
a WORKER_DIED (LEARNER_DIED) says about one.

The process writes the record next to its lock file the moment an exception leaves
``sample()`` or ``update()`` (or ``os._exit`` is called): :func:`flow1_ray.liveness.crash_site.crash_site` fills
it; the node's probe reads it when the lock is released and :mod:`.incidents` puts
:func:`describe` into the death's message. A record is evidence from the runner, read as
untrusted input: every field is optional.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ...common.events import Event

ENV = "env"
ENV_TO_MODULE = "env-to-module connector"
MODULE_TO_ENV = "module-to-env connector"
CONNECTOR = "connector"
RL_MODULE = "RLModule forward"
SAMPLING = "action sampling"
CALLBACK = "callback"
LEARNER = "Learner"
LEARNER_CONNECTOR = "learner connector"
RLLIB = "RLlib"
RAY = "Ray"
USER = "user code"
#: the components a runner's death can be charged to, in the words the findings use
COMPONENTS = (ENV, ENV_TO_MODULE, MODULE_TO_ENV, CONNECTOR, RL_MODULE, SAMPLING, CALLBACK, LEARNER,
              LEARNER_CONNECTOR, RLLIB, RAY, USER)
#: a record older than this at the death is said with its age. A record is cleared when a later
#: ``sample()`` returns, so one still there is the last thing the process did; RLlib ends a failed
#: runner after the sampling round (up to ``sample_timeout_s``) and its restart delay, so ages
#: of a minute are normal; beyond this the process idled long enough to doubt it
STALE_S = 180.0
#: findings that can lead to a process's death, named as its likely origin when the same
#: process raised one shortly before it died: a broken contract or a non-finite value reaches
#: the connectors and the module (a NaN observation makes non-finite logits), a hung env is
#: killed, memory that grows ends in the OOM killer
ORIGIN_CODES = ("OBS_NAN_INF", "REWARD_NAN", "OBS_SHAPE_MISMATCH", "OBS_DTYPE_MISMATCH", "OBS_OUT_OF_BOUNDS",
                "ACTION_OUT_OF_BOUNDS", "ACTION_MASK_INVALID", "REWARD_NOT_SCALAR", "DONE_NOT_BOOL", "INFO_NOT_DICT",
                "SPACE_INVALID", "MA_DICT_INVALID", "MA_AGENT_AFTER_DONE", "ENV_HUNG", "MEMORY_LEAK_SUSPECTED")
#: how long before a death such a finding is still its likely origin (a memory trend: any time
#: in the process's life, since it grows until the end)
ORIGIN_WINDOW_S = 300.0


def _text(value: Any, limit: int = 300) -> str:
    return str(value)[:limit]


def describe(site: dict[str, Any]) -> str:
    """The cause in one clause: ``the env-to-module connector FeatureLookup raised ValueError:
    ... in __call__ (conn.py:12)``, ``the env called os._exit(3) in step (my_env.py:40)``.

    Args:
        site: the runner's record (``component``, ``component_class``, ``exception``,
            ``error``, ``frame``, ``call``, ``during``: a remote call other than ``sample()``,
            ``exit_call``, ``exit_code``); a record without a component is an env's step
            (what runners wrote before components were named).
    """
    comp = _text(site.get("component") or ENV, 60)
    cls = _text(site.get("component_class") or "", 80)
    during = _text(site.get("during") or "", 40)
    who = {ENV: "the env", RLLIB: "RLlib's code", RAY: "Ray's code", CALLBACK: "a callback",
           USER: "code outside the env"}.get(comp)
    if who is None and comp == RL_MODULE and during:   # not its forward pass: the RLModule itself
        who = f"the RLModule ({cls})" if cls else "the RLModule"
    if who is None:
        who = f"the {comp} ({cls})" if comp in (RL_MODULE, SAMPLING, LEARNER) and cls else f"the {comp}{' ' + cls if cls else ''}"
    frame = _text(site.get("frame") or "?", 200)
    if site.get("exit_call"):
        return f"{who} called {_text(site['exit_call'], 20)}({_text(site.get('exit_code'), 40)}) in {frame}"
    call = site.get("call") or ("step" if not site.get("component") else "")
    if comp == ENV and call:
        who = f"env.{_text(call, 20)}"
    text = f"{who} raised {_text(site.get('exception'), 80)}: {_text(site.get('error'))} in {frame}"
    return text + (" during the weight sync (set_state)" if during == "set_state" else f" during {during}()" if during else "")


def _non_finite(d: Any) -> int:
    if isinstance(d, dict):
        return int(d["non_finite"]) if isinstance(d.get("non_finite"), int) else sum(_non_finite(v) for v in d.values())
    if isinstance(d, list):
        return sum(_non_finite(v) for v in d)
    return 0


def sampling_clause(site: dict[str, Any]) -> str:
    """Where the runner was when it raised: ``at env step 41 of episode 3f2a...`` (one sub-env)
    or ``sampling 2 sub-envs (episodes ...)``, and a last observation that held non-finite
    values; empty when the record says nothing of it."""
    subs = [s for s in site.get("sub_envs") or [] if isinstance(s, dict)]
    if not subs:
        return ""
    if len(subs) == 1:
        text = f"at env step {_text(subs[0].get('env_step'), 20)} of episode {_text(subs[0].get('episode'), 12)}"
    else:
        text = f"sampling {len(subs)} sub-envs (episodes {', '.join(_text(s.get('episode'), 8) for s in subs[:4])})"
    bad = [s for s in subs if _non_finite(s.get("last_observation"))]
    if bad:
        n = _non_finite(bad[0].get("last_observation"))
        text += (f"; the last observation of sub-env {_text(bad[0].get('sub_env'), 6)} held {n} non-finite "
                 f"value{'s' if n != 1 else ''}")
    return text


def cause_clause(site: dict[str, Any], died_at: float | None) -> str:
    """:func:`describe`, with where the runner was (:func:`sampling_clause`) and the record's
    age when the process lived on after it for more than :data:`STALE_S` (then it is the
    last thing the runner recorded, not surely the cause)."""
    text = describe(site)
    where = sampling_clause(site)
    if where:
        text = f"{text}, {where}"
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


def likely_origin(prior: list[dict[str, Any]], died_at: float | None) -> dict[str, Any] | None:
    """The finding of the same process most likely to have led to its death: the latest FAIL
    among :data:`ORIGIN_CODES` raised within :data:`ORIGIN_WINDOW_S` before it (a memory trend
    at any age), else the latest such WARN; None when there is none.

    Args:
        prior: the process's recent WARN/FAIL findings, oldest first (``code``, ``status``,
            ``ts`` in epoch seconds, ``message``), as the Recorder keeps them.
        died_at: when the death was seen (epoch seconds).
    """
    if not isinstance(died_at, (int, float)):
        return None

    def fits(f: dict[str, Any]) -> bool:
        ts = f.get("ts")
        if f.get("code") not in ORIGIN_CODES or not isinstance(ts, (int, float)) or ts > died_at + 1.0:
            return False
        return f["code"] == "MEMORY_LEAK_SUSPECTED" or died_at - ts <= ORIGIN_WINDOW_S

    cands = [f for f in prior if isinstance(f, dict) and fits(f)]
    for status in ("FAIL", "WARN"):
        found = [f for f in cands if f.get("status") == status]
        if found:
            f = found[-1]
            return {"code": f["code"], "status": status, "ts": f["ts"], "age_s": round(max(0.0, died_at - f["ts"]), 1),
                    "message": _text(f.get("message", ""), 200)}
    return None


def origin_clause(origin: dict[str, Any]) -> str:
    """``likely origin: OBS_NAN_INF (FAIL) of this process 3.2 s before: <its message's first
    clause>`` (without the worker's name, which the death says already)."""
    msg = re.sub(r"^(train|eval) worker \S+( \(pid \d+\))?: ", "", _text(origin.get("message"), 400))
    cut = msg.find(" (", 20)
    msg = msg[:cut] if cut > 0 else msg
    msg = msg if len(msg) <= 160 else msg[:159] + "…"
    return (f"likely origin: {_text(origin.get('code'), 60)} ({_text(origin.get('status'), 8)}) of this process "
            f"{origin.get('age_s', 0):g} s before: {msg}")


def consequences(events: Iterable[Event]) -> dict[tuple, list[str]]:
    """What each finding led to: the deaths that name it as their likely origin (a
    WORKER_DIED's ``likely_origin``: the same process, its code and time), as one line each,
    by the origin's (code, pid, time in ms)."""
    out: dict[tuple, list[str]] = {}
    for e in events:
        lo = e.evidence.get("likely_origin") if e.code in ("WORKER_DIED", "LEARNER_DIED") else None
        if isinstance(lo, dict) and isinstance(lo.get("ts"), (int, float)) and e.pid is not None:
            key = (str(lo.get("code")), int(e.pid), round(float(lo["ts"]) * 1000))
            out.setdefault(key, []).append(f"{e.code} {lo.get('age_s', '?')} s later: {e.message.split(';')[0]}")
    return out


def led_to(e: Event, by_origin: dict[tuple, list[str]]) -> list[str]:
    """The lines of :func:`consequences` for this finding (none for most)."""
    if not by_origin or e.pid is None:
        return []
    return by_origin.get((e.code, int(e.pid), round(e.ts.timestamp() * 1000)), [])
