"""A sampled episode chunk as it was when ``sample()`` returned it: what the scan and the state
sampling read, fixed then so that they can read it later.

An algorithm that samples one step per ``sample()`` call (RLlib's DQN and SAC by default) calls
it hundreds of times a second; flow1 holds those small samples and reads them together
(:class:`flow1_ray.runner.agent.RunnerAgent`). Between the return and the read, RLlib may
change an episode object it returned: a local replay buffer concatenates the next chunk of the same
episode into the chunk it stored first (its length grows, ``is_terminated`` may turn true,
its buffers are replaced by longer arrays). So each part keeps its length and termination as
they were at the return, and readers take the first ``n`` steps past the lookback, which the
concatenation leaves in place.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...common.schema import DEFAULT_MODULE_ID


class EpisodePart(NamedTuple):
    agent: str          # "" for a single-agent episode
    module: str         # the RLModule that acted (DEFAULT_MODULE_ID for a single-agent runner)
    episode: Any        # a SingleAgentEpisode (an agent's, for a multi-agent episode)
    n: int              # its steps when sample() returned it
    terminated: bool    # its is_terminated then


def episode_parts(episodes: list[Any]) -> list[EpisodePart]:
    """The non-empty single-agent episodes of single- and multi-agent episodes, as parts."""
    out: list[EpisodePart] = []
    for ep in episodes:
        agents = getattr(ep, "agent_episodes", None)
        if isinstance(agents, dict):
            for aid, sa in agents.items():
                n = len(sa)
                if n:
                    out.append(EpisodePart(str(aid), str(ep.module_for(aid)), sa, n, bool(sa.is_terminated)))
            continue
        n = len(ep)
        if n:
            out.append(EpisodePart("", DEFAULT_MODULE_ID, ep, n, bool(ep.is_terminated)))
    return out


def take(values: Any, idx: Any) -> Any:
    """``values[idx]`` through dicts, tuples and lists of arrays (a Dict or Tuple space's leaves)."""
    if isinstance(values, dict):
        return {k: take(v, idx) for k, v in values.items()}
    if isinstance(values, (tuple, list)):
        return type(values)(take(v, idx) for v in values)
    a = np.asarray(values)
    return a[idx] if a.ndim else a


def parts_rows(parts: list[EpisodePart], name: str, extra: int = 0) -> list[Any]:
    """:func:`part_rows` of each part, in one loop: the views of RLlib's NumPy buffers taken
    inline (hundreds of one-step parts are read together; a call per part cost more than the
    view), any other buffer through :func:`part_rows`."""
    out = []
    ndarray = np.ndarray
    for p in parts:
        buf = getattr(p.episode, name, None)
        data, lookback = getattr(buf, "data", None), getattr(buf, "lookback", None)
        end = (lookback + p.n + extra) if type(lookback) is int else -1
        if type(data) is ndarray and end >= 0 and len(data) >= end:
            out.append(data[lookback:end])
        else:
            out.append(part_rows(p, name, extra))
    return out


def part_rows(part: EpisodePart, name: str, extra: int = 0) -> Any:
    """The part's first ``n + extra`` values of ``name`` (observations, actions, rewards, or an
    extra model output such as ``action_dist_inputs``; ``extra=1`` with observations: the
    observation after the last step too): a view of RLlib's buffer past its lookback where
    that buffer is one NumPy array, else what the episode's getter returns for those steps."""
    ep, n = part.episode, part.n + extra
    buf = ep.extra_model_outputs.get(name) if name == "action_dist_inputs" else getattr(ep, name, None)
    data, lookback = getattr(buf, "data", None), getattr(buf, "lookback", None)
    if isinstance(data, np.ndarray) and isinstance(lookback, int) and len(data) >= lookback + n:
        return data[lookback:lookback + n]
    if name == "observations":
        return take(ep.get_observations(slice(0, n)), slice(None))
    if name == "actions":
        return take(ep.get_actions(slice(0, n)), slice(None))
    if name == "rewards":
        return np.asarray(ep.get_rewards(slice(0, n)))
    return np.asarray(ep.get_extra_model_outputs(name))[:n]
