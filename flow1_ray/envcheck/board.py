"""The call board of an isolated check: a few int64 slots in a file that the child process
(:mod:`flow1_ray.envcheck.child`) writes before each env call and its parent
(:mod:`flow1_ray.envcheck.supervise`) polls, so the parent knows which call runs, for how long,
and which call a dead child died in. Also the names of the calls (the phases) the slots hold.
Used by :mod:`flow1_ray.envcheck.isolate`, :mod:`~flow1_ray.envcheck.child` and
:mod:`~flow1_ray.envcheck.supervise`.
"""

from __future__ import annotations

import mmap

#: what the child is doing, as the shared page says it
CALLS = ("checks", "start", "import", "make", "reset", "step", "close", "audit_read", "audit_copy", "audit_try")
#: the reward audit's calls (``flow1 check --audit-reward``): reading the env's attributes, copying
#: the env, stepping a copy; under the step timeout, and a hang or death there is the audit's
AUDIT_CALLS = frozenset(("audit_read", "audit_copy", "audit_try"))
PHASE = {c: i for i, c in enumerate(CALLS)}
ENV_CALLS = frozenset(PHASE[c] for c in ("import", "make", "reset", "step"))
SLOT_SEQ, SLOT_CALL, SLOT_STEPS, SLOT_EPISODES, SLOT_THREAD = range(5)
SLOTS = 8


class Board:
    """A few int64 slots in a file mapped by both processes (fork or spawn alike)."""

    def __init__(self, path: str, create: bool = False) -> None:
        self.path = path
        if create:
            with open(path, "wb") as f:
                f.write(b"\0" * 8 * SLOTS)
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), 8 * SLOTS)
        self.v = memoryview(self._map).cast("q")

    def close(self) -> None:
        self.v.release()
        self._map.close()
        self._file.close()
