"""Ray's own words on dead worker processes: the exit type and detail the GCS worker table
holds for them (:func:`ray_exit_details`), and :class:`ExitLookup`, which retries a lookup
while the GCS has not recorded the deaths yet, on a thread of its own and within
:data:`GCS_LOOKUP_DEADLINE_S`. Used by monitor.py: its details thread sends Ray's words as a
WORKER_EXIT_DETAIL row after the WORKER_DIED it has already sent.
"""

from __future__ import annotations

import threading
import time
from typing import Any

GCS_LOOKUP_TRIES = 5
GCS_LOOKUP_WAIT_S = 0.1
#: the most one lookup waits for Ray's exit detail of a batch of deaths: a GCS that is slow to
#: answer (a long session's worker table, a busy head) delays the detail row, never the
#: WORKER_DIED itself (reported before the lookup starts)
GCS_LOOKUP_DEADLINE_S = 2.0


def ray_exit_details(pids: set[int]) -> dict[int, dict[str, Any]]:
    """Ray's own words on dead worker processes: exit type and detail from the GCS worker
    table (a private API, the only one that works without the dashboard), one table read
    for all ``pids``; pids not (yet) in the table are absent."""
    out: dict[int, dict[str, Any]] = {}
    try:
        import ray
        from ray.core.generated import common_pb2, gcs_pb2

        acc = ray._private.state.state._connect_and_get_accessor()
        for raw in acc.get_worker_table():
            w = gcs_pb2.WorkerTableData.FromString(raw)
            if w.pid in pids and not w.is_alive:
                out[w.pid] = {"ray_exit_type": common_pb2.WorkerExitType.Name(w.exit_type),
                              "ray_exit_detail": w.exit_detail[:600]}
    except Exception as e:  # private API: never let it break the monitor
        return {pid: {"ray_exit_lookup_error": f"{type(e).__name__}: {e}"[:200]} for pid in pids}
    return out


class ExitLookup:
    """The exit detail of dead processes, one lookup at a time (the monitor keeps one)."""

    def __init__(self) -> None:
        self._lookup: threading.Thread | None = None   # the last lookup's thread

    def details(self, pids: set[int], deadline_s: float = GCS_LOOKUP_DEADLINE_S) -> dict[int, dict]:
        """Ray's exit detail of ``pids``, retried while the GCS has not recorded them yet, on a
        thread of its own bounded by ``deadline_s`` (a lookup still running from an earlier
        death is not doubled: those deaths are reported without the detail).

        Args:
            pids: the dead processes.
            deadline_s: the most this call waits (:data:`GCS_LOOKUP_DEADLINE_S`).
        """
        details: dict[int, dict] = {}
        lock = threading.Lock()

        def lookup() -> None:
            for _ in range(GCS_LOOKUP_TRIES):
                with lock:
                    missing = pids - set(details)
                found = ray_exit_details(missing)
                with lock:
                    details.update(found)
                    if pids <= set(details):
                        return
                time.sleep(GCS_LOOKUP_WAIT_S)

        prev = self._lookup
        if prev is not None and prev.is_alive():
            return {pid: {"ray_exit_lookup_error": "the GCS has not answered an earlier lookup"} for pid in pids}
        self._lookup = threading.Thread(target=lookup, daemon=True, name="flow1-exit-detail")
        self._lookup.start()
        self._lookup.join(deadline_s)
        with lock:
            got = dict(details)
        for pid in pids - set(got):
            if self._lookup.is_alive():
                got[pid] = {"ray_exit_lookup_error": f"no answer from the GCS within {deadline_s:g} s"}
        return got
