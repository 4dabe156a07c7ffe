"""Sampled (state, action) pairs from an EnvRunner for the StateClusterer.

Nothing runs per env step: after ``sample()`` (small samples read together, see
:mod:`flow1_ray.runner.agent`), a share
``state_sample_rate`` of the steps of the returned episodes (already NumPy arrays) is
taken with one vectorised draw per episode, flattened to features (images pooled, so a
row is small) with its action index, whether that step terminated the episode (a
failure, which ERROR_FIXATION needs) and, for a Discrete action drawn from a
Categorical (PPO, APPO, IMPALA, SAC), the entropy and top probability of the policy at
that state (from ``action_dist_inputs``), which tell a cluster where the policy itself is
undecided from one whose states simply straddle a decision boundary. An epsilon-greedy
module (RLlib's DQN family: its episodes carry no Q-values) acts greedily with probability
1 - epsilon and uniformly otherwise: that mixture is its policy at every state, so its
entropy and top probability are those of the mixture at the module's current epsilon --
random by design while epsilon is high, never "undecided" once it has decayed.
With the rows go the names of their feature columns (from the observation space, for the
clusters' descriptions) and, for an image observation, a few real frames downscaled to
thumbnails (``clustering/frames.py``: at most ``FRAMES_PER_SEND`` per send, a uniform
sample chosen before any frame is touched, so a runner downscales a handful of frames per
send -- about ``FRAMES_PER_SEND * (1 + ln(rows / FRAMES_PER_SEND))`` over a send's takes --
never one per row: the runner's throughput is what flow1 must not cost).
Rows are buffered (bounded) and sent at most every
``send_every_s`` (option ``state_send_interval_s``) in one fire-and-forget call, so that
algorithms that call sample() many times a second (APPO, DQN) still make few calls; a
dropped call is counted.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from ..checks.env.episode_parts import EpisodePart, episode_parts, part_rows, parts_rows
from ..clustering.describe import features
from ..clustering.frames import FRAMES_PER_SEND, FrameBank, frame_leaf, leaf_of, thumbnails
from ..clustering.features import flatten_observations, is_frame_space
from ..clustering.state_action_map import action_index, policy_stats
from ..common.schema import DEFAULT_MODULE_ID as DEFAULT_MODULE
from .sender import Sender

MAX_BUFFERED_ROWS = 8192   # beyond this (the clusterer unreachable) the oldest rows are dropped, counted


def _fits(obs: Any, n: int, space: Any) -> bool:
    """Whether ``n`` rows of observations flatten under ``space`` to its named columns."""
    try:
        x = flatten_observations(obs, space)
        return x.ndim == 2 and x.shape == (n, len(features(space)))
    except Exception:
        return False


def _has_leaf(space: Any, kind: type) -> bool:
    if isinstance(space, spaces.Dict):
        return any(_has_leaf(s, kind) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(_has_leaf(s, kind) for s in space.spaces)
    return isinstance(space, kind)


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, dict):
        return {k: _concat([p[k] for p in parts]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_concat([p[i] for p in parts]) for i in range(len(first)))
    return np.concatenate(parts)


@functools.lru_cache(maxsize=64)
def _epsilon_greedy_stats(eps: float, n: int) -> tuple[float, float]:
    h, top = epsilon_greedy_stats(eps, n)
    return float(h), float(top)


def epsilon_greedy_stats(eps: float, n: int) -> np.ndarray:
    """(normalised entropy, top probability) of the epsilon-greedy policy over n actions:
    the greedy action with 1 - eps + eps/n, each other with eps/n."""
    top, rest = 1.0 - eps + eps / n, eps / n
    p = np.array([top] + [rest] * (n - 1), np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(p > 0, p * np.log(p), 0.0)) / np.log(n)
    return np.array([h, top], np.float32)




class _Stream:
    """The buffered rows of one RLModule (one per module: its states, its actions)."""

    def __init__(self, observation_space: Any, action_space: Any, module_of: Callable[[], Any] | None = None,
                 rng: np.random.Generator | None = None) -> None:
        """``module_of()`` gives the RLModule when it is needed (an EnvRunner builds its env,
        where sampling starts, before its module)."""
        self.obs_space, self.act_space, self.module_of = observation_space, action_space, module_of
        self.labels = action_index(np.asarray([action_space.sample()]), action_space)[1]  # ValueError if unsupported
        self.n_discrete = int(action_space.n) if isinstance(action_space, spaces.Discrete) else 0
        self._use_space(observation_space)
        self.fitted = False   # whether the episodes' observations were matched to a space (the first take)
        self.frames = FrameBank(FRAMES_PER_SEND, rng or np.random.default_rng())
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # x, action, failed, policy
        self.policy_kind: str | None = None   # "stochastic" (logits seen) or "epsilon_greedy"

    def _use_space(self, space: Any, names: list[tuple[str, str]] | None = None) -> None:
        self.obs_space = space
        self.image = is_frame_space(space)
        try:   # the columns' names, sent with the rows (once computed: a list of short strings)
            self.features: list[tuple[str, str]] | None = names or [(f.name, f.kind) for f in features(space)]
        except ValueError:   # a space take() will refuse too
            self.features = None
        self.leaf = frame_leaf(space) if isinstance(space, spaces.Space) else None

    def _fit(self, obs: Any, n: int) -> None:
        """Which space the episodes' observations are in, from the first rows read: the env's,
        or the RLModule's where an env-to-module connector wrote its output back into the
        episodes (RLlib's ``FlattenObservations`` does: a Dict observation arrives as one flat
        vector). A flat vector of the env's flattened width keeps the env's feature names
        (RLlib flattens a Dict in sorted key order and one-hots its Discrete leaves, as the
        names are made), unless a MultiDiscrete leaf makes the two layouts differ.
        ValueError when the rows fit neither space."""
        self.fitted = True
        if _fits(obs, n, self.obs_space):
            return
        module = self.module_of() if self.module_of is not None else None
        space = getattr(module, "observation_space", None)
        if space is None or space is self.obs_space or not _fits(obs, n, space):
            raise ValueError(f"the episodes' observations fit neither the env's observation space {self.obs_space} "
                             f"nor the RLModule's {space}")
        names = None
        if self.features and not _has_leaf(self.obs_space, spaces.MultiDiscrete) \
                and isinstance(space, spaces.Box) and len(space.shape) == 1 and space.shape[0] == len(self.features):
            names = self.features
        self._use_space(space, names)

    @property
    def rows(self) -> int:
        return sum(len(c[0]) for c in self.chunks)

    def take(self, parts: list[EpisodePart], rng: np.random.Generator, rate: float) -> int:
        """Each episode chunk is taken whole with probability ``rate``: every step has the
        same chance as when steps were drawn one by one, and only a ``rate`` share of the
        chunks is read. Their rows are read straight from RLlib's buffers where those are
        NumPy arrays (the getters' per-episode slicing cost more than the rest), and the
        policy's statistics are computed once over all the taken rows."""
        taken = [p for p, draw in zip(parts, rng.random(len(parts))) if draw < rate]
        if not taken:
            return 0
        obs, acts = parts_rows(taken, "observations"), parts_rows(taken, "actions")
        if not self.fitted:
            self._fit(obs[0], taken[0].n)
        fails, logits = [], []
        for p in taken:
            fails.append(np.zeros(p.n, bool))
            fails[-1][-1] = p.terminated
            logits.append(self._logits(p))
        if self.image:   # pooled episode by episode: no copy of every taken frame at full size
            x = np.concatenate([flatten_observations(o, self.obs_space) for o in obs])
        else:
            x = flatten_observations(_concat(obs), self.obs_space)
        a, _ = action_index(_concat(acts), self.act_space, labels=False)
        self.chunks.append((x, a, np.concatenate(fails), self._policy(logits, [len(f) for f in fails])))
        if self.leaf is not None:
            self.frames.offer(len(x), lambda rows: (x[rows], self._thumbnails(obs, [len(f) for f in fails], rows)))
        return len(x)

    def _thumbnails(self, obs: list[Any], lengths: list[int], rows: np.ndarray) -> np.ndarray:
        """Thumbnails of the taken rows ``rows`` (indices over the chunks' rows in order)."""
        ends = np.cumsum(lengths)
        chunk = np.searchsorted(ends, rows, side="right")
        path, space = self.leaf
        frames = [np.asarray(leaf_of(obs[c], path))[r - (ends[c] - lengths[c])] for c, r in zip(chunk, rows)]
        return thumbnails(np.stack(frames), space)

    def _logits(self, part: EpisodePart) -> np.ndarray | None:
        """The chunk's Categorical logits (n, actions), None where it has none (DQN)."""
        if self.n_discrete < 2 or "action_dist_inputs" not in part.episode.extra_model_outputs:
            return None   # no such output (epsilon-greedy): no exception raised and caught per chunk
        n = part.n
        try:
            z = part_rows(part, "action_dist_inputs")
        except Exception:   # no such output: epsilon-greedy or the count-based rules alone
            return None
        z = np.asarray(z)
        return z if z.ndim == 2 and z.shape == (n, self.n_discrete) else None

    def _policy(self, logits: list[np.ndarray | None], lengths: list[int]) -> np.ndarray:
        """(rows, 2): normalised entropy and top probability of the policy at each state;
        NaN where neither Categorical logits nor an epsilon are known."""
        if logits and all(z is not None for z in logits):
            self.policy_kind = "stochastic"
            return policy_stats(np.concatenate(logits))
        if self.n_discrete >= 2 and not any(z is not None for z in logits):   # DQN: one epsilon for all
            eps = self.epsilon()
            if eps is not None:
                self.policy_kind = "epsilon_greedy"
                stats = np.asarray(_epsilon_greedy_stats(round(eps, 3), self.n_discrete), np.float32)
                return np.tile(stats, (sum(lengths), 1))
        parts = []
        eps: float | None = None
        eps_read = False   # read once: the module's schedule is the same for every chunk
        for z, n in zip(logits, lengths):
            if z is not None:
                self.policy_kind = "stochastic"
                parts.append(policy_stats(z))
                continue
            if not eps_read and self.n_discrete >= 2:
                eps, eps_read = self.epsilon(), True
            if eps is not None:
                self.policy_kind = "epsilon_greedy"
                # a decaying epsilon is new at every call: to 3 decimals, its stats are the same
                parts.append(np.tile(np.asarray(_epsilon_greedy_stats(round(eps, 3), self.n_discrete), np.float32),
                                     (n, 1)))
            else:
                parts.append(np.full((n, 2), np.nan, np.float32))
        return np.concatenate(parts)

    def epsilon(self) -> float | None:
        """The module's current exploration epsilon, if it is epsilon-greedy (None otherwise)."""
        schedule = getattr(self.module_of() if self.module_of else None, "epsilon_schedule", None)
        if schedule is None:
            return None
        try:
            return float(np.clip(float(schedule.get_current_value()), 0.0, 1.0))
        except Exception:
            return None

    def payload(self) -> dict:
        x, a, failed, policy = (np.concatenate(col) for col in zip(*self.chunks))
        frames = self.frames.take()   # a send starts the next sample of frames (lost with a dropped call)
        return {"x": x, "a": a, "fail": failed, "policy": policy, "labels": self.labels,
                "policy_kind": self.policy_kind, "features": self.features,
                "frames": None if frames is None else {"x": frames[0], "img": frames[1]}}


class StateSampler:
    """Thins each sample()'s episodes into rows per RLModule: a single-agent runner's
    episodes belong to ``default_policy``; a multi-agent runner's MultiAgentEpisodes are
    split per agent and routed to the module that agent is mapped to, so each module's
    states are clustered with its own actions. ``resolve(module_id)`` gives a module's
    (observation space, action space, RLModule); a module whose spaces the clusterer cannot
    take is left out (listed in :attr:`unsupported`) and costs the others nothing."""

    def __init__(self, observation_space: Any, action_space: Any, rate: float, sender: Sender,
                 seed: int = 0, send_every_s: float = 2.0, module_of: Callable[[], Any] | None = None,
                 resolve: Callable[[str], tuple[Any, Any, Any]] | None = None) -> None:
        """``observation_space``/``action_space``/``module_of``: the single-agent stream (its
        action space is checked here: ValueError if unsupported); ``resolve(module_id)``:
        (observation space, action space, RLModule) of the others (multi-agent)."""
        self.rate = rate
        self.send_every_s = send_every_s
        self.sender = sender
        self.rng = np.random.default_rng(seed)
        self.resolve = resolve
        self.streams: dict[str, _Stream] = {}
        self.unsupported: dict[str, str] = {}     # module id -> why it is left out (its spaces)
        self.failed: dict[str, BaseException] = {}   # module id -> what stopped its rows being read
        if observation_space is not None:
            self.streams[DEFAULT_MODULE] = _Stream(observation_space, action_space, module_of, self.rng)
        self.buffered = 0
        self._last_send = time.monotonic()

    @property
    def labels(self) -> list[str]:
        return self.streams[DEFAULT_MODULE].labels

    def _stream(self, module_id: str) -> _Stream | None:
        st = self.streams.get(module_id)
        if st is None and module_id not in self.unsupported and module_id not in self.failed \
                and self.resolve is not None:
            try:
                obs_space, act_space, module = self.resolve(module_id)
                st = self.streams[module_id] = _Stream(obs_space, act_space, lambda: module, self.rng)
            except Exception as e:
                self.unsupported[module_id] = f"{type(e).__name__}: {e}"[:300]
        return st

    def add(self, episodes: list[Any]) -> int:
        """:meth:`add_parts` of a sample's episodes."""
        return self.add_parts(episode_parts(episodes))

    def add_parts(self, parts: list[EpisodePart]) -> int:
        """Take the share of rows of these episode chunks; returns how many were taken."""
        if self.rate <= 0:
            return 0
        by_module: dict[str, list[EpisodePart]] = {}
        for p in parts:
            by_module.setdefault(p.module, []).append(p)
        taken = 0
        for mid, eps in by_module.items():
            st = self._stream(mid)
            if st is None:
                continue
            try:
                taken += st.take(eps, self.rng, self.rate)
            except Exception as e:  # rows it could not read: this module's maps stop, said as a watcher off
                self.failed[mid] = e
                del self.streams[mid]
        self.buffered += taken
        while self.buffered > MAX_BUFFERED_ROWS:
            # the clusterer has been unreachable: the oldest chunk goes, counted like a
            # dropped call (it reaches the Recorder as SAMPLES_DROPPED with the next send)
            spare = [st for st in self.streams.values() if len(st.chunks) > 1]  # each keeps its newest chunk
            if not spare:
                break
            self.buffered -= len(max(spare, key=lambda st: st.rows).chunks.pop(0)[0])
            self.sender.dropped += 1
        return taken

    def batch(self) -> dict:
        """The buffered rows as one payload of the StateClusterer's ``ingest``: one entry per module."""
        return {"modules": {mid: st.payload() for mid, st in self.streams.items() if st.chunks}}

    def maybe_send(self) -> bool | None:
        """Send the buffer if ``send_every_s`` passed since the last send; see ``Sender.call``."""
        now = time.monotonic()
        if not self.buffered or now - self._last_send < self.send_every_s:
            return None
        self._last_send = now    # reachable or not, the next try is one interval away
        if not self.sender.reachable():   # keep the (bounded) buffer; no payload built for nothing
            return None
        ok = self.sender.call(self.batch())
        if ok is None:
            return None
        for st in self.streams.values():
            st.chunks = []
        self.buffered = 0
        return ok
