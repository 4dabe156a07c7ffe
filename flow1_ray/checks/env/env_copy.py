"""Copies of an env for the reward-logic audit's counterfactual steps, bounded by the env's
size, not by the clock.

The audit (:mod:`flow1_ray.checks.env.reward_logic`) steps a copy of the env with another
action to tell whether a change happened whatever the action. A copy is ``copy.deepcopy`` of
``env.unwrapped``. Whether copies are taken must not depend on how busy the machine is (a
copy timed at 52 ms against a 50 ms limit flipped a FAIL to a WARN with the load), so the
limit is the copy's size, which is the env's: the objects a deepcopy made (its memo) with the
items of the containers among them, and the bytes of its arrays (``COPY_MAX_OBJECTS``,
``COPY_MAX_BYTES``), and all the values copied in the audit (``COPY_MAX_TOTAL_OBJECTS``) and the
copies (``COPY_MAX_COPIES``).
The one clock-based stop is far from any env's copy under these limits: a copy taking more
than ``COPY_MAX_CPU_S`` of this thread's CPU, twice in a row (a copy of state held in C that a
memo does not count: a simulator that copies itself).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from .attributes import same
from .machine_load import gc_pause_s

COPY_MAX_OBJECTS = 20_000         # values one copy may make (objects in a deepcopy's memo, items of its containers)
COPY_MAX_BYTES = 64 << 20         # bytes of the arrays in one copy
COPY_MAX_TOTAL_OBJECTS = 2_000_000   # values all the copies of one audit may make
COPY_MAX_COPIES = 2000            # copies taken in all
COPY_MAX_CPU_S = 1.0              # a copy over this much CPU time (twice in a row) ends the copying
COPY_SLOW_IN_A_ROW = 2            # ... one slow copy may be a collector's pass


class EnvCopier:
    """Takes copies of one env until a limit says no more; ``error`` says why not (the first
    reason, said once), ``copies``, ``objects`` and ``seconds`` what they cost."""

    def __init__(self) -> None:
        self.error = ""
        self.copies = 0
        self.objects = 0
        self.seconds = 0.0
        self._slow = 0

    @property
    def able(self) -> bool:
        return not self.error and self.copies < COPY_MAX_COPIES

    def take(self, env: Any) -> Any:
        """A deep copy of ``env.unwrapped``, or None (and ``error`` set) when it cannot be or
        must not be taken. Exceptions of the env's ``__deepcopy__`` are caught; a crash or a
        hang is the caller's to bound (flow1 check: the check process's step timeout)."""
        if not self.able:
            return None
        t0, c0, g0 = time.perf_counter(), time.thread_time(), gc_pause_s()
        memo: dict[int, Any] = {}
        try:
            out = copy.deepcopy(getattr(env, "unwrapped", env), memo)
        except Exception as e:   # an env holding a lock, a socket, a simulator handle
            first = (str(e).strip().splitlines() or [""])[0]
            self.error = f"copy.deepcopy(env.unwrapped) raised {type(e).__name__}: {first}"[:300]
            return None
        finally:
            self.copies += 1
            self.seconds += time.perf_counter() - t0
        cpu = max(0.0, time.thread_time() - c0 - (gc_pause_s() - g0))
        made, nbytes = _size(memo)
        self.objects += made
        if made > COPY_MAX_OBJECTS or nbytes > COPY_MAX_BYTES:
            self.error = (f"a copy of the env is {made:,} values (objects and the items of its containers) and "
                          f"{nbytes / 2**20:.1f} MB of arrays, over the limit of {COPY_MAX_OBJECTS:,} values and "
                          f"{COPY_MAX_BYTES >> 20} MB")
            return None
        if self.objects > COPY_MAX_TOTAL_OBJECTS:
            self.error = (f"the copies made {self.objects:,} objects, the audit's budget of "
                          f"{COPY_MAX_TOTAL_OBJECTS:,} ({self.copies} copies)")
        self._slow = self._slow + 1 if cpu > COPY_MAX_CPU_S else 0
        if self._slow >= COPY_SLOW_IN_A_ROW and not self.error:
            self.error = (f"copying the env took {cpu:.1f} s of CPU ({COPY_SLOW_IN_A_ROW} copies in a row over "
                          f"the limit of {COPY_MAX_CPU_S:g} s)")
        return out

    def void(self, why: str) -> None:
        """No more copies (a copy that shares the env's state: its tries say nothing)."""
        self.error = self.error or why


def _size(memo: dict[int, Any]) -> tuple[int, int]:
    """(values, array bytes) of one deepcopy from its memo: the objects it made and the items
    of the containers among them (a dict of 200,000 strings is 200,000 values: strings are not
    memoised), and the bytes of its arrays. The memo's own keep-alive list is left out."""
    keep = memo.get(id(memo))
    values = nbytes = 0
    for v in memo.values():
        if v is keep:
            continue
        values += 1
        if type(v) in (dict, list, tuple, set, frozenset):
            values += len(v)
        elif isinstance(v, np.ndarray):
            nbytes += v.nbytes
    return values, nbytes


def other_action(env_copy: Any, space: Any, action: Any) -> Any:
    """An action other than ``action`` for the copy's counterfactual step (None if none is
    found in 16 draws); a multi-agent env's: the same agents, each with an action from its
    own space, not all of them the same as before."""
    if isinstance(action, dict):
        spaces = {a: _agent_space(env_copy, space, a) for a in action}
        if any(s is None for s in spaces.values()):
            return None
        differs = lambda alt: any(not same(alt[a], action[a]) for a in action)   # noqa: E731
        draw = lambda: {a: s.sample() for a, s in spaces.items()}                 # noqa: E731
    else:
        own = getattr(env_copy, "action_space", None) or space
        differs = lambda alt: not same(alt, action)                                # noqa: E731
        draw = own.sample
    for _ in range(16):
        try:
            alt = draw()
        except Exception:
            return None
        if differs(alt):
            return alt
    return None


def _agent_space(env: Any, space: Any, agent: Any) -> Any:
    """One agent's action space in a multi-agent env (RLlib's ``get_action_space``, a
    PettingZoo-style ``action_spaces`` dict, or a Dict space keyed by agent); None if none."""
    for get in (lambda: env.get_action_space(agent), lambda: env.action_spaces[agent], lambda: space[agent]):
        try:
            out = get()
        except Exception:
            continue
        if out is not None and hasattr(out, "sample"):
            return out
    return None
