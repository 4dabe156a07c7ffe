"""Wake the node probe the moment a watched process ends, instead of at its next scan.

The probe (:mod:`flow1_ray.hub.probe`) scans its node's lock files every ``probe_interval_s``
(0.2 s): a death waited for the next scan, 0.1 s on average, up to a whole interval, and longer
on a busy machine where the scan is spaced by its own cost. :class:`ExitWake` holds a pidfd
(Linux >= 5.3, ``os.pidfd_open``) per process the probe tracks and waits on all of them at once
(``poll``: no limit on the number of descriptors); a pidfd becomes readable when its process has
exited, after the kernel closed its files, so its lock is already released when the scan that
the wake starts looks at it. Where pidfds are missing (another OS, an old kernel, a pid of
another namespace), the wait is the plain timed one it replaces. A process that inherited the
runner's lock file (a forked child) keeps the lock after its parent's exit: the scan then sees
a holder and says nothing, as before.
"""

from __future__ import annotations

import os
import select
import time


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
