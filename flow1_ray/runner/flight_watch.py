"""The flight recorder in a runner's env (``runner/flight.py``): how to build the env again,
which sub-env an exception came from, and the dump sent to the hub's ``repro/`` on an env
crash. Called from :class:`~flow1_ray.runner.env_watch.EnvWatch`; every call is guarded by it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..rundir.repro import entry_name

#: sub-envs dumped for one crash when the exception does not say which one raised
MAX_DUMPS_PER_CRASH = 4
#: a dump made before the runner knows the hub (its first sample() never returned) waits this long for it
DUMP_LOOKUP_S = 20.0


def send_dump(agent: Any, name: str, arrays: dict, manifest: dict, kind: str) -> None:
    """Fire-and-forget ``add_repro`` to the run's hub. A runner that has not reached the hub yet
    (it crashed or hung in its first ``sample()``) looks it up on a thread of its own, every
    half second for DUMP_LOOKUP_S, and sends then: the stepping thread and the watchdog never wait."""
    handle = agent.sender._target()
    if handle is not None:
        handle.add_repro.remote(name, arrays, manifest, kind)
        return
    import threading
    import time

    def later() -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < DUMP_LOOKUP_S:
            try:
                h = agent.sender._lookup()
            except Exception:
                h = None
            if h is not None:
                try:
                    h.add_repro.remote(name, arrays, manifest, kind)
                except Exception:
                    pass
                return
            time.sleep(0.5)
    threading.Thread(target=later, name="flow1-repro-send", daemon=True).start()


def importable(obj: Any) -> tuple[str | None, str | None]:
    """(``module:qualname``, None) of a class or function another process can import by name,
    or (None, why not)."""
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qual:
        return None, f"{obj!r} has no importable name"
    if "<" in qual:
        return None, f"{module}.{qual} is defined inside a function or a lambda"
    if module == "__main__":
        return None, f"{qual} is defined in the script that ran the training (__main__)"
    return f"{module}:{qual}", None


def _json_config(config: Any) -> tuple[dict, list[str]]:
    """The env_config's JSON-able part, and the keys left out (values only this process held)."""
    out, left = {}, []
    for k, v in dict(config or {}).items():
        try:
            json.dumps(v)
            out[str(k)] = v
        except (TypeError, ValueError):
            left.append(str(k))
    return out, left


def env_build_spec(env_runner: Any, index: int) -> dict:
    """How RLlib built this runner's sub-envs (``SingleAgentEnvRunner.make_env``): a registered
    creator, a class called with the env context, or a gymnasium id made with the env_config."""
    cfg = env_runner.config
    env = getattr(cfg, "env", None)
    config, left = _json_config(getattr(cfg, "env_config", None))
    out: dict[str, Any] = {"env_config": config, "worker_index": index,
                           "num_workers": int(getattr(env_runner, "num_workers", 0) or 0), "vector_index": 0}
    if left:
        out["env_config_left_out"] = left
    if type(env_runner).__name__ == "MultiAgentEnvRunner" and not getattr(cfg, "disable_env_checking", True):
        # RLlib's MultiAgentEnvRunner checks each sub-env once it is made, before flow1 sees it: a
        # reset(seed=42) and a step with sampled actions (check_multiagent_environments). The
        # replay does the same, or an env that counts its steps is one step behind the run's.
        out["rllib_checked"] = True
    if isinstance(env, str):
        try:
            from ray.tune.registry import ENV_CREATOR, _global_registry

            creator = _global_registry.get(ENV_CREATOR, env) if _global_registry.contains(ENV_CREATOR, env) else None
        except Exception:
            creator = None
        if creator is None:
            return {**out, "how": "gym id", "spec": env}
        spec, why = importable(creator)
        return {**out, "how": "creator", "spec": spec, "registered": env, **({"why": why} if why else {})}
    if callable(env):
        spec, why = importable(env)
        return {**out, "how": "class", "spec": spec, **({"why": why} if why else {})}
    return {**out, "how": None, "spec": None, "why": f"config.env is {type(env).__name__}"}


def _send_entry(agent: Any, code: str, message: str, d: dict, failure: dict, **more: Any) -> str | None:
    """One dump of a sub-env (``d``: :meth:`FlightRecorder.dump`'s) as a ``repro/`` entry, sent to
    the hub; its ``repro/<name>``, or None when it could not be sent."""
    agent.repro_count += 1
    name = entry_name(agent.kind, agent.index, os.getpid(), agent.repro_count, code)
    manifest = {"finding": code, "message": message[:2000], "worker_index": agent.index, "kind": agent.kind,
                "pid": os.getpid(), "node_id": agent.node_id, "env": agent.flight_env, "start": d["meta"],
                "sub_envs": agent.flight.n if agent.flight is not None else None, **more, "failure": failure}
    try:
        send_dump(agent, name, d["arrays"], manifest, f"{code}:{agent.kind}{agent.index}")
    except Exception:
        return None
    return f"repro/{name}"


def _sub_ids(subs: list) -> dict[int, int]:
    """id() of each sub-env and each of its wrappers -> the sub-env's index."""
    ids: dict[int, int] = {}
    for i, sub in enumerate(subs):
        e, depth = sub, 0
        while e is not None and depth < 16:
            ids.setdefault(id(e), i)
            e, depth = getattr(e, "env", None), depth + 1
    return ids


def raising_sub(exc: BaseException, subs: list) -> int | None:
    """The index of the sub-env whose own method raised ``exc`` (a frame of the traceback
    whose ``self`` is the sub-env or one of its wrappers), or None."""
    ids = _sub_ids(subs)
    tb, found = exc.__traceback__, None
    while tb is not None:
        me = tb.tb_frame.f_locals.get("self")
        if me is not None and id(me) in ids:
            found = ids[id(me)]   # the innermost wins: keep walking
        tb = tb.tb_next
    return found


def frame_sub(frame: Any, subs: list) -> int | None:
    """The index of the sub-env whose own method the stack from ``frame`` outwards is in (the
    innermost), or None."""
    ids = _sub_ids(subs)
    while frame is not None:
        me = frame.f_locals.get("self")
        if me is not None and id(me) in ids:
            return ids[id(me)]
        frame = frame.f_back
    return None


def hang_dumps(agent: Any, stalled_s: float, frame: Any) -> list[str]:
    """A step that stalls (the runner's watchdog thread, once): the hanging sub-env's life and
    the action it hangs on, sent to ``repro/`` (a step holding the GIL stops that thread too:
    then nothing is sent, and the lock file's stack says where)."""
    import numpy as np

    flight = agent.flight
    if flight is None or flight.off:
        return []
    i = frame_sub(frame, agent.flight_subs)
    pending = getattr(flight, "pending", None)
    names: list[str] = []
    for k in [i] if i is not None else list(range(min(flight.n, MAX_DUMPS_PER_CRASH))):
        d = flight.dump(k)
        if d is None:
            continue
        if isinstance(pending, (np.ndarray, list, tuple)) and len(pending) > k:
            d["arrays"].update(flight.failed_arrays(pending[k]))
        name = _send_entry(agent, "ENV_HUNG", f"a step did not return within {stalled_s:.0f} s", d,
                           {"call": "step", "step": d["meta"]["steps"] + 1, "hang": True, "exception": None,
                            "stalled_s": round(stalled_s, 1)}, raising_sub_env_known=i is not None)
        names += [name] if name else []
    return names


def crash_dumps(agent: Any, exc: BaseException, call: str, finding: Any, action: Any = None, sub: int | None = None,
                actions: Any = None) -> list[str]:
    """Send the crashing sub-env's episode to the hub's ``repro/`` (fire-and-forget); the
    entries' names (``repro/<name>``) for the finding's evidence. ``action`` and ``sub``: the
    action a checked sub-env's step raised on, and its index; ``actions``: the vector step's."""
    import numpy as np

    flight = agent.flight
    if flight is None or flight.off:
        return []
    subs = agent.flight_subs
    i = sub if sub is not None else raising_sub(exc, subs)
    which = [i] if i is not None else list(range(min(flight.n, MAX_DUMPS_PER_CRASH)))
    names = []
    for k in which:
        d = flight.dump(k)
        if d is None:
            continue
        failed = action if (action is not None and k == sub) else (
            actions[k] if isinstance(actions, (np.ndarray, list, tuple)) and len(actions) > k else None)
        if failed is not None and call == "step":
            d["arrays"].update(flight.failed_arrays(failed))
        name = _send_entry(agent, finding.code, finding.message, d,
                           {"call": call, "step": d["meta"]["steps"] + (0 if call == "reset" else 1),
                            "exception": f"{type(exc).__name__}: {exc}"[:2000],
                            "frame": (finding.evidence or {}).get("frame")}, raising_sub_env_known=i is not None)
        names += [name] if name else []
    return names


#: findings whose non-finite values a replay can meet again: the array the recorder finds them in
NONFINITE = {"OBS_NAN_INF": "digests", "REWARD_NAN": "rewards"}


def nonfinite_dumps(agent: Any, finding: Any) -> list[str]:
    """On the first OBS_NAN_INF or REWARD_NAN of a runner: each sub-env whose recorded values
    hold a NaN or inf is sent to ``repro/``, cut at the step that produced it (the replay is
    reproduced when its own step there produces one)."""
    flight, what = agent.flight, NONFINITE.get(finding.code)
    if flight is None or flight.off or what is None:
        return []
    names: list[str] = []
    for i in range(flight.n):
        row = flight.first_nonfinite(i, what)
        d = flight.dump(i) if row is not None else None
        if d is None:
            continue
        if row not in d["rows"]:
            continue   # a row before the episodes kept, or an autoreset's own
        step = d["rows"].index(row) + 1
        for k in flight.COLUMNS:
            if k in d["arrays"]:
                d["arrays"][k] = d["arrays"][k][:step]
        d["meta"] = {**d["meta"], "steps": step}
        name = _send_entry(agent, finding.code, finding.message, d,
                           {"call": "step", "step": step, "exception": None,
                            "nonfinite": "reward" if what == "rewards" else "observation"})
        names += [name] if name else []
    return names


#: findings about the env's observations against its space: the replay checks each step's
#: observation with the space and names the first one outside it
SPACE = ("OBS_OUT_OF_BOUNDS", "OBS_SHAPE_MISMATCH", "OBS_DTYPE_MISMATCH")


def life_dumps(agent: Any, finding: Any) -> list[str]:
    """On a runner's first space violation (SPACE) and each REWARD_UNEARNED: the sub-envs' lives
    as the recorder holds them, replayed whole by ``flow1 replay`` (a space violation: each
    step's observation checked with the space, reproduced at the first one outside it; a reward
    the audit found unearned: reproduced when the whole life replays with the same observations
    and rewards, so that ``--steps-before`` hands over the env in the audited state). A space
    violation does not say which sub-env made it: the first MAX_DUMPS_PER_CRASH are dumped; the
    reward audit watches sub-env 0."""
    flight = agent.flight
    if flight is None or flight.off or getattr(flight, "multi_agent", False):
        return []
    space = finding.code in SPACE
    names: list[str] = []
    for i in (range(min(flight.n, MAX_DUMPS_PER_CRASH)) if space else [0]):
        d = flight.dump(i)
        if d is None or not d["meta"].get("steps"):
            continue
        failure = {"call": "step", "step": d["meta"]["steps"], "exception": None,
                   "whole_life": "space" if space else "rewards",
                   "first_step": (finding.evidence or {}).get("first_step")}
        name = _send_entry(agent, finding.code, finding.message, d, failure)
        names += [name] if name else []
    return names
