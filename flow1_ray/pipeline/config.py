"""The user's algorithm config, named ``MODULE:FUNCTION``: imported and called (in a check's
child process, under its make timeout), checked to be an RLlib ``AlgorithmConfig``, and the
env made from it the way RLlib's EnvRunner makes it (a creator registered with
``ray.tune.register_env``, a gymnasium id, or an env class or creator, each given the config's
``env_config`` as an ``EnvContext``)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..common.errors import Flow1InputError


@dataclass(frozen=True)
class ConfigTarget:
    """What ``flow1 check --config`` judges: ``path`` (``MODULE:FUNCTION``, a function that
    returns an ``AlgorithmConfig``) and ``checkpoint`` (an Algorithm checkpoint folder whose
    RLModule weights and connector states the EnvRunner takes; None: its initial ones)."""

    path: str
    checkpoint: str | None = None

    def __str__(self) -> str:
        return self.path


def load_config(path: str) -> Any:
    """The ``AlgorithmConfig`` that ``MODULE:FUNCTION`` returns (a copy the check may change).
    Errors of what the user named are :class:`Flow1InputError`."""
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise Flow1InputError(f"bad config path {path!r}: expected 'module:function' (a function returning an "
                              f"AlgorithmConfig)")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise Flow1InputError(f"cannot import module {mod_name!r} (from {path!r}): {e}") from None
    except (Exception, SystemExit) as e:
        raise Flow1InputError(f"importing module {mod_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise Flow1InputError(f"module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    if not isinstance(obj, AlgorithmConfig):
        if not callable(obj):
            raise Flow1InputError(f"{path} is a {type(obj).__name__}, expected a function returning an AlgorithmConfig")
        try:
            obj = obj()
        except (Exception, SystemExit) as e:
            raise Flow1InputError(f"calling {path}() raised {type(e).__name__}: {e}") from None
    if not isinstance(obj, AlgorithmConfig):
        raise Flow1InputError(f"{path}() returned a {type(obj).__name__}, expected an RLlib AlgorithmConfig")
    if obj.env is None:
        raise Flow1InputError(f"the config of {path} names no env (config.environment(...))")
    return obj.copy(copy_frozen=False)


class ConfigEnv:
    """A zero-argument maker of the env a config names, as RLlib's EnvRunner makes it (for the
    env-contract half of ``flow1 check --config``); picklable, so a check's child process
    imports the config itself."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.__qualname__ = f"the env of {path}"

    def __call__(self) -> Any:
        return make_env(load_config(self.path))

    def __repr__(self) -> str:
        return self.__qualname__


def make_env(config: Any) -> Any:
    """One env made from ``config`` as EnvRunner 0 of a local run makes it."""
    from ray.rllib.env.env_context import EnvContext
    from ray.rllib.env.utils import _gym_env_creator
    from ray.tune.registry import ENV_CREATOR, _global_registry

    ctx = config.env_config if isinstance(config.env_config, EnvContext) else \
        EnvContext(dict(config.env_config or {}), worker_index=0, num_workers=0)
    if isinstance(config.env, str) and _global_registry.contains(ENV_CREATOR, config.env):
        return _global_registry.get(ENV_CREATOR, config.env)(ctx)
    return _gym_env_creator(env_context=ctx, env_descriptor=config.env)
