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
stack of a stall), ``<name>.exc`` (why the process may be ending, recorded before it ends: an
exception that left ``sample()`` with its component, an ``os._exit`` with its code and caller;
:mod:`flow1_ray.checks.run.death_cause`). This module holds the format and the reading side
(the probe's); the holder's side is :mod:`.holder`.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

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
