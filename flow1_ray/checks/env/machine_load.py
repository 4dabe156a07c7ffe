"""The machine's share of a slow step: time a thread spent runnable but not running.

A step that takes long on a busy machine may have waited for a CPU, not for the env. The
kernel counts that wait per thread: the second field of ``/proc/thread-self/schedstat`` is
the time spent on a run queue, in nanoseconds (Linux's CONFIG_SCHED_INFO; absent elsewhere,
then every reading is None and the step-time rules judge as before). Read around each step
of ``flow1 check`` (~3 us) and over each judged window live, it tells the machine's load
from the env's own slowness: STEP_DURATION_OUTLIER names the env only for the time the
thread was running or blocked in it.

A virtual machine's CPU can be taken from under a running thread by its host: the guest
kernel books that time as neither the thread's CPU nor its run-queue wait, but as *steal* on
that CPU (the eighth figure of a ``cpu<N>`` line of ``/proc/stat``). :class:`StepClock` adds
the steal of the CPU a step ran on to its wait, read only around steps that take a
millisecond or more (a read costs ~20 us; a faster env cannot lose a 5 ms excess to it on
one step in twenty without the machine being stolen a quarter of the time).

The process's heap is not the env's either: a full pass of Python's cyclic garbage collector
stops every thread for as long as the whole heap takes to walk (~0.3 s in a process that
built a few RLlib Algorithms, more on a loaded machine), and it runs in whichever step
happened to allocate past the threshold. :func:`gc_pause_s` clocks the collector's passes
(``gc.callbacks``), and a step's duration is taken without them.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from typing import Callable

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


def _libc_getcpu():
    try:
        f = ctypes.CDLL(None, use_errno=True).sched_getcpu
        f.restype, f.argtypes = ctypes.c_int, []
        return f
    except (OSError, AttributeError):
        return None


_getcpu = _libc_getcpu()


def steal_s() -> dict[int, float] | None:
    """Each CPU's cumulative hypervisor steal in seconds (USER_HZ ticks), or None where the
    kernel reports none."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().split(b"\n")
        hz = os.sysconf("SC_CLK_TCK")
        return {int(ln[3:ln.index(b" ")]): int(ln.split()[8]) / hz for ln in lines
                if ln.startswith(b"cpu") and ln[3:4].isdigit() and len(ln.split()) > 8}
    except (OSError, ValueError, IndexError):
        return None


def current_cpu() -> int | None:
    """The CPU this thread runs on now, or None where libc cannot say."""
    if _getcpu is None:
        return None
    n = _getcpu()
    return n if n >= 0 else None


class StepClock:
    """Where one step's wall time went: :meth:`start` before the call, :meth:`stop` after it
    returns ``(duration_s, machine_s)``: the wall time less the garbage collector's passes, and
    the part of it that was the machine's (this thread's run-queue wait plus the host's steal
    of the CPU it ran on; None where the kernel counts neither)."""

    #: steal is read around a step when the last step, or the steps so far (an EMA), took this long
    STEAL_FROM_S = 1e-3

    def __init__(self, steal: Callable[[], dict[int, float] | None] = steal_s,
                 cpu: Callable[[], int | None] = current_cpu) -> None:
        self._ema: float | None = None
        self._last = 0.0
        self._snap: tuple = ()
        self._steal, self._cpu = steal, cpu

    def start(self) -> None:
        reads = self._last >= self.STEAL_FROM_S or (self._ema or 0.0) >= self.STEAL_FROM_S
        cpu = self._cpu() if reads else None
        st = self._steal() if cpu is not None else None
        self._snap = (runqueue_wait_s(), gc_pause_s(), cpu, st, time.perf_counter())

    def stop(self) -> tuple[float, float | None]:
        t1 = time.perf_counter()
        q0, g0, cpu0, st0, t0 = self._snap
        dt = t1 - t0 - (gc_pause_s() - g0)   # the collector's pause is the heap's
        q1 = runqueue_wait_s()
        machine = q1 - q0 if q0 is not None and q1 is not None else None
        if st0 is not None:
            st1, cpu1 = self._steal(), self._cpu()
            if st1 is not None:
                on = {cpu0} if cpu1 == cpu0 else {cpu0, cpu1} - {None}
                stolen = sum(max(0.0, st1.get(c, 0.0) - st0.get(c, 0.0)) for c in on)
                machine = min(dt, (machine or 0.0) + stolen)
        self._ema = dt if self._ema is None else 0.9 * self._ema + 0.1 * dt
        self._last = dt
        return dt, machine


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
