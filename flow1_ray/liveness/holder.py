"""The holder side of a lock file: what an EnvRunner (or a Learner actor) keeps for its whole
life (:class:`WorkerLiveness`: the record lock, the heartbeat header its watchdog writes, the
stall stack, faulthandler's file, the recorded cause of an ending), and :class:`NoLiveness`,
its stand-in when no lock file could be made. The format and the reading side (the probe's)
are in :mod:`.lockfile`.
"""

from __future__ import annotations

import atexit
import errno
import faulthandler
import fcntl
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from .lockfile import (BUSY, EXITING, HEADER, IDLE, MAGIC, META_OFFSET, META_SIZE, REARM_S, STEP_EMA, STOPPED,
                       VERSION,
                       _open_nofollow)


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

    cause_recorded = False
    watchdog_cpu_s = 0.0
    on_stall = None

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

    def record_cause(self, cause: dict) -> dict:
        return {**cause, "ts": time.time()}

    def clear_cause(self) -> None:
        pass

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

    cause_recorded = False   # a cause is in the .exc file (cleared when the process goes on)

    def __init__(self, directory: Path, name: str, meta: dict[str, Any], *, heartbeat_interval_s: float = 0.2,
                 stall_timeout_s: float = 30.0, arm_faulthandler: bool = True) -> None:
        self.dir = directory
        self.name = name
        self.path = directory / f"{name}.lock"
        self.tb_path = directory / f"{name}.tb"
        self.stack_path = directory / f"{name}.stack"
        self.exc_path = directory / f"{name}.exc"
        self.interval = heartbeat_interval_s
        self.watchdog_cpu_s = 0.0   # the watchdog thread's own CPU
        self.stall_timeout = stall_timeout_s
        #: called once from the watchdog thread when a step stalls: (seconds, the stepping thread's frame)
        self.on_stall: Any = None
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
        return self.record_cause(format_exception(exc))

    def record_cause(self, cause: dict) -> dict:
        """Write why this process may be ending next to the lock, before it ends (``.exc``: an
        exception that left ``sample()``, an ``os._exit``; the fields of
        :mod:`flow1_ray.checks.run.death_cause`), replacing the last one."""
        ev = {**cause, "ts": time.time()}
        try:
            tmp = self.exc_path.with_suffix(".exc.tmp")
            tmp.write_text(json.dumps(ev, default=str))
            os.replace(tmp, self.exc_path)
            self.cause_recorded = True
        except OSError:
            pass
        return ev

    def clear_cause(self) -> None:
        """The process went on after its recorded cause (a sample() returned since): drop it."""
        self.cause_recorded = False
        try:
            os.unlink(self.exc_path)
        except OSError:
            pass

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
            c0 = time.thread_time()
            self.rss = _rss()
            self.write_header()
            now = time.time()
            since = self.in_step_since or max(self.last_progress, self.busy_since)
            if self.state == BUSY and not self._stack_written and now - since > self.stall_timeout:
                repro = None
                if self.on_stall is not None and self.in_step_since:   # the runner's flight recorder
                    try:
                        repro = self.on_stall(now - since, sys._current_frames().get(self.sample_thread))
                    except Exception:
                        pass
                self._write_stack(now - since, repro)
            self._rearm(now, since)
            self.watchdog_cpu_s += time.thread_time() - c0   # flow1's cost account (runner/cost.py)

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

    def _write_stack(self, stalled_s: float, repro: Any = None) -> None:
        """The stepping thread's stack for the probe's WORKER_STALLED, with the ``repro/`` entries
        ``on_stall`` sent (the hanging sub-env's life: its finding names them)."""
        frame = sys._current_frames().get(self.sample_thread)
        if frame is None:
            return
        text = "".join(traceback.format_stack(frame))
        where = "inside env.step" if self.in_step_since else "inside sample(), between steps"
        try:
            tmp = self.stack_path.with_suffix(".stack.tmp")
            names = [str(n) for n in repro][:8] if isinstance(repro, list) else []
            tmp.write_text(json.dumps({"stalled_s": stalled_s, "where": where, "stack": text[-6000:],
                                       "ts": time.time(), **({"repro": names} if names else {})}))
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
