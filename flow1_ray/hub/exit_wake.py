"""Wake the node probe the moment a watched process ends, instead of at its next scan.

The probe (:mod:`flow1_ray.hub.probe`) scans its node's lock files every ``probe_interval_s``
(0.2 s): a death waited for the next scan, 0.1 s on average, up to a whole interval, and longer
on a busy machine where the scan is spaced by its own cost. :class:`ExitWake` holds a pidfd
(Linux >= 5.3, ``os.pidfd_open``) per process the probe tracks and waits on all of them at once
(``poll``: no limit on the number of descriptors); a pidfd becomes readable when its process has
exited, after the kernel closed its files, so its lock is already released when the scan that
the wake starts looks at it; a process whose teardown is long (a SIGKILLed runner's, ~0.85 s on a
busy machine) is seen ending by :func:`ending` at the scan before. Where pidfds are missing (another OS, an old kernel, a pid of
another namespace), the wait is the plain timed one it replaces. A process that inherited the
runner's lock file (a forked child) keeps the lock after its parent's exit: the scan then sees
a holder and says nothing, as before.
"""

from __future__ import annotations

import os
import select
import signal
import time

#: ``/proc/<pid>/stat``'s flag of a task in do_exit (include/linux/sched.h)
PF_EXITING = 0x4
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def pending_sigkill(status: bytes) -> bool:
    """Whether a ``/proc/<pid>/status`` text shows a SIGKILL pending (thread or shared set)."""
    for line in status.split(b"\n"):
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            try:
                if int(line.split()[1], 16) & _SIGKILL_BIT:
                    return True
            except (IndexError, ValueError):
                continue
    return False


def ending(pid: int) -> str | None:
    """Whether the kernel is ending ``pid`` before its files are closed: "SIGKILL" while a
    SIGKILL is pending (from the kill on: the OOM killer's too), "exiting" while it runs
    do_exit (PF_EXITING, not yet a zombie); None otherwise or where /proc cannot say.

    A runner killed by SIGKILL on a busy 2-core machine was measured spending ~0.85 s in its
    teardown (PF_EXITING 85 ms after the kill, its pidfd readable at 864 ms): its lock is
    released, and its pidfd wakes the probe, only at the end of it. The caller checks that the
    pid is the lock's holder in its own pid namespace first: another namespace's pid names
    another process here."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            if pending_sigkill(f.read()):
                return "SIGKILL"
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        state, flags = fields[0], int(fields[6])
    except (OSError, ValueError, IndexError):
        return None
    # a leader that left with pthread_exit is a zombie whose threads live on: not an ending process
    return "exiting" if flags & PF_EXITING and state not in (b"Z", b"X") else None


class ExitWake:
    """A timed wait that ends early when a watched pid exits, or on :meth:`poke` or :meth:`stop`."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}              # pid -> pidfd
        self._ended: set[int] = set()               # pids whose exit woke the loop: never watched again
        self._poll = select.poll() if hasattr(select, "poll") else None
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        if self._poll is not None:
            self._poll.register(self._r, select.POLLIN)
        self.stopped = False

    def watch(self, pids: set[int]) -> None:
        """Hold a pidfd for each of ``pids`` (and none for a pid no longer among them)."""
        if self._poll is None:
            return
        for pid in list(self._fds):
            if pid not in pids:
                self._drop(pid)
        self._ended &= pids   # a zombie not yet reaped (or a lock a child keeps) must not wake the loop again
        for pid in pids - self._fds.keys() - self._ended:
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):   # gone already (the scan sees it), or no pidfds here
                continue
            self._fds[pid] = fd
            self._poll.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; earlier when a watched process exits (its pidfd is then
        dropped) or on :meth:`stop`. True when stopped."""
        if self._poll is None:
            time.sleep(timeout)
            return self.stopped
        try:
            ready = self._poll.poll(max(0.0, timeout) * 1000.0)
        except InterruptedError:
            ready = []
        done = {fd for fd, _ in ready}
        if self._r in done:
            try:
                os.read(self._r, 4096)   # a poke (or the stop): drained
            except OSError:
                pass
        for pid, fd in list(self._fds.items()):
            if fd in done:
                self._drop(pid)
                self._ended.add(pid)
        return self.stopped

    def poke(self) -> None:
        """End the current wait now (new keys to scan for)."""
        try:
            os.write(self._w, b"x")
        except OSError:   # the pipe is full: a wake is pending anyway
            pass

    def stop(self) -> None:
        self.stopped = True
        self.poke()

    def close(self) -> None:
        for pid in list(self._fds):
            self._drop(pid)
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _drop(self, pid: int) -> None:
        fd = self._fds.pop(pid)
        try:
            if self._poll is not None:
                self._poll.unregister(fd)
        except (KeyError, ValueError):
            pass
        os.close(fd)
