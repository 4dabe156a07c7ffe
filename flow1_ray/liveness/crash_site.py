"""Where inside an EnvRunner's ``sample()`` an exception was raised, read from its traceback
after the fact: the component (the env, a connector of the env-to-module or module-to-env
pipeline and which one, the RLModule's forward pass, the action distribution's sampling, a
callback, RLlib's own code), the innermost frame of the user's code, and an exit's code
(``sys.exit`` raises SystemExit through ``sample()``; ``os._exit`` runs no Python after it,
so :func:`watch_os_exit` records its caller before the call).

The classification walks the traceback from the innermost frame outwards and takes the
first frame whose ``self`` is one of RLlib's component types: a torch ``nn.Linear`` inside a
user's RLModule is passed over until the RLModule's own ``_forward`` frame; a NaN logit that
torch's ``Categorical`` refuses is the distribution's, inside RLlib's GetActions connector. It
runs only on the failing path; the path that does not raise pays for a ``try`` and nothing else.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Callable

from ..checks.run.death_cause import (CALLBACK, CONNECTOR, ENV, ENV_TO_MODULE, LEARNER, LEARNER_CONNECTOR, MODULE_TO_ENV,
                                     RAY, RL_MODULE, RLLIB, SAMPLING, USER)

_PACKAGES = {Path(p).resolve() for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                         sysconfig.get_paths()["platlib"]}}
_OWN = Path(__file__).resolve().parents[1]   # flow1_ray itself


def _library(filename: str) -> bool:
    """A frame of the standard library, of an installed package or of flow1: not the user's
    own code (an env, a connector or a module written beside the training script)."""
    try:
        p = Path(filename).resolve()
    except (OSError, ValueError):
        return True
    return p.is_relative_to(_OWN) or any(p.is_relative_to(root) for root in _PACKAGES)


def _frames(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _where(frame: FrameType, lineno: int) -> str:
    return f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{lineno})"


def _types() -> dict[str, tuple[type, ...]]:
    """RLlib's (and torch's) component base classes, those that are importable here."""
    found: dict[str, list[type]] = {SAMPLING: [], RL_MODULE: [], CONNECTOR: [], "pipeline": [], CALLBACK: [], ENV: [],
                                    LEARNER: []}
    for key, module, name in ((SAMPLING, "ray.rllib.models.distributions", "Distribution"),
                              (SAMPLING, "torch.distributions", "Distribution"),
                              (RL_MODULE, "ray.rllib.core.rl_module.rl_module", "RLModule"),
                              ("pipeline", "ray.rllib.connectors.connector_pipeline_v2", "ConnectorPipelineV2"),
                              (CONNECTOR, "ray.rllib.connectors.connector_v2", "ConnectorV2"),
                              (CALLBACK, "ray.rllib.callbacks.callbacks", "RLlibCallback"),
                              (ENV, "gymnasium", "Env"), (ENV, "gymnasium.vector", "VectorEnv"),
                              (ENV, "ray.rllib.env.multi_agent_env", "MultiAgentEnv"),
                              (LEARNER, "ray.rllib.core.learner.learner", "Learner")):
        mod = sys.modules.get(module)   # only what the runner has loaded: nothing is imported here
        cls = getattr(mod, name, None) if mod is not None else None
        if isinstance(cls, type):
            found[key].append(cls)
    return {k: tuple(v) for k, v in found.items()}


def _class_name(obj: Any) -> str:
    """The object's class as its author named it: Ray Train's actor wrapper (a subclass named
    ``_WrappedExecutable`` around a Learner's class) is passed over to the class it wraps."""
    return next((c.__name__ for c in type(obj).__mro__ if c.__name__ != "_WrappedExecutable"), type(obj).__name__)


def _unwrapped(obj: Any) -> Any:
    return obj.__dict__.get("__wrapped__", obj) if hasattr(obj, "__dict__") else obj


def _component(frames: list[tuple[FrameType, int]], runner: Any) -> tuple[str, str, str]:
    """(component, the object's class, the pipeline) of the innermost frame that belongs to one."""
    types = _types()
    # a stand-in in front of a pipeline (flow1's own tap) names what it wraps, as functools' wrappers do
    pipes = {id(_unwrapped(getattr(runner, "_env_to_module", None))): ENV_TO_MODULE,
             id(_unwrapped(getattr(runner, "_module_to_env", None))): MODULE_TO_ENV,
             id(_unwrapped(getattr(runner, "_learner_connector", None))): LEARNER_CONNECTOR}
    pipes.pop(id(None), None)
    for i in range(len(frames) - 1, -1, -1):
        frame = frames[i][0]
        obj = frame.f_locals.get("self")
        if frame.f_code.co_name == "make_callback" and frame.f_code.co_filename.endswith(
                os.path.join("rllib", "callbacks", "utils.py")):
            return CALLBACK, "", ""
        if obj is None:
            continue
        for key in (SAMPLING, RL_MODULE, CALLBACK, ENV, LEARNER):
            if types[key] and isinstance(obj, types[key]):
                return key, _class_name(obj), ""
        if types["pipeline"] and isinstance(obj, types["pipeline"]):
            return pipes.get(id(obj), CONNECTOR), "", ""
        if types[CONNECTOR] and isinstance(obj, types[CONNECTOR]):
            pipe = next((pipes.get(id(f.f_locals.get("self")), "") for f, _ in reversed(frames[:i])
                         if types["pipeline"] and isinstance(f.f_locals.get("self"), types["pipeline"])), "")
            return pipe or CONNECTOR, _class_name(obj), pipe
    return RLLIB, "", ""


def crash_site(exc: BaseException, runner: Any = None, depth: int = 0) -> dict[str, Any]:
    """Where ``exc`` was raised, as evidence: ``component`` (one of :data:`COMPONENTS`),
    ``component_class`` (the connector's, module's or distribution's class), ``frame`` (the
    innermost frame of the user's code, else the innermost frame), ``raised_at`` (the
    innermost frame) and, for ``SystemExit``, ``exit_code`` and ``exit_call``.

    Args:
        exc: the exception that left ``sample()``.
        runner: the EnvRunner (or Learner) it left: its connector pipelines tell env-to-module
            from module-to-env (and a Learner's own pipeline); None: a connector is named
            without its pipeline.
        depth: how many explicit causes (``raise ... from e``) were followed to get here.
    """
    frames = _frames(exc.__traceback__)
    try:
        component, cls, _ = _component(frames, runner)
    except Exception:   # a frame's locals that cannot be read: the site stays unknown, never a guess
        component, cls = RLLIB, ""
    user = next(((f, n) for f, n in reversed(frames) if not _library(f.f_code.co_filename)), None)
    inner = frames[-1] if frames else None
    out: dict[str, Any] = {
        "exception": type(exc).__name__, "error": str(exc)[:500], "component": component,
        "component_class": cls,
        "frame": _where(*user) if user else _where(*inner) if inner else "?",
        "raised_at": _where(*inner) if inner else "?",
        "user_frame": user is not None,
    }
    cause = exc.__cause__   # RLlib re-raises some as ``raise RuntimeError from e``: the cause is the news
    if component == RLLIB and cause is not None and cause is not exc and depth < 4:
        inner = crash_site(cause, runner, depth + 1)
        if inner["component"] != RLLIB:
            return {**inner, "wrapped_by": f"{out['exception']} in {out['raised_at']}"}
    if isinstance(exc, SystemExit):
        code = exc.code
        out.update(exit_call="sys.exit", exit_code=code if isinstance(code, int) or code is None else str(code)[:200])
    return out


#: how much of one observation a digest hashes (a large image: its first megabyte)
DIGEST_BYTES = 1 << 20


def digest(value: Any, leaves: int = 8) -> Any:
    """A small, JSON-able account of an observation: per array leaf (a dict's keys, a tuple's
    items, up to ``leaves``) its shape, dtype, how many values are not finite, the finite
    range and a hash of its bytes, so a death's evidence says what the component last read
    without carrying it.

    Args:
        value: the observation (an array, a number, or a dict/tuple/list of them).
        leaves: the most leaves described.
    """
    import hashlib

    import numpy as np

    if isinstance(value, dict):
        return {str(k)[:60]: digest(v, 1) for k, v in list(value.items())[:leaves]}
    if isinstance(value, (tuple, list)) and value and not all(isinstance(v, (int, float)) for v in value):
        return [digest(v, 1) for v in value[:leaves]]
    try:
        a = np.asarray(value)
    except Exception:
        return {"type": type(value).__name__}
    out: dict[str, Any] = {"shape": list(a.shape), "dtype": str(a.dtype)}
    if a.dtype.kind in "fc":
        finite = np.isfinite(a)
        out["non_finite"] = int(a.size - np.count_nonzero(finite))
        if out["non_finite"]:
            out["first_non_finite_at"] = [int(i) for i in np.argwhere(~finite)[0]]
        if out["non_finite"] < a.size:
            out["min"], out["max"] = float(a[finite].min()), float(a[finite].max())
    elif a.dtype.kind in "iub" and a.size:
        out["min"], out["max"] = float(a.min()), float(a.max())
    if a.dtype.kind != "O":
        out["hash"] = hashlib.blake2b(np.ascontiguousarray(a).tobytes()[:DIGEST_BYTES], digest_size=6).hexdigest()
    return out


def done_in_failed_call(exc: BaseException, runner: Any) -> list[Any]:
    """The episodes that ended inside the ``sample()`` call ``exc`` left: RLlib's sampling loop
    keeps them in a local list (``done_episodes_to_return``) until the call returns, so they
    are read from its frame in the traceback; empty when there is no such frame.

    Args:
        exc: the exception that left ``sample()``.
        runner: the EnvRunner whose sampling frame is looked for.
    """
    for frame, _ in _frames(exc.__traceback__):
        if frame.f_locals.get("self") is runner:
            done = frame.f_locals.get("done_episodes_to_return")
            if isinstance(done, list):
                return list(done)
    return []


def where_sampling(runner: Any, limit: int = 8) -> list[dict[str, Any]]:
    """Each sub-env's ongoing episode when ``sample()`` raised: its index, the episode's id,
    its step and the digest of its last observation (what the env handed to the env-to-module
    connector; for a multi-agent episode, per agent). Empty when the runner has none.

    Args:
        runner: the EnvRunner (``_ongoing_episodes``, RLlib's list of one episode per sub-env).
        limit: the most sub-envs described.
    """
    out = []
    for i, ep in enumerate((getattr(runner, "_ongoing_episodes", None) or [])[:limit]):
        if ep is None:
            continue
        entry: dict[str, Any] = {"sub_env": i, "episode": str(getattr(ep, "id_", ""))[:40],
                                 "env_step": getattr(ep, "env_t", getattr(ep, "t", None))}
        try:
            if len(ep) > 0 or getattr(ep, "is_reset", False):
                entry["last_observation"] = digest(ep.get_observations(-1))
        except Exception:   # an episode without observations yet
            pass
        out.append(entry)
    return out


def wrap_state_sync(runner: Any, record: Callable[[dict[str, Any]], Any]) -> int:
    """Record an exception that leaves the weight sync: RLlib calls an EnvRunner's
    ``set_state`` by name (Ray runs the class's function, which no wrapper on the instance
    reaches), and it hands the state to the runner's RLModule and connector pipelines through
    their own ``set_state``, which are wrapped here on the instances. The exception is recorded
    (``during``: ``set_state``) and re-raised untouched. Returns how many were wrapped.

    Args:
        runner: the EnvRunner (``module``, ``_env_to_module``, ``_module_to_env``).
        record: called with the crash site (the liveness holder's ``record_cause``).
    """
    wrapped = 0
    for attr in ("module", "_env_to_module", "_module_to_env"):
        obj = getattr(runner, attr, None)
        fn = getattr(obj, "set_state", None)
        if obj is None or not callable(fn) or getattr(fn, "_flow1_recording", False):
            continue
        try:
            setattr(obj, "set_state", recording(fn, record, runner, during="set_state"))
            wrapped += 1
        except Exception:   # an object that refuses attributes keeps its own
            pass
    return wrapped


def recording(fn: Callable, record: Callable[[dict[str, Any]], Any], owner: Any, **extra: Any) -> Callable:
    """``fn`` with an exception that leaves it recorded (:func:`crash_site` of ``owner``, plus
    ``extra``) and re-raised untouched; the path that does not raise pays for a ``try``.

    Args:
        fn: the callable wrapped.
        record: called with the crash site (the liveness holder's ``record_cause``).
        owner: the EnvRunner or Learner whose pipelines tell the connectors apart.
        extra: fields added to the record (``during``: the call).
    """
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            try:
                record({**crash_site(exc, owner), **extra})
            except Exception:   # the record is evidence: its failure never changes the error
                pass
            raise

    call._flow1_recording = True   # type: ignore[attr-defined]
    return call


def watch_os_exit(record: Callable[[dict[str, Any]], Any]) -> Callable[[], None]:
    """Put a recorder in front of ``os._exit`` in this process: the exit code and the frame
    that called it are recorded (:func:`record`, next to the lock) before the process ends,
    since ``os._exit`` runs no Python after it. Returns the function that puts it back.

    Args:
        record: called with the exit's evidence (``exit_call``, ``exit_code``, ``component``,
            ``frame``); whatever it raises is swallowed, and the exit goes on.
    """
    original = os._exit

    def _exit(code: int) -> None:
        try:
            caller = sys._getframe(1)
            chain: list[FrameType] = []
            f: FrameType | None = caller
            while f is not None and len(chain) < 64:
                chain.append(f)
                f = f.f_back
            user = next((f for f in chain if not _library(f.f_code.co_filename)), None)
            ray_code = "/ray/" in caller.f_code.co_filename.replace(os.sep, "/")
            at = user or caller
            component, cls, _ = _component([(f, f.f_lineno) for f in reversed(chain)], None)
            if component == RLLIB:   # no component's frame on the way: Ray's own exit, or the user's
                component = RAY if ray_code else USER
            record({"exception": "", "error": "", "exit_call": "os._exit", "exit_code": code,
                    "component": component, "component_class": cls,
                    "frame": _where(at, at.f_lineno), "raised_at": _where(caller, caller.f_lineno),
                    "user_frame": user is not None})
        except BaseException:
            pass
        original(code)

    os._exit = _exit

    def restore() -> None:
        if os._exit is _exit:
            os._exit = original

    return restore

