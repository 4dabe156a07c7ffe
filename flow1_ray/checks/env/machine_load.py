"""The machine's share of a slow step: time a thread spent runnable but not running.

A step that takes long on a busy machine may have waited for a CPU, not for the env. The
kernel counts that wait per thread: the second field of ``/proc/thread-self/schedstat`` is
the time spent on a run queue, in nanoseconds (Linux's CONFIG_SCHED_INFO; absent elsewhere,
then every reading is None and the step-time rules judge as before). Read around each step
of ``flow1 check`` (~3 us) and over each judged window live, it tells the machine's load
from the env's own slowness: STEP_DURATION_OUTLIER names the env only for the time the
thread was running or blocked in it.

The process's heap is not the env's either: a full pass of Python's cyclic garbage collector
stops every thread for as long as the whole heap takes to walk (~0.3 s in a process that
built a few RLlib Algorithms, more on a loaded machine), and it runs in whichever step
happened to allocate past the threshold. :func:`gc_pause_s` clocks the collector's passes
(``gc.callbacks``), and a step's duration is taken without them.
"""

from __future__ import annotations

import gc
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


_gc_clock = {"installed": False, "start": None, "total": 0.0}


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_clock["start"] = time.perf_counter()
    elif _gc_clock["start"] is not None:
        _gc_clock["total"] += time.perf_counter() - _gc_clock["start"]
        _gc_clock["start"] = None


def gc_pause_s() -> float:
    """Seconds this process's garbage collector has run since the first call (the clock is
    installed then): a step's duration minus the change over it is the env's own."""
    if not _gc_clock["installed"]:
        _gc_clock["installed"] = True
        gc.callbacks.append(_on_gc)
    return _gc_clock["total"]


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
        return {"runqueue_share": round(share, 4), "runqueue_wait_s": round(wait - self._wait, 6),
                "load_per_cpu": round(load, 3) if load is not None else None}
