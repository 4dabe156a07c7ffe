"""The flight recorder of an EnvRunner: what makes a sub-env's episode happen again elsewhere.

Per sub-env, the episode's start: the ``seed`` and ``options`` its reset was called with, the
state of the env's own random generator just before that reset (``np_random``'s bit generator:
a reset without a seed, as gymnasium's autoreset calls it, continues from there) and a digest
of the first observation. Then, per vector step, one row for all sub-envs: the actions sent,
a digest of each observation and each reward. A digest is the observation projected on a
fixed random vector (one matrix product per vector step, whatever the number of sub-envs):
enough to say at which step a replay first differs, and NaN where the observation held a
NaN. Observations that are not one numeric array (a Dict space) get no digest.

Bounded by bytes (``cap_bytes`` per runner): the oldest rows go first; a sub-env whose
episode started before the oldest row kept has its last actions only, and its dump says the
replay cannot start from the reset. Nothing here is sent anywhere: :meth:`dump` hands the
caller a sub-env's episode as numbers and JSON-able metadata (``rundir/repro.py`` writes it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..rundir.repro import Digest

#: bytes of rows kept per runner (actions, digests, rewards of every sub-env)
FLIGHT_BYTES = 8 * 1024**2


def rng_state(env: Any) -> dict | None:
    """The env's ``np_random`` bit generator's state (a dict of numbers), or None where the env
    has no numpy generator (its randomness is its own, or global)."""
    gen = getattr(getattr(env, "unwrapped", env), "_np_random", None)
    try:
        state = gen.bit_generator.state if gen is not None else None
    except Exception:
        return None
    return _jsonable(state) if isinstance(state, dict) else None


def unseeded_first(env: Any) -> bool:
    """Whether a reset without a seed would seed the env's generator from the OS's entropy
    (its first): the recorder then draws that seed itself, so the episode can be replayed."""
    return getattr(getattr(env, "unwrapped", env), "_np_random", 0) is None


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


#: episodes kept per sub-env (their starts); a sub-env with more is replayed from its last episode
MAX_EPISODES = 2000
#: vector steps kept as references before they become one chunk of arrays (its digests computed
#: in one product): per step, three list appends; measured 20 us a step digesting each step alone
COMPACT_EVERY = 64


class FlightRecorder:
    """See the module docstring. ``on_reset`` from each sub-env's reset, ``on_step`` after
    each vector step; ``dump(i)`` is what replays sub-env ``i`` to now: its whole life since
    it was made where the rows still hold it (an env whose fault depends on what it kept from
    earlier episodes replays too), else its current episode. ``next_step``: gymnasium's
    NEXT_STEP autoreset (a reset has a vector step of its own), else SAME_STEP."""

    def __init__(self, n: int, cap_bytes: int = FLIGHT_BYTES, next_step: bool = True) -> None:
        self.n = n
        self.cap = int(cap_bytes)
        self.next_step = next_step
        self.chunks: deque = deque()    # (first row, {column: array or None}, bytes): COMPACT_EVERY rows each
        self.first_row = 0              # the absolute index of the oldest row kept
        self.next_row = 0               # the absolute index of the next row
        self.bytes = 0
        self._acts: list = []           # the rows since the last chunk: references, made a chunk together
        self._obs: list = []
        self._rews: list = []
        self._last_obs: Any = None      # the last observation array handed in (a reused buffer is seen by it)
        self._copy_obs = False
        self.episodes: list[list[dict]] = [[] for _ in range(n)]   # per sub-env: its episodes' starts
        self.whole_life = [True] * n    # the sub-env's first episode is still among its episodes
        self.digest = Digest()
        self.off: str | None = None     # why the recorder stopped (a failure of its own)
        self.pending: Any = None        # the actions of the vector step under way (a hang's)

    def on_reset(self, i: int, seed: Any, options: Any, state: dict | None, obs: Any, in_step: bool) -> None:
        """Sub-env ``i`` reset; ``in_step``: inside a vector step (an autoreset)."""
        eps = self.episodes[i]
        if eps and eps[-1]["end"] is None:   # the episode before ends where this one begins
            eps[-1]["end"] = self.next_row + (0 if (in_step and self.next_step) or not in_step else 1)
        eps.append({"row": self.next_row + (1 if in_step else 0), "end": None,
                    "seed": seed if isinstance(seed, int) else None,
                    "options": options if isinstance(options, dict) else None, "rng_state": state,
                    "first_digest": self._first_digest(obs)})
        if len(eps) > MAX_EPISODES or eps[0]["row"] < self.first_row:
            self._prune(i)

    def _first_digest(self, obs: Any) -> Any:
        first = self.digest.of(np.asarray(obs)[None] if isinstance(obs, np.ndarray) else None, 1)
        return float(first[0]) if first is not None else None

    def _prune(self, i: int) -> None:
        eps = self.episodes[i]
        while len(eps) > 1 and (len(eps) > MAX_EPISODES or eps[0]["row"] < self.first_row):
            eps.pop(0)
            self.whole_life[i] = False

    def on_step(self, actions: Any, obs: Any, rewards: Any) -> None:
        """One vector step: the actions and rewards copied (small), the observations kept by
        reference, copied from the first step a caller hands the same array again (a buffer
        written in place); every COMPACT_EVERY steps they become one chunk of arrays, the
        digests computed together."""
        acts, o, rews = self._acts, self._obs, self._rews
        if obs is self._last_obs:
            self._copy_obs = True
        self._last_obs = obs
        acts.append(np.array(actions))
        o.append(np.copy(obs) if self._copy_obs or not o and self.next_row == 0 else obs)
        rews.append(np.array(rewards, dtype=np.float64))
        self.next_row += 1
        if len(acts) >= COMPACT_EVERY:
            self._compact()

    #: the arrays of a chunk (and of a dump), one row per vector step, the sub-env on axis 1
    COLUMNS = ("actions", "digests", "rewards")

    def _compact(self) -> None:
        if not self._acts:
            return
        k = len(self._acts)
        start = self.next_row - k
        cols = self._chunk_columns(k)
        self._acts, self._obs, self._rews = [], [], []
        size = sum(a.nbytes for a in cols.values() if a is not None) + 200
        self.chunks.append((start, k, cols, size))
        self.bytes += size
        while self.bytes > self.cap and len(self.chunks) > 1:
            old = self.chunks.popleft()
            self.bytes -= old[3]
            self.first_row = self.chunks[0][0]

    def _chunk_columns(self, k: int) -> dict[str, np.ndarray | None]:
        try:
            acts = np.stack([np.asarray(a) for a in self._acts])
        except (ValueError, TypeError):   # actions that are not one array per step
            acts = None
        try:
            obs = np.stack(self._obs)
            dig = self.digest.of(obs.reshape((k * self.n,) + obs.shape[2:]), k * self.n)
            dig = dig.reshape(k, self.n) if dig is not None else None
        except (ValueError, TypeError):
            dig = None
        try:
            rew = np.asarray(self._rews, dtype=np.float64).reshape(k, -1)
        except (ValueError, TypeError):
            rew = None
        return {"actions": acts, "digests": dig, "rewards": rew}

    def _rows_of(self, name: str, arr: np.ndarray, a: int, b: int, i: int) -> list:
        """Rows ``a:b`` of sub-env ``i`` in one chunk's column."""
        return list(arr[a:b, i])

    def _column(self, i: int, lo: int, hi: int) -> dict[str, list]:
        out: dict[str, list] = {name: [] for name in self.COLUMNS}
        for start, k, cols, _ in self.chunks:
            a, b = max(lo, start) - start, min(hi, start + k) - start
            if b <= a:
                continue
            for name in self.COLUMNS:
                arr = cols.get(name)
                out[name].extend(self._rows_of(name, arr, a, b, i) if arr is not None and arr.shape[1] > i
                                 else [None] * (b - a))
        return out

    def _bad_rows(self, cols: dict, i: int, what: str) -> np.ndarray:
        arr = cols.get(what)
        if arr is None or arr.shape[1] <= i:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(~np.isfinite(arr[:, i]))

    def first_nonfinite(self, i: int, what: str = "digests") -> int | None:
        """The absolute row of sub-env ``i``'s first non-finite observation digest (or reward:
        ``what="rewards"``) among the rows kept, or None."""
        self._compact()
        for start, _, cols, _ in self.chunks:
            bad = self._bad_rows(cols, i, what)
            if bad.size:
                return start + int(bad[0])
        return None

    def failed_arrays(self, action: Any) -> dict[str, np.ndarray]:
        """The arrays of a dump that name the action its failing step was called with."""
        return {"failed_action": np.asarray(action)}

    def _meta(self) -> dict:
        """What a dump's manifest says of the recording beyond its episodes."""
        return {}

    def dump(self, i: int) -> dict | None:
        """``arrays``: ``actions``, ``digests``, ``rewards`` (one row per step replayed) and
        ``episode_starts`` (each episode's first row among them); ``meta``: ``episodes`` (each
        one's seed, options, first digest), the first one's ``rng_state``, ``from`` ("creation"
        or "episode"), ``whole`` (False: the episode began before the rows kept), ``steps``."""
        self._compact()
        eps = [e for e in self.episodes[i] if e["row"] >= self.first_row] or self.episodes[i][-1:]
        if not eps:
            return None
        life = self.whole_life[i] and eps[0] is self.episodes[i][0] and eps[0]["row"] >= self.first_row
        if not life:
            eps = eps[-1:]
        cols: dict[str, list] = {name: [] for name in self.COLUMNS}
        starts, rows = [], []
        for e in eps:
            lo = max(e["row"], self.first_row)
            hi = e["end"] if e["end"] is not None else self.next_row
            starts.append(len(cols["actions"]))
            for name, col in self._column(i, lo, hi).items():
                cols[name].extend(col)
            rows.extend(range(lo, lo + len(cols["actions"]) - starts[-1]))
        arrays: dict[str, np.ndarray] = {"episode_starts": np.asarray(starts, dtype=np.int64)}
        for name, col in cols.items():
            if col and all(x is not None for x in col):
                arrays[name] = np.stack(col) if name != "digests" and name != "rewards" else \
                    np.asarray(col, dtype=np.float64)
        last = eps[-1]
        whole = last["row"] >= self.first_row
        meta = {"from": "creation" if life else "episode", "whole": whole, "steps": len(cols["actions"]),
                "episode_steps": len(cols["actions"]) - starts[-1],
                "dropped_steps": 0 if whole else self.first_row - last["row"], "sub_env": i,
                "rng_state": eps[0]["rng_state"],
                "episodes": [{k: e[k] for k in ("seed", "options", "first_digest")} for e in eps], **self._meta()}
        return {"arrays": arrays, "meta": meta, "rows": rows}   # rows: each step's absolute row (not written)
