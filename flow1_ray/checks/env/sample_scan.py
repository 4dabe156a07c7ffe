"""The cheap tier of the live contract checks: every step of every episode a runner sampled.

The per-step checks see only a share of the episodes (:mod:`flow1_ray.checks.own.budgets`); a fault
that happens once (a NaN at one step) would be found with that share's probability. What
RLlib already recorded in the sample's episodes is scanned whole after ``sample()`` (small
samples together, see :mod:`flow1_ray.runner.agent`), one vectorised pass: NaN/inf in a float observation (OBS_NAN_INF) and NaN/inf
rewards (REWARD_NAN). These are the values after the vector env (and after any env-to-module
connector that writes back into episodes); dtypes, shapes, infos and bounds stay with the
checked episodes, where the env's raw values are seen, and so do observations of more than
``MAX_SCAN_ELEMENTS`` values a step (images: a pass over every frame would cost more than the
checks it replaces). Pure numpy over RLlib's episode API.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...common import codes as C
from .episode_parts import EpisodePart, episode_parts, parts_rows
from ..findings import FindingLog

MAX_SCAN_ELEMENTS = 1024   # observation values per step scanned at every step; larger ones are sampled


def _scannable(step: Any) -> bool:
    """One step's observation is a float array of at most MAX_SCAN_ELEMENTS values."""
    return isinstance(step, np.ndarray) and step.dtype.kind == "f" and step.size <= MAX_SCAN_ELEMENTS


def _float_array(values: Any) -> np.ndarray | None:
    """The episode's observations as one float array, or None when they are not one (a Dict,
    a Tuple, integers, images: nothing to scan at this tier)."""
    if isinstance(values, list) and values and _scannable(values[0]):
        try:
            values = np.asarray(values)
        except ValueError:   # ragged: the checked episodes' shape check says it
            return None
    if isinstance(values, np.ndarray) and values.ndim and _scannable(values[0]):
        return values
    return None


def _rewards(values: Any) -> np.ndarray | None:
    """The episode's rewards as floats; None when they are not real scalars (REWARD_NOT_SCALAR
    is the checked episodes' finding)."""
    try:
        r = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return r.reshape(-1) if r.ndim <= 1 or r.size == len(r) else None


def _all_finite(parts: list[Any], flat: bool) -> bool:
    """False when any part holds a NaN/inf; parts that are not float arrays of at most
    MAX_SCAN_ELEMENTS values a step are left out (True: nothing this tier can judge). The
    parts are joined and checked in one call (a call per episode cost more than the check)."""
    if flat:   # rewards: every part's, as floats
        try:
            try:
                joined = np.concatenate(parts)
            except ValueError:   # parts of different shapes: each flattened
                joined = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])
            return bool(np.isfinite(joined.astype(np.float64, copy=False)).all())
        except (TypeError, ValueError):   # not real scalars: REWARD_NOT_SCALAR is the checked episodes' finding
            return True
    first = parts[0] if parts else None
    if (isinstance(first, np.ndarray) and first.ndim and len(first) and first.dtype.kind == "f"
            and first[0].size <= MAX_SCAN_ELEMENTS):
        # the common case, held one-step samples most of all: float arrays of one shape a
        # step, joined as they are (a reshape per part cost more than the check)
        try:
            joined = np.concatenate(parts)
            if joined.dtype.kind == "f":
                return bool(np.isfinite(joined).all())
        except (ValueError, TypeError):   # other shapes or types among them: part by part below
            pass
    arrays: list[np.ndarray] = []    # NumPy episodes: (steps, ...) each
    steps: list[np.ndarray] = []     # list-held episodes: one array per step
    for p in parts:
        if isinstance(p, np.ndarray):
            if p.ndim and len(p) and p.dtype.kind == "f" and p.size <= MAX_SCAN_ELEMENTS * len(p):
                arrays.append(p.reshape(len(p), -1))
        elif isinstance(p, list) and p and _scannable(p[0]):
            steps += p
    if steps:
        try:
            arrays.append(np.asarray(steps).reshape(len(steps), -1))
        except ValueError:   # steps of different shapes: the checked episodes' shape check says it
            pass
    if not arrays:
        return True
    try:
        joined = np.concatenate(arrays)
    except ValueError:   # episodes of different widths: each on its own
        return all(bool(np.isfinite(a).all()) for a in arrays)
    return bool(np.isfinite(joined).all())


class SampleScan:
    """Scans each sample()'s episodes into a runner's :class:`FindingLog` (deduplicated with
    the checked episodes' findings by code and path). ``steps`` counts what was scanned."""

    def __init__(self, log: FindingLog, who: str = "") -> None:
        self.log, self.who = log, who
        self.steps = 0
        self.broken = False   # an episode type it cannot read: it stops, and the caller says so

    def scan(self, episodes: list[Any]) -> None:
        """:meth:`scan_parts` over a sample's episodes."""
        self.scan_parts(episode_parts(episodes))

    def scan_parts(self, parts: list[EpisodePart]) -> None:
        """One pass over the whole sample: every part's rewards and observations joined into
        one array each, straight from RLlib's buffers (the getters' per-episode slicing cost
        more than the check); only a sample holding a NaN is gone through part by part, to
        say where."""
        if not parts:
            return
        self.steps += sum(p.n for p in parts)
        rewards = parts_rows(parts, "rewards")
        if not _all_finite(rewards, flat=True):
            self._locate(parts, rewards, rewards=True)
        obs = parts_rows(parts, "observations", 1)
        if not _all_finite(obs, flat=False):
            self._locate(parts, obs, rewards=False)

    def _locate(self, parts: list[EpisodePart], values: list[Any], rewards: bool) -> None:
        for p, v in zip(parts, values):
            if rewards:
                r = _rewards(v)
                if r is not None and r.size and not np.isfinite(r).all():
                    self._reward(p.agent, r, p.n)
                    return
            else:
                obs = _float_array(v)
                if obs is not None and obs.size and not np.isfinite(obs).all():
                    self._obs(p.agent, obs, p.n)
                    return

    def _where(self, aid: str, i: int, n: int) -> str:
        agent = f"agent {aid}'s " if aid else "an "
        return f"{agent}episode of {n} sampled steps, at its step {i}"

    def _reward(self, aid: str, r: np.ndarray, n: int) -> None:
        bad = ~np.isfinite(r)
        i, k = int(np.argmax(bad)), int(bad.sum())
        self.log.hit(C.REWARD_NAN, "", lambda: (
            f"{self.who}reward {r[i]} in {self._where(aid, i, n)}: expected finite rewards, actual {k} non-finite "
            f"of {r.size} (found by the scan of every sampled step)",
            {"first_step": i, "non_finite": k, "steps_checked": int(r.size), "agent": aid or None,
             "tier": "sample_scan"}))

    def _obs(self, aid: str, obs: np.ndarray, n: int) -> None:
        rows = ~np.isfinite(obs.reshape(len(obs), -1)).all(axis=1)
        i, k = int(np.argmax(rows)), int(rows.sum())
        row = obs[i].ravel()
        path = "obs"
        self.log.hit(C.OBS_NAN_INF, path, lambda: (
            f"{self.who}{path} has NaN/inf: expected finite values, actual {int(np.isnan(row).sum())} NaN and "
            f"{int(np.isinf(row).sum())} inf value(s) in {self._where(aid, i, n)} (found by the scan of every "
            f"sampled step)",
            {"path": path, "first_step": i, "steps_bad": k, "steps_checked": int(len(obs)), "agent": aid or None,
             "tier": "sample_scan"}))
