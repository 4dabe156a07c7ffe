"""The tap: what one single-agent EnvRunner's pipeline does on each step, recorded as it samples.

:class:`Tap` puts a thin stand-in in front of the runner's env-to-module and module-to-env
connector pipelines (RLlib's ``SingleAgentEnvRunner._env_to_module`` / ``_module_to_env``: the
runner calls them as ``self._env_to_module(...)``). The env-to-module call gets the env's
observations as a keyword (``obs``, one per sub-env) and returns the RLModule's input batch; the
module-to-env call gets the module's output (the action distribution's inputs) and returns the
sampled actions and the actions for the env. Every other attribute goes to the pipeline itself,
so the runner, its state and its checkpoints see no difference. The record is bounded
(:data:`MAX_BYTES`); past it the tap stops recording and says so (``truncated``).

The rows become a :class:`~flow1_ray.checks.pipeline.sample.PipeSample` (:meth:`Tap.sample`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..checks.pipeline.sample import PipeSample

#: the record's bound: observations, module inputs, distribution inputs and actions together
MAX_BYTES = 64 * 1024**2


def flat(x: Any) -> np.ndarray | None:
    """One row of values as a float64 vector (a dict or tuple: its leaves in RLlib's order,
    sorted keys); None when a leaf is not numeric."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":   # the common case, without tree's walk
        return x.astype(np.float64).ravel()
    if isinstance(x, (int, float, np.number)) and not isinstance(x, bool):
        return np.array([x], np.float64)
    import tree

    try:
        leaves = [np.asarray(_numpy(v)) for v in tree.flatten(x)]
        if not leaves or any(v.dtype.kind not in "biuf" for v in leaves):
            return None
        return np.concatenate([v.astype(np.float64).ravel() for v in leaves])
    except (TypeError, ValueError):
        return None


def _numpy(v: Any) -> Any:
    detach = getattr(v, "detach", None)
    return detach().cpu().numpy() if detach is not None else v


def _shape(x: Any) -> tuple:
    import tree

    leaves = tree.flatten(x)
    return tuple(np.shape(_numpy(leaves[0]))) if len(leaves) == 1 else (sum(int(np.size(_numpy(v))) for v in leaves),)


class _Stand:
    """In front of a connector pipeline: the call recorded, everything else passed through."""

    def __init__(self, pipeline: Any, on_call: Any) -> None:
        object.__setattr__(self, "_pipeline", pipeline)
        object.__setattr__(self, "_on_call", on_call)
        object.__setattr__(self, "__wrapped__", pipeline)   # what a traceback's reader (crash_site) unwraps

    def __call__(self, **kwargs: Any) -> Any:
        return self._on_call(self._pipeline, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipeline, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._pipeline, name, value)


class Tap:
    """Records a SingleAgentEnvRunner's pipeline step by step (see the module docstring)."""

    def __init__(self, runner: Any, max_bytes: int = MAX_BYTES, max_rows: int | None = None) -> None:
        self.runner = runner
        self.max_rows = max_rows if max_rows is not None else float("inf")   # a live window's rows
        self.max_bytes, self.bytes, self.truncated = max_bytes, 0, False
        self.recording = True   # False: the calls pass straight through (a live runner between windows)
        self.cpu_s = 0.0        # the thread CPU the tap's recording took (what a live runner's account books)
        self.raw: list[np.ndarray | None] = []
        self.seen: list[np.ndarray | None] = []
        self.episode: list[int] = []
        self.t: list[int] = []
        self.dist_inputs: list[np.ndarray | None] = []   # None: the module chose its actions itself
        self.actions: list[np.ndarray] = []
        self.env_actions: list[np.ndarray] = []
        self.raw_shape: tuple = ()
        self.seen_shape: tuple = ()
        # each sub-env's episode chunk (RLlib cuts an episode at the end of every sample() call:
        # a chunk holds only its own steps and a lookback of config.episode_lookback_horizon) and
        # its number; a row's t counts the steps of its chunk
        self._chunks: list[Any] = []
        self._numbers: list[int] = []
        self._number = -1
        try:   # a stateful RLModule's input rows carry a time axis of one step
            self.timed = bool(runner.module.is_stateful())
        except Exception:
            self.timed = False
        self._pipelines = (runner._env_to_module, runner._module_to_env)
        runner._env_to_module = _Stand(runner._env_to_module, self._to_module)
        runner._module_to_env = _Stand(runner._module_to_env, self._to_env)

    def remove(self) -> None:
        self.runner._env_to_module, self.runner._module_to_env = self._pipelines

    def clear(self) -> None:
        """Forget the rows recorded (a live window judged); recording goes on as set."""
        for rows in (self.raw, self.seen, self.episode, self.t, self.dist_inputs, self.actions, self.env_actions):
            rows.clear()
        self.bytes, self.truncated = 0, False
        self._chunks, self._numbers = [], []

    # -- the two calls ----------------------------------------------------------------------
    def _to_module(self, pipeline: Any, kwargs: dict) -> Any:
        if not self.recording or len(self.episode) >= self.max_rows:
            return pipeline(**kwargs)
        obs = kwargs.get("obs")
        episodes = kwargs.get("episodes") or []
        out = pipeline(**kwargs)
        if self.truncated or obs is None:
            return out
        c0 = time.thread_time()
        try:
            self._rows_in(obs, episodes, out)
        except Exception:   # a batch of a shape the tap does not know: stop recording, never the runner
            self.truncated = True
        self.cpu_s += time.thread_time() - c0
        return out

    def _rows_in(self, obs: list, episodes: list, out: Any) -> None:
        from ray.rllib.core.columns import Columns

        answered = len(self.actions)
        if len(self.episode) > answered:   # the last call's rows were never acted on (a reset superseded them)
            for rows in (self.raw, self.seen, self.episode, self.t):
                del rows[answered:]

        seen = out.get(Columns.OBS) if isinstance(out, dict) else None
        if seen is not None:   # one conversion of the batch, not one per row
            seen = _numpy(seen) if hasattr(seen, "detach") else _as_numpy(seen)
        for i, ep in enumerate(episodes):
            raw_i = obs[i] if i < len(obs) else None
            seen_i = _row(seen, i, self.timed) if seen is not None else None
            if not self.raw_shape and raw_i is not None:
                self.raw_shape, self.seen_shape = _shape(raw_i), _shape(seen_i) if seen_i is not None else ()
            r, s = flat(raw_i), flat(seen_i)
            self._count(r, s)
            self.raw.append(r)
            self.seen.append(s)
            if i >= len(self._chunks) or self._chunks[i] is not ep:   # a new episode, or its next chunk
                self._chunks[i:i + 1] = [ep]
                self._number += 1
                self._numbers[i:i + 1] = [self._number]
            self.episode.append(self._numbers[i])
            self.t.append(len(ep))

    def _to_env(self, pipeline: Any, kwargs: dict) -> Any:
        if not self.recording or len(self.actions) >= len(self.episode):   # no row of this window to answer
            return pipeline(**kwargs)
        from ray.rllib.core.columns import Columns

        batch = kwargs.get("batch") or {}
        inputs = batch.get(Columns.ACTION_DIST_INPUTS) if isinstance(batch, dict) else None
        c0 = time.thread_time()
        inputs = None if inputs is None else np.asarray(_numpy(inputs), np.float64).copy()
        self.cpu_s += time.thread_time() - c0
        out = pipeline(**kwargs)
        if self.truncated:
            return out
        c0 = time.thread_time()
        try:
            n = len(self.episode) - len(self.actions)   # the rows of the env-to-module call this answers
            acts, env_acts = out.get(Columns.ACTIONS), out.get(Columns.ACTIONS_FOR_ENV, out.get(Columns.ACTIONS))
            for i in range(n):
                a, e = flat(_row(acts, i)), flat(_row(env_acts, i))
                d = inputs[i].ravel() if inputs is not None and i < len(inputs) else None
                self._count(a, e, d)
                self.actions.append(a)
                self.env_actions.append(e)
                self.dist_inputs.append(d)
        except Exception:
            self.truncated = True
        self.cpu_s += time.thread_time() - c0
        return out

    def _count(self, *arrays: np.ndarray | None) -> None:
        self.bytes += sum(a.nbytes for a in arrays if a is not None)
        if self.bytes > self.max_bytes:
            self.truncated = True

    # -- the record -------------------------------------------------------------------------
    def sample(self, **spaces_and_config: Any) -> PipeSample:
        """The rows that have a module output, as a PipeSample; ``spaces_and_config``: the
        PipeSample's other fields (the action space, the distribution, the connectors)."""
        n = min(len(self.actions), len(self.seen))
        return PipeSample(raw=_stack(self.raw[:n]), seen=_stack(self.seen[:n]), raw_shape=self.raw_shape,
                          seen_shape=self.seen_shape, episode=np.asarray(self.episode[:n], np.int64),
                          t=np.asarray(self.t[:n], np.int64), dist_inputs=_stack(self.dist_inputs[:n]),
                          actions=_stack(self.actions[:n]), env_actions=_stack(self.env_actions[:n]),
                          **spaces_and_config)


def _as_numpy(batch: Any) -> Any:
    import tree

    return tree.map_structure(_numpy, batch)


def _row(batch: Any, i: int, timed: bool = False) -> Any:
    """Row ``i`` of a batch (a tensor, an array, a list or a dict of them); ``timed``: the batch
    of a stateful RLModule, whose rows carry a time axis of one step (taken away)."""
    if isinstance(batch, np.ndarray):   # the common case, without tree's walk
        return batch[i, 0] if timed and batch.ndim >= 2 else batch[i]
    if isinstance(batch, list) and not timed:
        return batch[i]
    import tree

    def one(x: Any) -> Any:
        x = _numpy(x)
        if isinstance(x, list):
            return x[i]
        x = np.asarray(x)
        return x[i, 0] if timed and x.ndim >= 2 else x[i]

    return tree.map_structure(one, batch)


def _stack(rows: list) -> np.ndarray | None:
    if not rows or any(r is None for r in rows):
        return None
    widths = {len(r) for r in rows}
    return np.stack(rows) if len(widths) == 1 else None
