"""Worker liveness from the kernel: a lock file per EnvRunner, its heartbeat written in place.

The holder (an EnvRunner process) opens its own lock file once and keeps a POSIX record
lock (``lockf``) on it for its whole life. The kernel drops that lock the instant the
process dies, however it dies, so the node's probe knows "dead" within one probe period.
flock would be inherited by any child the env forks and keep a dead runner looking alive
(flock(2): the lock belongs to the open file description, which fork shares); record locks
are per process and not inherited by fork (fcntl(2)), and ``F_GETLK`` names the holder's pid.
Only this module opens a runner's own lock file in the runner: a process loses its record
locks on a file when it closes *any* descriptor of it.

Heartbeats cost no RPC: a per-step stamp in memory (two attribute writes), and a watchdog
thread that writes a 72-byte header into the lock file every ``heartbeat_interval_s``. The
probe reads headers; a runner that is inside ``sample()`` with no step progress for
``stall_timeout_s`` is stalled, and the watchdog has already written the stuck thread's
stack next to the lock (``.stack``). A step stuck in C code that holds the GIL stops the
watchdog too: ``faulthandler.dump_traceback_later``, re-armed by the watchdog while there is
progress, then dumps every thread's stack from its C thread into the traceback file
(``.tb``), where fatal signals (SIGSEGV, SIGABRT, ...) also land.

Files of one lock ``<name>.lock``: ``<name>.tb`` (faulthandler), ``<name>.stack`` (watchdog
stack of a stall), ``<name>.exc`` (the last exception raised by the env's step).
"""

from __future__ import annotations

import atexit
import errno
import faulthandler
import fcntl
import json
import os
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"F1LK"
VERSION = 1
#: magic, version, state, pid, worker_index, written_at, last_progress, steps, busy_since, in_step_since,
#: step_time_ema (s), rss (bytes)
HEADER = struct.Struct("<4sHHiiddqdddq")
META_OFFSET = 128   # the header (HEADER.size, 72 bytes) has room to grow up to here
META_SIZE = 2048

IDLE, BUSY, STOPPED, EXITING = 0, 1, 2, 3
STEP_EMA = 0.02  # weight of one step in the step-time average the probes read
REARM_S = 1.0    # the watchdog re-arms faulthandler's timer at most this often
STATE_NAMES = {IDLE: "idle", BUSY: "busy", STOPPED: "stopped", EXITING: "exiting"}

_FLOCK = struct.Struct("@hhqqi4x")  # struct flock on Linux (l_type, l_whence, l_start, l_len, l_pid)


def holder_pid(path: Path) -> int | None:
    """The pid holding a write lock on ``path``, or None when nobody does (F_GETLK).

    Opening and closing the file here does not touch the holder's locks: record locks are
    dropped only when the *holding* process closes a descriptor.
    """
    fd = _open_nofollow(path, os.O_RDONLY)
    try:
        return _holder(fd)
    finally:
        os.close(fd)


@dataclass
class Header:
    state: int
    pid: int
    worker_index: int
    written_at: float
    last_progress: float
    steps: int
    busy_since: float
    in_step_since: float
    step_time_ema: float = 0.0
    rss: int = 0

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, str(self.state))


def _open_nofollow(path: Path | str, flags: int, dir_fd: int | None = None) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)


def _holder(fd: int) -> int | None:
    got = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    l_type, _, _, _, pid = _FLOCK.unpack(got)
    return None if l_type == fcntl.F_UNLCK else pid


def _header(raw: bytes) -> Header | None:
    if len(raw) < HEADER.size or raw[:4] != MAGIC:
        return None
    f = HEADER.unpack_from(raw)
    return Header(*f[2:])


def probe_lock(path: Path | str, dir_fd: int | None = None) -> tuple[int | None, Header | None]:
    """(holder pid or None, header) with one open: what a probe needs on every scan.
    With ``dir_fd``, ``path`` is a bare name in that directory (no path walk per file)."""
    fd = _open_nofollow(path, os.O_RDONLY, dir_fd)
    try:
        return probe_fd(fd)
    finally:
        os.close(fd)


def probe_fd(fd: int) -> tuple[int | None, Header | None]:
    """:func:`probe_lock` on a descriptor the probe keeps open between scans."""
    return _holder(fd), _header(os.pread(fd, HEADER.size, 0))


def read_lock(path: Path) -> tuple[Header | None, dict]:
    """The header and the metadata of a lock file (None, {} when unreadable)."""
    try:
        fd = _open_nofollow(path, os.O_RDONLY)
    except OSError:
        return None, {}
    try:
        raw = os.pread(fd, META_OFFSET + META_SIZE, 0)
    finally:
        os.close(fd)
    header = _header(raw)
    if header is None:
        return None, {}
    try:
        meta = json.loads(raw[META_OFFSET:].split(b"\0", 1)[0] or b"{}")
    except ValueError:
        meta = {}
    return header, meta


def read_tail(path: Path, limit: int = 4000) -> str:
    """The last ``limit`` characters of a text file next to a lock ('' if absent)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def read_head(path: Path, limit: int = 200) -> str:
    """The first ``limit`` characters of a text file next to a lock ('' if absent)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def format_exception(exc: BaseException, limit_chars: int = 3000) -> dict:
    """Type, message, innermost frame and traceback tail of an exception, as evidence."""
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    return {
        "exception": type(exc).__name__,
        "error": str(exc)[:500],
        "frame": f"{last.name} ({Path(last.filename).name}:{last.lineno})" if last else "?",
        "traceback_tail": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-limit_chars:],
    }


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    """Resident set size in bytes from /proc (no psutil call on the watchdog's path)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class NoLiveness:
    """Stands in for :class:`WorkerLiveness` when the lock file could not be made (the
    failure is reported as WATCHER_OFF): the step wrappers run unchanged, nothing is written."""

    def __init__(self) -> None:
        self.state, self.steps, self.in_step_since, self.step_time_ema = IDLE, 0, 0.0, 0.0
        self.last_progress = time.time()

    def step_begin(self) -> None:
        self.in_step_since = time.time()

    def step_end(self) -> None:
        self.last_progress, self.in_step_since = time.time(), 0.0
        self.steps += 1

    def busy(self) -> None:
        self.state = BUSY

    def idle(self) -> None:
        self.state = IDLE

    def record_exception(self, exc: BaseException) -> dict:
        return {**format_exception(exc), "ts": time.time()}

    def write_header(self, state: int | None = None) -> None:
        pass

    def close(self, state: int = STOPPED) -> None:
        self.state = state


class WorkerLiveness:
    """The holder side: one per EnvRunner (per process and worker key).

    Per-step cost: :meth:`step_begin` / :meth:`step_end` are attribute writes; the lock
    file is written by the watchdog thread every tick and at a sample's start and end, unless
    the header was written less than half a tick before (an off-policy runner's one-step
    sample() calls, hundreds a second: the tick writes their state, at most a tick late).
    """

    def __init__(self, directory: Path, name: str, meta: dict[str, Any], *, heartbeat_interval_s: float = 0.2,
                 stall_timeout_s: float = 30.0, arm_faulthandler: bool = True) -> None:
        self.dir = directory
        self.name = name
        self.path = directory / f"{name}.lock"
        self.tb_path = directory / f"{name}.tb"
        self.stack_path = directory / f"{name}.stack"
        self.exc_path = directory / f"{name}.exc"
        self.interval = heartbeat_interval_s
        self.stall_timeout = stall_timeout_s
        self.worker_index = int(meta.get("worker_index", -1))
        self.state = IDLE
        self.steps = 0
        self.last_progress = time.time()
        self.busy_since = 0.0
        self.in_step_since = 0.0
        self.step_time_ema = 0.0
        self.rss = _rss()
        self._written_at = 0.0   # time.monotonic() of the last header write
        self.sample_thread = threading.get_ident()
        self._stack_written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()

        self.fd = _open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self.fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise RuntimeError(f"{self.path} is locked by another live process") from None
            raise
        os.ftruncate(self.fd, META_OFFSET + META_SIZE)
        blob = json.dumps({**meta, "pid": os.getpid(), "started": time.time()}).encode()[:META_SIZE - 1]
        os.pwrite(self.fd, blob + b"\0", META_OFFSET)
        self.write_header()
        for p in (self.stack_path, self.exc_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        self._tb_file = None
        if arm_faulthandler:
            self._tb_file = open(self.tb_path, "w", encoding="utf-8")
            faulthandler.enable(file=self._tb_file, all_threads=True)
        self._arm = arm_faulthandler
        self._armed_at = 0.0
        self._outermost = False
        self._thread = threading.Thread(target=self._watch, name=f"flow1-watchdog-{name}", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # -- hot path ------------------------------------------------------------------------
    def step_begin(self) -> None:
        self.in_step_since = time.time()

    def step_end(self) -> None:
        now = time.time()
        if self.in_step_since:
            d = now - self.in_step_since
            self.step_time_ema += STEP_EMA * (d - self.step_time_ema) if self.step_time_ema else d
        self.last_progress = now
        self.in_step_since = 0.0
        self.steps += 1

    # -- per sample() --------------------------------------------------------------------
    def busy(self) -> None:
        self.sample_thread = threading.get_ident()
        self.busy_since = self.last_progress = time.time()
        self.state = BUSY
        self._stack_written = False
        if self._arm and self._tb_file is not None and not self._outermost:
            # Ray's worker installs its own fatal-signal handler (absl's, which spends a
            # second or more symbolising) after the EnvRunner is built; enabling again
            # here puts faulthandler first in the chain, so the report lands at once.
            faulthandler.enable(file=self._tb_file, all_threads=True)
            self._outermost = True
        if time.monotonic() - self._written_at >= self.interval / 2:
            self.write_header()

    def idle(self) -> None:
        self.state = IDLE
        self.busy_since = 0.0
        if time.monotonic() - self._written_at >= self.interval / 2:
            self.write_header()

    def record_exception(self, exc: BaseException) -> dict:
        """Write what the env's step raised next to the lock (the process may exit next)."""
        ev = format_exception(exc)
        ev["ts"] = time.time()
        try:
            tmp = self.exc_path.with_suffix(".exc.tmp")
            tmp.write_text(json.dumps(ev))
            os.replace(tmp, self.exc_path)
        except OSError:
            pass
        return ev

    # -- the lock file -------------------------------------------------------------------
    def write_header(self, state: int | None = None) -> None:
        with self._lock:
            if self.fd < 0:
                return
            data = HEADER.pack(MAGIC, VERSION, self.state if state is None else state, os.getpid(),
                               self.worker_index, time.time(), self.last_progress, self.steps, self.busy_since,
                               self.in_step_since, self.step_time_ema, self.rss)
            try:
                os.pwrite(self.fd, data, 0)
                self._written_at = time.monotonic()
            except OSError:
                pass

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.rss = _rss()
            self.write_header()
            now = time.time()
            since = self.in_step_since or max(self.last_progress, self.busy_since)
            if self.state == BUSY and not self._stack_written and now - since > self.stall_timeout:
                self._write_stack(now - since)
            self._rearm(now, since)

    def _rearm(self, now: float, since: float) -> None:
        """faulthandler's C timer, set from this thread at most every REARM_S while the process
        makes progress or waits between calls (arming starts and joins a thread: ~0.4 ms, too
        dear for every sample() of an off-policy runner). A step that holds the GIL stops
        this thread, a step that makes no progress stops the re-arming: either way the timer
        fires about ``stall_timeout`` after the last progress and dumps every thread's stack
        from C into the ``.tb`` file."""
        if not self._arm or self._tb_file is None or now - self._armed_at < REARM_S:
            return
        if self.state == BUSY and now - since > REARM_S + self.interval:
            return   # no progress: let the timer run out
        try:
            # from the last arm: the dump lands between stall_timeout - REARM_S and stall_timeout
            # (+ a tick) after the last progress, before the probe looks for it (stall + 1 s)
            faulthandler.dump_traceback_later(self.stall_timeout + self.interval, repeat=False, file=self._tb_file)
            self._armed_at = now
        except (RuntimeError, ValueError, OSError):
            pass

    def _write_stack(self, stalled_s: float) -> None:
        frame = sys._current_frames().get(self.sample_thread)
        if frame is None:
            return
        text = "".join(traceback.format_stack(frame))
        where = "inside env.step" if self.in_step_since else "inside sample(), between steps"
        try:
            tmp = self.stack_path.with_suffix(".stack.tmp")
            tmp.write_text(json.dumps({"stalled_s": stalled_s, "where": where, "stack": text[-6000:],
                                       "ts": time.time()}))
            os.replace(tmp, self.stack_path)
            self._stack_written = True
        except OSError:
            pass

    def close(self, state: int = STOPPED) -> None:
        """Graceful end: mark the header, stop the watchdog, release the lock."""
        self._stop.set()
        if self._arm:
            faulthandler.cancel_dump_traceback_later()
        self.state = state
        self.write_header()
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)  # releases the record lock
                self.fd = -1

    def _at_exit(self) -> None:
        if self.fd >= 0 and self.state != STOPPED:
            self.state = EXITING
            self.write_header()
