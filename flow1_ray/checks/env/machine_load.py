"""The machine's share of a slow step: time a thread spent runnable but not running.

A step that takes long on a busy machine may have waited for a CPU, not for the env. The
kernel counts that wait per thread: the second field of ``/proc/thread-self/schedstat`` is
the time spent on a run queue, in nanoseconds (Linux's CONFIG_SCHED_INFO; absent elsewhere,
then every reading is None and the step-time rules judge as before). Read around each step
of ``flow1 check`` (~3 us) and over each judged window live, it tells the machine's load
from the env's own slowness: STEP_DURATION_OUTLIER names the env only for the time the
thread was running or blocked in it.
"""

from __future__ import annotations

import os
import time

_PATHS = ("/proc/thread-self/schedstat", "/proc/self/schedstat")

#: a step-time excess counts as the machine's when run-queue wait covers this share of it
LOAD_SHARE = 0.5


def runqueue_wait_s() -> float | None:
    """This thread's cumulative run-queue wait in seconds, or None where the kernel has none."""
    for p in _PATHS:
        try:
            with open(p, "rb") as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return None


class WaitShare:
    """The share of wall time this thread waited on a run queue since the last call (a live
    runner asks once per judged window)."""

    def __init__(self) -> None:
        self._wait = runqueue_wait_s()
        self._at = time.monotonic()

    def __call__(self) -> dict | None:
        wait, at = runqueue_wait_s(), time.monotonic()
        if wait is None or self._wait is None or at <= self._at:
            self._wait, self._at = wait, at
            return None
        share = (wait - self._wait) / (at - self._at)
        self._wait, self._at = wait, at
        try:
            load = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
        except OSError:
            load = None
        return {"runqueue_share": round(share, 4), "load_per_cpu": round(load, 3) if load is not None else None}
