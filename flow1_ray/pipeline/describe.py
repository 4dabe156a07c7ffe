"""What a built EnvRunner says about its own pipeline, for the pipeline rules: the action
distribution's kind, the env's action space, the observation space the env-to-module pipeline
declares (the RLModule's), the connectors' names and the config's action settings."""

from __future__ import annotations

from typing import Any

import numpy as np


def dist_kind(module: Any) -> str:
    """``categorical``, ``diag_gaussian``, ``squashed_gaussian``, or the distribution's class name."""
    try:
        cls = module.get_exploration_action_dist_cls()
    except Exception:
        return ""
    from ray.rllib.core.distribution.torch.torch_distribution import (TorchCategorical, TorchDiagGaussian,
                                                                      TorchSquashedGaussian)

    # RLlib wraps a class in functools.partial where it binds the space's bounds
    base = getattr(cls, "func", cls)
    if not isinstance(base, type):
        return type(base).__name__
    for kind, known in (("categorical", TorchCategorical), ("squashed_gaussian", TorchSquashedGaussian),
                        ("diag_gaussian", TorchDiagGaussian)):
        if issubclass(base, known):
            return kind
    return base.__name__


def connector_names(pipeline: Any) -> tuple[str, ...]:
    """A connector pipeline's pieces, by class name, in order."""
    pieces = getattr(pipeline, "connectors", None) or []
    return tuple(type(c).__name__ for c in pieces)


def describe_runner(runner: Any, config: Any, trained: bool) -> dict[str, Any]:
    """The :class:`~flow1_ray.checks.pipeline.sample.PipeSample` fields a tap cannot see."""
    import gymnasium as gym

    space = getattr(runner.env, "single_action_space", None) or runner.env.action_space
    out: dict[str, Any] = {"dist": dist_kind(runner.module), "trained": trained,
                           "normalize_actions": bool(config.normalize_actions),
                           "clip_actions": bool(config.clip_actions),
                           "env_to_module": connector_names(runner._env_to_module),
                           "module_to_env": connector_names(runner._module_to_env)}
    if isinstance(space, gym.spaces.Discrete):
        out["n_actions"] = int(space.n)
    elif isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        out["low"], out["high"] = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    declared = getattr(runner._env_to_module, "observation_space", None)
    if isinstance(declared, gym.spaces.Box):
        out["declared_shape"] = tuple(declared.shape)
    return out
