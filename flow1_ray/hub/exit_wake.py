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
import struct
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


#: inotify's event of a file written (include/uapi/linux/inotify.h) and its record's header
IN_MODIFY = 0x2
#: a fatal-signal report is read once its file was quiet this long (or this long after its first write)
REPORT_QUIET_S, REPORT_SETTLE_S = 0.02, 0.25
_EVENT = struct.Struct("iIII")


def _inotify(path: str) -> int | None:
    """A non-blocking inotify descriptor watching ``path``'s files for writes, or None where
    inotify is missing (another OS) or refused (the watch limit reached)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
            os.close(fd)
            return None
        return fd
    except (OSError, AttributeError, TypeError):
        return None


def _fatal_report_written(fd: int) -> bool:
    """Drain ``fd``'s events; whether one was a write to a ``.tb`` file (faulthandler's
    fatal-signal report, or its stall dump) rather than a header's."""
    found = False
    while True:
        try:
            buf = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return found
        except OSError:
            return found
        if not buf:
            return found
        off = 0
        while off + _EVENT.size <= len(buf):
            _wd, _mask, _cookie, size = _EVENT.unpack_from(buf, off)
            name = buf[off + _EVENT.size: off + _EVENT.size + size].rstrip(b"\0")
            found = found or name.endswith(b".tb")
            off += _EVENT.size + size


class ExitWake:
    """A timed wait that ends early when a watched pid exits, when a process of the watched
    directory writes a fatal-signal report (:meth:`watch_dir`), or on :meth:`poke` or :meth:`stop`.

    Why the report wakes it: a runner killed by SIGSEGV runs Ray's own fatal-signal handler first
    (it symbolises the native stack), then faulthandler's, which writes the ``.tb`` file the scan
    reads as the death; the process ends and its lock is released only later. Woken by that write,
    the scan names the death then instead of at the next interval (0.1 s on average).
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}              # pid -> pidfd
        self._ended: set[int] = set()               # pids whose exit woke the loop: never watched again
        self._poll = select.poll() if hasattr(select, "poll") else None
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        if self._poll is not None:
            self._poll.register(self._r, select.POLLIN)
        self._ino: int | None = None
        self.stopped = False

    def watch_dir(self, path: "str | os.PathLike") -> bool:
        """Also end a wait when a file of ``path`` named ``*.tb`` is written; False where
        inotify cannot watch it (the plain timed wait then)."""
        if self._poll is None or self._ino is not None:
            return self._ino is not None
        self._ino = _inotify(os.fspath(path))
        if self._ino is not None:
            self._poll.register(self._ino, select.POLLIN)
        return self._ino is not None

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
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                ready = self._poll.poll(max(0.0, deadline - time.monotonic()) * 1000.0)
            except InterruptedError:
                ready = []
            done = {fd for fd, _ in ready}
            if self._ino is None or self._ino not in done:
                break
            done.discard(self._ino)
            # a header written (every watchdog, twice a heartbeat) is no reason to scan early
            if _fatal_report_written(self._ino):
                self._settle()
                break
            if done or time.monotonic() >= deadline:
                break
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

    def _settle(self) -> None:
        """faulthandler writes its report in many writes (a line, then each thread's frames):
        wait until ``.tb`` files have been quiet for REPORT_QUIET_S (REPORT_SETTLE_S at most),
        so that the scan reads the whole report, with the crashing thread's frames."""
        end = time.monotonic() + REPORT_SETTLE_S
        waiter = select.poll()   # poll, not select: a hub holding over 1,024 descriptors
        waiter.register(self._ino, select.POLLIN)
        while time.monotonic() < end:
            try:
                quiet = not waiter.poll(REPORT_QUIET_S * 1000.0)
            except (InterruptedError, OSError):
                return
            if quiet or not _fatal_report_written(self._ino):
                return

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
        for fd in (self._r, self._w) + ((self._ino,) if self._ino is not None else ()):
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
