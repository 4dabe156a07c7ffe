"""The flight recorder of a MultiAgentEnvRunner's sub-envs: what the single-agent recorder
(``runner/flight.py``) keeps, per agent.

A multi-agent vector step hands one dict per sub-env: the actions of the agents that act, the
observations of the agents that observe, the rewards of those paid. Agents get a column each,
in the order they first appear (their ids, ints or strings, are kept in the dump's manifest).
Per vector step, per sub-env, per agent: the action flattened to numbers (``actions``, NaN-padded
to the widest action) and whether the agent acted (``acted``); the observation's digest
(``digests``) and whether it was observed (``observed``); the reward (``rewards``, 0 where none
was paid). An agent's action shape and dtype are kept from its first action, so that the replay
hands the env the same kind of value. Actions that are not numbers (a Dict or Tuple space) stop
the recorder, which says so once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .flight import COMPACT_EVERY, FLIGHT_BYTES, FlightRecorder


class MultiAgentFlightRecorder(FlightRecorder):
    """See the module docstring; the single-agent recorder's interface (``on_reset``,
    ``on_step``, ``dump``, ``first_nonfinite``, ``failed_arrays``)."""

    COLUMNS = ("actions", "acted", "digests", "observed", "rewards")

    def __init__(self, n: int, cap_bytes: int = FLIGHT_BYTES, next_step: bool = True) -> None:
        super().__init__(n, cap_bytes, next_step)
        self.agents: list = []                   # agent ids, in the order they first appeared
        self._col: dict = {}                     # agent id -> its column
        self.action_kinds: dict[int, tuple] = {}  # column -> (shape, dtype) of its first action
        self._seen: dict = {}                    # (sub-env, agent) -> the last observation object handed in
        self._width = 1                          # the widest flattened action seen

    def _column_of(self, aid: Any) -> int:
        c = self._col.get(aid)
        if c is None:
            if isinstance(aid, bool) or not isinstance(aid, (str, int)):
                raise TypeError(f"agent id {aid!r} is neither a str nor an int: not recordable")
            c = self._col[aid] = len(self.agents)
            self.agents.append(aid)
        return c

    def _first_digest(self, obs: Any) -> Any:
        if not isinstance(obs, dict):
            return None
        out = {}
        for aid, x in obs.items():
            d = self.digest.of(np.asarray(x)[None], 1) if isinstance(x, np.ndarray) else None
            if d is not None:
                out[str(self._column_of(aid))] = float(d[0])
        return out or None

    def on_step(self, actions: Any, obs: Any, rewards: Any) -> None:
        """One vector step: the action dicts copied (their values flattened at once: small),
        the observations kept by reference (copied from the first one handed in again: a
        buffer the env writes in place), the rewards as floats."""
        cols, kinds, new = self._col, self.action_kinds, self._column_of
        acts = []
        for d in actions:
            row = {}
            for aid, a in (d.items() if isinstance(d, dict) else ()):
                c = cols.get(aid)
                if c is None:
                    c = new(aid)
                v = np.asarray(a, dtype=np.float64).ravel() if a.__class__ is not dict else None
                if c not in kinds:
                    kind = np.asarray(a)
                    if kind.dtype.kind not in "biuf":
                        raise TypeError(f"agent {aid!r}'s action is a {type(a).__name__}, not numbers: "
                                        f"not recordable")
                    kinds[c] = (list(kind.shape), kind.dtype.str)
                    self._width = max(self._width, v.size)
                row[c] = v
            acts.append(row)
        seen, copy, obs_rows = self._seen, self._copy_obs, []
        for i, d in enumerate(obs):
            row = {}
            for aid, x in (d.items() if isinstance(d, dict) else ()):
                c = cols.get(aid)
                if c is None:
                    c = new(aid)
                key = (i, c)
                if copy or seen.get(key) is x:
                    copy = self._copy_obs = True
                    seen[key] = x
                    x = np.array(x)
                else:
                    seen[key] = x
                row[c] = x
            obs_rows.append(row)
        rews = []
        for d in rewards:
            row = {}
            for aid, r in (d.items() if isinstance(d, dict) else ()):
                c = cols.get(aid)
                row[c if c is not None else new(aid)] = float(r)
            rews.append(row)
        self._acts.append(acts)
        self._obs.append(obs_rows)
        self._rews.append(rews)
        self.next_row += 1
        if len(self._acts) >= COMPACT_EVERY:
            self._compact()

    def _chunk_columns(self, k: int) -> dict[str, np.ndarray | None]:
        n, a, w = self.n, len(self.agents), self._width
        acts = np.full((k, n, a, w), np.nan)
        acted = np.zeros((k, n, a), dtype=np.uint8)
        dig = np.full((k, n, a), np.nan)
        observed = np.zeros((k, n, a), dtype=np.uint8)
        rew = np.zeros((k, n, a))
        by_agent: dict[int, list] = {}
        for s in range(k):
            for i in range(min(n, len(self._acts[s]))):
                for c, v in self._acts[s][i].items():
                    acts[s, i, c, :v.size] = v[:w]
                    acted[s, i, c] = 1
            for i in range(min(n, len(self._obs[s]))):
                for c, x in self._obs[s][i].items():
                    by_agent.setdefault(c, []).append((s, i, x))
            for i in range(min(n, len(self._rews[s]))):
                for c, r in self._rews[s][i].items():
                    rew[s, i, c] = r
        for c, items in by_agent.items():   # one product per agent and chunk
            try:
                d = self.digest.of(np.stack([np.asarray(x) for _, _, x in items]), len(items))
            except (ValueError, TypeError):   # observations of changing shapes: digested one by one
                d = np.array([(self.digest.of(np.asarray(x)[None], 1) if isinstance(x, np.ndarray) else None)
                              for _, _, x in items], dtype=object)
                d = np.array([float(v[0]) if v is not None else np.nan for v in d])
            if d is None:
                continue
            for (s, i, _), v in zip(items, d):
                dig[s, i, c] = v
                observed[s, i, c] = 1
        return {"actions": acts, "acted": acted, "digests": dig, "observed": observed, "rewards": rew}

    def _rows_of(self, name: str, arr: np.ndarray, a: int, b: int, i: int) -> list:
        """Rows of an older chunk padded to today's agents (and action width)."""
        rows = arr[a:b, i]
        pad = [(0, 0), (0, len(self.agents) - rows.shape[1])] + ([(0, self._width - rows.shape[2])]
                                                                  if name == "actions" else [])
        fill = np.nan if name in ("actions", "digests") else 0
        return list(np.pad(rows, pad, constant_values=fill))

    def _bad_rows(self, cols: dict, i: int, what: str) -> np.ndarray:
        arr = cols.get(what)
        if arr is None or arr.shape[1] <= i:
            return np.zeros(0, dtype=np.int64)
        bad = ~np.isfinite(arr[:, i])
        if what == "digests":
            bad &= cols["observed"][:, i].astype(bool)
        return np.flatnonzero(bad.any(axis=1))

    def failed_arrays(self, action: Any) -> dict[str, np.ndarray]:
        out = np.full((len(self.agents), self._width), np.nan)
        acted = np.zeros(len(self.agents), dtype=np.uint8)
        for aid, a in (action.items() if isinstance(action, dict) else ()):
            c = self._col.get(aid)
            v = np.asarray(a)
            if c is None or v.dtype.kind not in "biuf" or v.size > self._width:
                continue
            out[c, :v.size] = v.astype(np.float64).ravel()
            acted[c] = 1
        return {"failed_action": out, "failed_acted": acted}

    def _meta(self) -> dict:
        return {"multi_agent": True, "agents": list(self.agents),
                "action_kinds": {str(c): list(k) for c, k in self.action_kinds.items()}}
