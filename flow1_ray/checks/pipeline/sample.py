"""What one EnvRunner's pipeline did over a run of steps, as plain arrays: the record the
pipeline rules (:mod:`.module_input`, :mod:`.module_output`) judge. One row per RLModule
forward pass of one sub-env: the env's observation that went into the env-to-module
connectors, what came out of them (the RLModule's input), the action distribution's inputs the
module returned, the action sampled from it and the action the module-to-env connectors handed
to the env. :mod:`flow1_ray.pipeline.tap` fills it from a real EnvRunner."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PipeSample:
    """One EnvRunner's pipeline, row by row (``N`` rows).

    ``raw``/``seen``: (N, D) and (N, M) float64, the env's observation and the RLModule's input
    flattened (None where either is not numeric); ``raw_shape``/``seen_shape`` one row's shape
    before flattening; ``declared_shape`` the shape of the observation space the env-to-module
    pipeline declares (what the RLModule was built for). ``episode``/``t``: each row's episode
    chunk (numbered in order; RLlib cuts an episode at the end of each ``sample()`` call, and a
    chunk sees only its own steps) and its step in that chunk (0: its first observation).
    ``dist``: the action distribution's kind (``categorical``, ``diag_gaussian``,
    ``squashed_gaussian`` or its class name), ``dist_inputs`` (N, K). ``actions`` (N, A) as
    sampled, ``env_actions`` (N, A) as the env got them. The action space: ``n_actions``
    (Discrete) or ``low``/``high`` (Box), ``normalize_actions``/``clip_actions`` as configured.
    ``trained``: the RLModule's weights came from a checkpoint, not its initialisation.
    ``env_to_module``/``module_to_env``: the connectors' class names, in order."""

    raw: np.ndarray | None = None
    seen: np.ndarray | None = None
    raw_shape: tuple = ()
    seen_shape: tuple = ()
    declared_shape: tuple | None = None
    episode: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    t: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dist: str = ""
    dist_inputs: np.ndarray | None = None
    actions: np.ndarray | None = None
    env_actions: np.ndarray | None = None
    n_actions: int | None = None
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    normalize_actions: bool = False
    clip_actions: bool = False
    trained: bool = False
    env_to_module: tuple[str, ...] = ()
    module_to_env: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return 0 if self.seen is None else len(self.seen)

    def pipeline(self) -> str:
        """The env-to-module connectors in words, for a message."""
        names = [n for n in self.env_to_module if n not in RLLIB_PLUMBING]
        return " -> ".join(names) if names else "RLlib's default connectors"


#: RLlib's default env-to-module pieces that only batch and convert (named in no message)
RLLIB_PLUMBING = frozenset({
    "AddObservationsFromEpisodesToBatch", "AddStatesFromEpisodesToBatch", "AddTimeDimToBatchAndZeroPad",
    "AgentToModuleMapping", "BatchIndividualItems", "NumpyToTensor", "ModuleToAgentUnmapping",
    "TensorToNumpy", "UnBatchToIndividualItems", "GetActions", "ListifyDataForVectorEnv",
    "RemoveSingleTsTimeRankFromBatch",
})
