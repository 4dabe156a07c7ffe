"""The cheap tier of the live contract checks: every step of every episode a runner sampled.

The per-step checks see only a share of the episodes (:mod:`flow1_ray.runner.budget`); a fault
that happens once (a NaN at one step) would be found with that share's probability. What
RLlib already recorded in the sample's episodes is scanned whole at ``on_sample_end``, one
vectorised pass per episode: NaN/inf in a float observation (OBS_NAN_INF) and NaN/inf
rewards (REWARD_NAN). These are the values after the vector env (and after any env-to-module
connector that writes back into episodes); dtypes, shapes, infos and bounds stay with the
checked episodes, where the env's raw values are seen, and so do observations of more than
``MAX_SCAN_ELEMENTS`` values a step (images: a pass over every frame would cost more than the
checks it replaces). Pure numpy over RLlib's episode API.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import codes as C
from .findings import FindingLog

MAX_SCAN_ELEMENTS = 1024   # observation values per step scanned at every step; larger ones are sampled


def _single_episodes(episodes: list[Any]) -> list[tuple[str, Any]]:
    """(agent id or "", single-agent episode) of single- and multi-agent episodes."""
    out: list[tuple[str, Any]] = []
    for ep in episodes:
        agents = getattr(ep, "agent_episodes", None)
        if isinstance(agents, dict):
            out.extend((str(aid), sa) for aid, sa in agents.items())
        else:
            out.append(("", ep))
    return out


def _float_array(values: Any) -> np.ndarray | None:
    """The episode's observations as one float array, or None when they are not one (a Dict,
    a Tuple, integers: nothing to scan at this tier)."""
    if isinstance(values, np.ndarray):
        arr = values
    elif isinstance(values, list) and values and isinstance(values[0], np.ndarray):
        if values[0].dtype.kind != "f" or values[0].size > MAX_SCAN_ELEMENTS:
            return None
        try:
            arr = np.asarray(values)
        except ValueError:   # ragged: the checked episodes' shape check says it
            return None
    else:
        return None
    if arr.dtype.kind != "f" or arr.ndim == 0 or arr[0].size > MAX_SCAN_ELEMENTS:
        return None
    return arr


def _rewards(values: Any) -> np.ndarray | None:
    """The episode's rewards as floats; None when they are not real scalars (REWARD_NOT_SCALAR
    is the checked episodes' finding)."""
    try:
        r = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return r.reshape(-1) if r.ndim <= 1 or r.size == len(r) else None


class SampleScan:
    """Scans each sample()'s episodes into a runner's :class:`FindingLog` (deduplicated with
    the checked episodes' findings by code and path). ``steps`` counts what was scanned."""

    def __init__(self, log: FindingLog, who: str = "") -> None:
        self.log, self.who = log, who
        self.steps = 0
        self.broken = False   # an episode type it cannot read: it stops, and the caller says so

    def scan(self, episodes: list[Any]) -> None:
        for aid, ep in _single_episodes(episodes):
            n = len(ep)
            if n == 0:
                continue
            self.steps += n
            r = _rewards(ep.get_rewards())
            if r is not None and r.size and not np.isfinite(r).all():
                self._reward(aid, r, n)
            obs = _float_array(ep.get_observations())
            if obs is not None and obs.size and not np.isfinite(obs).all():
                self._obs(aid, obs, n)

    def _where(self, aid: str, i: int, n: int) -> str:
        agent = f"agent {aid}'s " if aid else ""
        return f"{self.who}{agent}episode of {n} sampled steps, at its step {i}"

    def _reward(self, aid: str, r: np.ndarray, n: int) -> None:
        bad = ~np.isfinite(r)
        i, k = int(np.argmax(bad)), int(bad.sum())
        self.log.hit(C.REWARD_NAN, "", lambda: (
            f"reward {r[i]} in a {self._where(aid, i, n)}: expected finite rewards, actual {k} non-finite of {r.size} "
            f"(found by the scan of every sampled step)",
            {"first_step": i, "non_finite": k, "steps_checked": int(r.size), "agent": aid or None,
             "tier": "sample_scan"}))

    def _obs(self, aid: str, obs: np.ndarray, n: int) -> None:
        rows = ~np.isfinite(obs.reshape(len(obs), -1)).all(axis=1)
        i, k = int(np.argmax(rows)), int(rows.sum())
        row = obs[i].ravel()
        path = "obs"
        self.log.hit(C.OBS_NAN_INF, path, lambda: (
            f"{path} has NaN/inf: expected finite values, actual {int(np.isnan(row).sum())} NaN and "
            f"{int(np.isinf(row).sum())} inf value(s) in a {self._where(aid, i, n)} (found by the scan of every "
            f"sampled step)",
            {"path": path, "first_step": i, "steps_bad": k, "steps_checked": int(len(obs)), "agent": aid or None,
             "tier": "sample_scan"}))
