"""An env's flight-recorder dump played again in this process: the env built as the worker
built it, reset as the episode was, the recorded actions stepped with each observation's digest
compared (the package's docstring says what each answer means). ``load`` and ``failing_action``
are the notebook's way in; :mod:`.play` runs :func:`steps` in a child process."""

from __future__ import annotations

import os
from typing import Any

from ..common.errors import Flow1InputError
from ..common.events import one_line
from ..rundir.repro import Digest, read_entry

REPRODUCED, DIVERGED, NOT_REPRODUCED, HUNG = "reproduced", "diverged", "did not reproduce", "hung"
#: a step's timeout in the child; a recorded hang is reproduced when the replay hangs there
STEP_TIMEOUT_S = 10.0
#: how close a replayed observation's digest must be to the recorded one
DIGEST_RTOL = 1e-6


def _import(spec: str) -> Any:
    import importlib

    module, _, qual = spec.partition(":")
    if not module or not qual:
        raise Flow1InputError(f"--env {spec!r}: expected module:Class")
    try:
        obj = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise Flow1InputError(f"cannot import {spec}: {type(e).__name__}: {one_line(e)[:200]}") from None
    return obj


def _context(env: dict) -> Any:
    cfg = env.get("env_config") if isinstance(env.get("env_config"), dict) else {}
    kw = {"worker_index": int(env.get("worker_index") or 0), "num_workers": int(env.get("num_workers") or 0)}
    try:
        from ray.rllib.env.env_context import EnvContext

        return EnvContext(cfg, **kw)
    except ImportError:   # without RLlib: a dict with the same attributes
        class _Ctx(dict):
            pass
        ctx = _Ctx(cfg)
        for k, v in kw.items():
            setattr(ctx, k, v)
        return ctx


def build_env(env: dict, override: str | None = None, multi_agent: bool = False) -> Any:
    """One sub-env as the run's worker had it (``env``: the manifest's), through gymnasium's
    make as RLlib does (its checker and order wrappers, the id's time limit; a multi-agent env
    without gymnasium's checker, as RLlib's MultiAgentEnvRunner makes it)."""
    import gymnasium as gym

    how, spec = env.get("how"), override or env.get("spec")
    if not spec:
        raise Flow1InputError(f"the run's env cannot be built here: {env.get('why') or 'not recorded'}; "
                              f"pass --env module:Class (the env's class or creator)")
    if how == "gym id" and not override:
        cfg = env.get("env_config") if isinstance(env.get("env_config"), dict) else {}
        try:
            return gym.make(spec, **cfg)
        except Exception as e:   # noqa: BLE001 -- the env's own error, said in one line
            raise Flow1InputError(f"gym.make({spec!r}) failed: {type(e).__name__}: {one_line(e)[:200]}") from None
    target, ctx = _import(spec), _context(env)
    gym.register("flow1-replay-v0", entry_point=lambda: target(ctx), disable_env_checker=multi_agent)
    try:
        made = gym.make("flow1-replay-v0")
    except Exception as e:   # noqa: BLE001
        raise Flow1InputError(f"{spec}(env_config) failed: {type(e).__name__}: {one_line(e)[:200]}") from None
    finally:
        gym.registry.pop("flow1-replay-v0", None)
    if multi_agent and env.get("rllib_checked"):
        _rllib_check(made)
    return made


def _rllib_check(env: Any) -> None:
    """What RLlib's MultiAgentEnvRunner did to the sub-env once it was made, before the recorder
    saw it: ``check_multiagent_environments`` (a reset with seed 42, a step with sampled actions).
    An env that counts its steps across episodes counts that one too."""
    try:
        from ray.rllib.utils.pre_checks.env import check_multiagent_environments
    except ImportError:   # without RLlib: the replay goes on one step short, as it would have
        return
    try:
        check_multiagent_environments(env.unwrapped)
    except Exception as e:   # noqa: BLE001 -- the run's own check passed; here it did not: said
        raise Flow1InputError(f"RLlib's env check, which the run's runner made, failed here: "
                              f"{type(e).__name__}: {one_line(e)[:200]}") from None


def _reset(env: Any, episode: dict, state: dict | None) -> Any:
    """Reset as an episode was: with its seed and options; the first episode of a replay
    without a seed from the generator's recorded state (a reset without a seed continues
    from it), the later ones from where the replay left the generator, as the run did."""
    if episode.get("seed") is None and isinstance(state, dict):
        env.reset(seed=0)   # makes the generator, whose state is then replaced
        try:
            env.unwrapped.np_random.bit_generator.state = state
        except Exception as e:   # noqa: BLE001
            raise Flow1InputError(f"the env's random state cannot be restored: {type(e).__name__}: {e}") from None
    return env.reset(seed=episode.get("seed"), options=episode.get("options"))


def _episode_start(env: Any, ep: dict, e: int, last: bool, start: dict, failure: dict, k: int) -> tuple:
    """Episode ``e``'s reset: (its observation, None), or (None, the outcome) where the reset
    raised (the env's own failure is the result) or was the run's failing call and returned."""
    try:
        obs, _ = _reset(env, ep, start.get("rng_state") if e == 0 else None)
    except Flow1InputError:
        raise
    except Exception as exc:   # noqa: BLE001
        return None, _raised(exc, k, failure, during="reset")
    if last and failure.get("call") == "reset":
        return None, {"result": NOT_REPRODUCED, "step": k, "why": "the failing reset returned"}
    return obs, None


def _differs(digest: Digest, obs: Any, recorded: float) -> bool:
    import numpy as np

    got = digest.of(np.asarray(obs)[None], 1) if isinstance(obs, np.ndarray) else None
    if got is None or recorded is None or (np.isnan(recorded) and np.isnan(got[0])):
        return False
    return not np.isclose(got[0], recorded, rtol=DIGEST_RTOL, atol=1e-9)


def _action(a: Any) -> Any:
    return a.item() if getattr(a, "ndim", None) == 0 else a


def steps(man: dict, arrays: dict, env: Any, on_step: Any = None, until: int | None = None) -> dict:
    """Replay in this process; the outcome as a dict (``result``, ``step``...). Steps are
    counted over every replayed episode, as the manifest's failure step is. ``until``: stop
    before this step and leave the env there."""
    start, failure = man["start"], man["failure"]
    if start.get("multi_agent"):
        return _agent_steps(man, arrays, env, on_step, until)
    digest = Digest()
    episodes = start.get("episodes") or [{}]
    acts = list(arrays.get("actions", []))
    dig = arrays.get("digests")
    bounds = [int(x) for x in arrays.get("episode_starts", [0])] + [len(acts)]
    k = 0
    for e, ep in enumerate(episodes):
        last = e == len(episodes) - 1
        obs, ended = _episode_start(env, ep, e, last, start, failure, k)
        if ended is not None:
            return ended
        if ep.get("first_digest") is not None and _differs(digest, obs, ep["first_digest"]):
            return {"result": DIVERGED, "step": k, "why": f"the observation after the reset of episode {e + 1} "
                                                          f"differs from the run's"}
        plan = acts[bounds[e]:bounds[e + 1]] if e + 1 < len(bounds) else []
        if last and arrays.get("failed_action") is not None and not failure.get("nonfinite"):
            plan = plan + [arrays["failed_action"]]
        for j, a in enumerate(plan):
            k += 1
            if until is not None and k >= until:
                return {"result": "stopped", "step": k - 1}
            if on_step is not None:
                on_step(k)
            try:
                obs, r, _term, _trunc, _ = env.step(_action(a))
            except Exception as exc:   # noqa: BLE001
                return _raised(exc, k, failure)
            if failure.get("nonfinite") and k == failure.get("step"):
                return _nonfinite(failure["nonfinite"], obs if failure["nonfinite"] == "observation" else r, k)
            row = bounds[e] + j
            whole = _whole_life(failure, env, obs, r, arrays.get("rewards"), row, k)
            if whole is not None:
                return whole
            if dig is not None and row < bounds[e + 1] and row < len(dig) and _differs(digest, obs, float(dig[row])):
                return {"result": DIVERGED, "step": k, "why": f"the observation after step {k} (episode {e + 1}) "
                                                              f"differs from the run's"}
    if failure.get("whole_life") == "rewards":
        return {"result": REPRODUCED, "step": k, "exception": None, "why": None,
                "nonfinite": f"the env's life replays to step {k} with the run's observations and rewards: "
                             f"`flow1 replay --steps-before N` (or flow1_ray.replay.load) hands over the env N steps "
                             f"before its end, in the state the reward audit judged"}
    if failure.get("whole_life") == "space":
        return {"result": NOT_REPRODUCED, "step": k, "why": f"every observation of the {k} steps replayed is inside "
                                                            f"the observation space (another sub-env made it?)"}
    return {"result": NOT_REPRODUCED, "step": k, "why": f"all {k} steps replayed without the failure"}


def _whole_life(failure: dict, env: Any, obs: Any, r: Any, rewards: Any, row: int, k: int) -> dict | None:
    """A whole-life replay's check of step ``k``: a space violation's first observation outside
    the space (the outcome), a reward audit's reward that differs from the run's (diverged)."""
    import numpy as np

    how = failure.get("whole_life")
    if how == "space":
        why = outside(env.observation_space, obs)
        if why is not None:
            return {"result": REPRODUCED, "step": k, "exception": None, "why": None,
                    "nonfinite": f"the observation of step {k} is outside the observation space: {why}"}
    elif how == "rewards" and rewards is not None and row < len(rewards):
        if not np.isclose(float(r), float(rewards[row]), rtol=1e-6, atol=1e-9, equal_nan=True):
            return {"result": DIVERGED, "step": k, "why": f"the reward of step {k} is {float(r):.6g}; the run's was "
                                                          f"{float(rewards[row]):.6g}"}
    return None


def outside(space: Any, obs: Any) -> str | None:
    """Why ``obs`` is not in ``space`` (shape, dtype, the largest excess over a Box's bounds), or None."""
    import numpy as np

    try:
        if space.contains(obs):
            return None
    except Exception as e:   # noqa: BLE001 -- a space that cannot judge it: said
        return f"{type(space).__name__}.contains raised {type(e).__name__}: {one_line(e)[:120]}"
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    a = np.asarray(obs)
    if shape is not None and a.shape != tuple(shape):
        return f"shape {a.shape}, the space's {tuple(shape)}"
    if dtype is not None and a.dtype != dtype and not np.can_cast(a.dtype, dtype):
        return f"dtype {a.dtype}, the space's {dtype}"
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is not None and high is not None and a.dtype.kind in "biuf":
        excess = float(np.max(np.maximum(low - a, a - high)))
        return f"{excess:.4g} beyond the bounds (values {float(a.min()):.4g} to {float(a.max()):.4g})"
    return f"not in {space}"


def _agent_action(row: Any, acted: Any, kinds: dict, agents: list) -> dict:
    """A multi-agent step's action dict from its recorded row: each agent that acted, its
    numbers cast back to its first action's shape and dtype."""
    import numpy as np

    out = {}
    for c, aid in enumerate(agents):
        if c >= len(acted) or not acted[c]:
            continue
        shape, dtype = (kinds.get(str(c)) or [[], "<f8"])[:2]
        try:
            dt = np.dtype(str(dtype))
            shape = tuple(int(x) for x in shape)
            if dt.kind not in "biuf":
                raise TypeError(dt.str)
            v = np.asarray(row[c][:int(np.prod(shape))]).astype(dt).reshape(shape)
        except (TypeError, ValueError) as e:
            raise Flow1InputError(f"agent {aid!r}'s recorded action cannot be rebuilt: {e}") from None
        out[aid] = v.item() if v.ndim == 0 else v
    return out


def _agent_differs(digest: Digest, obs: Any, dig: Any, seen: Any, agents: list) -> str | None:
    """The first agent whose observation differs from its recorded digest, said; or None."""
    for c, aid in enumerate(agents):
        if c < len(seen) and seen[c]:
            x = obs.get(aid) if isinstance(obs, dict) else None
            if x is None:
                return f"agent {aid!r} observed nothing where the run's did"
            if _differs(digest, x, float(dig[c])):
                return f"agent {aid!r}'s observation"
    return None


def _agent_steps(man: dict, arrays: dict, env: Any, on_step: Any, until: int | None) -> dict:
    """:func:`steps` for a multi-agent env: per step the action dict of the agents that acted,
    each observing agent's digest compared."""
    import numpy as np

    start, failure = man["start"], man["failure"]
    agents, kinds, digest = list(start.get("agents") or []), start.get("action_kinds") or {}, Digest()
    n = len(arrays.get("actions", []))
    acted = arrays.get("acted", np.ones((n, len(agents))))
    dig, seen = arrays.get("digests"), arrays.get("observed")
    bounds = [int(x) for x in arrays.get("episode_starts", [0])] + [n]
    k, episodes = 0, start.get("episodes") or [{}]
    for e, ep in enumerate(episodes):
        last = e == len(episodes) - 1
        obs, ended = _episode_start(env, ep, e, last, start, failure, k)
        if ended is not None:
            return ended
        for c, v in (ep.get("first_digest") or {}).items():
            aid = agents[int(c)] if str(c).isdigit() and int(c) < len(agents) else None
            if aid is not None and _differs(digest, obs.get(aid) if isinstance(obs, dict) else None, v):
                return {"result": DIVERGED, "step": k, "why": f"agent {aid!r}'s observation after the reset of "
                                                              f"episode {e + 1} differs from the run's"}
        plan = [(arrays["actions"][r], acted[r]) for r in range(bounds[e], bounds[e + 1])] if e + 1 < len(bounds)             else []
        if last and arrays.get("failed_action") is not None and not failure.get("nonfinite"):
            plan.append((arrays["failed_action"], arrays.get("failed_acted", np.ones(len(agents)))))
        for j, (row, who) in enumerate(plan):
            k += 1
            if until is not None and k >= until:
                return {"result": "stopped", "step": k - 1}
            if on_step is not None:
                on_step(k)
            try:
                obs, r, _term, _trunc, _ = env.step(_agent_action(row, who, kinds, agents))
            except Flow1InputError:
                raise
            except Exception as exc:   # noqa: BLE001
                return _raised(exc, k, failure)
            if failure.get("nonfinite") and k == failure.get("step"):
                return _nonfinite(failure["nonfinite"], obs if failure["nonfinite"] == "observation" else r, k)
            at = bounds[e] + j
            what = _agent_differs(digest, obs, dig[at], seen[at], agents) \
                if dig is not None and seen is not None and at < bounds[e + 1] else None
            if what:
                return {"result": DIVERGED, "step": k, "why": f"{what} after step {k} (episode {e + 1}) differs "
                                                              f"from the run's"}
    return {"result": NOT_REPRODUCED, "step": k, "why": f"all {k} steps replayed without the failure"}


def _nonfinite(what: str, value: Any, k: int) -> dict:
    import numpy as np

    try:   # a multi-agent step's values: one per agent
        values = list(value.values()) if isinstance(value, dict) else [value]
        bad = not all(bool(np.all(np.isfinite(np.asarray(v, dtype=np.float64)))) for v in values)
    except (TypeError, ValueError):
        bad = False
    if bad:
        return {"result": REPRODUCED, "step": k, "exception": None, "why": None,
                "nonfinite": f"a NaN or inf {what} at step {k}, as in the run"}
    return {"result": NOT_REPRODUCED, "step": k, "why": f"the {what} of step {k} is finite here; the run's was not"}


def _same_failure(got: str, recorded: str) -> bool:
    """The same exception type and message, numbers aside (a pid, an address in the message)."""
    import re

    def norm(t: str) -> str:
        return re.sub(r"0x[0-9a-fA-F]+|\d+", "#", t)
    return norm(got) == norm(recorded)


def _raised(e: BaseException, k: int, failure: dict, during: str = "step") -> dict:
    import traceback

    got = f"{type(e).__name__}: {e}"
    frames = traceback.extract_tb(e.__traceback__)
    frame = f"{frames[-1].name} ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else None
    same = during == failure.get("call", "step") and _same_failure(got, str(failure.get("exception"))) \
        and k == failure.get("step")
    return {"result": REPRODUCED if same else NOT_REPRODUCED, "step": k, "exception": got[:2000], "frame": frame,
            "why": None if same else f"raised {got[:200]} at step {k}; the run raised "
                                     f"{str(failure.get('exception'))[:200]} at step {failure.get('step')}"}


def load(entry: "str | os.PathLike", steps_before: int = 1, env: str | None = None) -> Any:
    """The env replayed in this process up to ``steps_before`` steps before the failing one
    (1: every step before it taken; the failing step's action is :func:`failing_action`)."""
    man, arrays = read_entry(entry)
    if man.get("kind") == "learner":
        raise Flow1InputError("a Learner's dump holds one update, not env steps: replay it whole (flow1 replay ENTRY)")
    e = build_env(man["env"], env, multi_agent=bool(man["start"].get("multi_agent")))
    failing = int(man["failure"].get("step") or 0)
    if man["failure"].get("call") == "reset" or failing < 1:
        raise Flow1InputError("the run failed in a reset: there is no step to stop before (replay it whole)")
    out = steps(man, arrays, e, until=max(1, failing - int(steps_before) + 1))
    if out["result"] not in ("stopped",):
        raise Flow1InputError(f"the replay ended before that step: {out['result']} at step {out['step']}")
    return e


def failing_action(entry: "str | os.PathLike") -> Any:
    """The action the run's failing step was called with (a crash's or a hang's), or the last
    recorded one (a NaN's: the step that produced it)."""
    man, arrays = read_entry(entry)
    a, acted = arrays.get("failed_action"), arrays.get("failed_acted")
    if a is None and len(arrays.get("actions", [])):
        a, acted = arrays["actions"][-1], arrays["acted"][-1] if "acted" in arrays else None
    if a is not None and man["start"].get("multi_agent"):
        agents = list(man["start"].get("agents") or [])
        return _agent_action(a, acted if acted is not None else [1] * len(agents),
                             man["start"].get("action_kinds") or {}, agents)
    return None if a is None else _action(a)
