"""LockScanner: one pass over a node's lock files, and what changed since the last one.

Each scan tries each lock file with ``F_GETLK`` and reads its 72-byte header, and turns what
changed into transitions: ``new``, ``restarted``, ``died``, ``stopped``, ``stalled``,
``recovered``; a death carries how the process ended (:func:`exit_signal_from`). No Ray, so
the benchmark can drive thousands of simulated holders. Used by probe.py (ProbeLoop scans
with it, in the hub for its own node and in a NodeProbe actor on every other node);
tests/liveness drives it directly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..checks.run.incidents import WAIT_HOLD_FACTOR
from ..common import schema as S
from ..common.stacks import current_thread, env_frame, main_thread_stack, ray_wait
from ..liveness.lockfile import BUSY, EXITING, STOPPED, Header, probe_fd, probe_lock, read_head, read_lock, read_tail
from ..liveness.lockdir import SUFFIXES
from .exit_wake import ending

#: A runner key is the lock name without its ``.<pid>`` suffix: the actor id of a remote
#: runner (it survives Ray's restarts) or ``local-<pid>-<kind><index>``.
KeyFilter = Callable[[str], bool]


def _raise_fd_limit() -> None:
    """A probe keeps one descriptor per lock file of its node: lift the soft limit."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 16
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


def split_name(name: str) -> tuple[str, int]:
    key, _, pid = name.rpartition(".")
    return key, int(pid)


@dataclass
class Tracked:
    key: str
    name: str
    pid: int
    meta: dict
    header: Header | None = None
    stalled: bool = False
    killed: bool = False
    kill_at: float | None = None   # stall_action='kill' of a wait in ray.get: deferred to then
    tb_size: int = 0
    ending: str | None = None      # what the kernel showed of its end before its lock was released



#: how much of a fatal signal's dump (all threads) is read for the crashing thread's frames
CRASH_DUMP_BYTES = 256 * 1024


def _crash_frame(dump: str) -> dict[str, Any]:
    """The thread a fatal signal's dump marks as current (the one that crashed): the frame to
    name (the innermost outside flow1 and the standard library: the env's ``step`` over its C
    extension, torch's function under the RLModule) and its innermost frames; {} for no dump."""
    tid = current_thread(dump)
    if tid is None:
        return {}
    block, frames = main_thread_stack(dump, tid)
    return {"crash_frame": env_frame(frames, None), "crash_stack": block[:1500]}


class LockScanner:
    """Scans one directory of lock files; keeps what it saw last time."""

    def __init__(self, directory: Path, stall_timeout_s: float, *, key_filter: KeyFilter | None = None,
                 stall_action: str = "report", stack_grace_s: float = 1.0) -> None:
        self.dir = Path(directory)
        self.stall_timeout = stall_timeout_s
        self.key_filter = key_filter
        self.stall_action = stall_action
        self.stack_grace = stack_grace_s
        self.tracked: dict[str, Tracked] = {}      # by lock name
        self.pids_by_key: dict[str, int] = {}      # last pid seen per runner key
        self.scans = 0
        self.last_scan_s = 0.0
        self._dfd: int | None = None
        self._fds: dict[str, int] = {}
        self._tb_names: set[str] = set()
        self._known_stalled: set[str] = set()      # lock names a restarted hub already reported stalled
        _raise_fd_limit()

    def seed(self, known: dict[str, dict]) -> None:
        """What a restarted hub knew (key -> last pid and state, from the run directory): a
        new pid on a known key is a restart (of a death already reported, or not), and a
        stall already reported is not reported again."""
        for key, w in known.items():
            pid = w.get("pid")
            if pid is None:
                continue
            self.pids_by_key.setdefault(key, int(pid))
            if w.get("status") == S.STALLED:
                self._known_stalled.add(f"{key}.{pid}")

    def _dir_fd(self) -> int | None:
        if self._dfd is None:
            try:
                self._dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                return None
        return self._dfd

    def scan(self) -> list[dict[str, Any]]:
        """One pass over the directory (file names relative to an open directory fd: at
        thousands of files a path walk per file would cost more than the probe itself)."""
        t0 = time.perf_counter()
        now = time.time()
        out: list[dict[str, Any]] = []
        dfd = self._dir_fd()
        names = os.listdir(dfd) if dfd is not None else []
        self._tb_names = {n[:-3] for n in names if n.endswith(".tb")}
        for lock_name in self._in_start_order(names, dfd):
            if not lock_name.endswith(".lock"):
                continue
            name = lock_name[:-5]
            try:
                key, pid = split_name(name)
            except ValueError:
                continue
            if self.key_filter is not None and not self.key_filter(key):
                continue
            t = self.tracked.get(name)
            try:
                fd = self._fds.get(name)
                holder, header = probe_fd(fd) if fd is not None else probe_lock(lock_name, dfd)
            except OSError:
                continue
            if t is None:
                meta = read_lock(self.dir / lock_name)[1]
                if holder is None and (header is None or header.state == STOPPED):
                    self._remove(name)  # a leftover of a finished process
                    continue
                t = Tracked(key, name, pid, meta, header, stalled=name in self._known_stalled)
                self._known_stalled.discard(name)
                self.tracked[name] = t
                self._keep_open(name, lock_name, dfd)
                prev = self.pids_by_key.get(key)
                self.pids_by_key[key] = pid
                out.append(self._event("restarted" if prev not in (None, pid) else "new", t, now, previous_pid=prev))
                if holder is None:  # it died between its start and our first look
                    out.append(self._died(t, now))
                continue
            t.header = header or t.header
            if holder is None or self._dying(t) or self._ending(t, holder):
                out.append(self._died(t, now))
                continue
            out += self._stall_change(t, holder, now)
        self.scans += 1
        self.last_scan_s = time.perf_counter() - t0
        return out

    def _stall_change(self, t: Tracked, holder: int, now: float) -> list[dict[str, Any]]:
        """A live process's stall as it changed since the last scan: ``stalled`` (once its
        stack is in, or late without it; killed when ``stall_action`` says so), ``recovered``,
        or nothing."""
        out: list[dict[str, Any]] = []
        stalled_for = self._stalled_for(t.header, now)
        if stalled_for is not None and not t.stalled:
            # the watchdog's stack comes within a tick of the stall; wait for it a little
            # (a step holding the GIL stops the watchdog: then faulthandler's dump)
            late = stalled_for > self.stall_timeout + self.stack_grace
            stack = self._stack(t, since=now - stalled_for, use_faulthandler=late)
            if stack or late:
                t.stalled = True
                ev = self._event("stalled", t, now, stalled_s=round(stalled_for, 3), **stack)
                if self.stall_action == "kill" and ray_wait(stack.get("stack") or ""):
                    # a wait on another actor may be its slow start (waits.py): killed at the hold's end
                    t.kill_at = now - stalled_for + WAIT_HOLD_FACTOR * self.stall_timeout
                    ev["kill_at_s"] = WAIT_HOLD_FACTOR * self.stall_timeout
                elif self.stall_action == "kill":
                    ev["killed"] = self._kill(t, holder)
                out.append(ev)
        elif stalled_for is not None and t.kill_at is not None and now >= t.kill_at and not t.killed:
            self._kill(t, holder)
        elif stalled_for is None and t.stalled:
            t.stalled, t.kill_at = False, None
            out.append(self._event("recovered", t, now))
        return out

    def _in_start_order(self, names: list[str], dfd: int | None) -> list[str]:
        """Lock files already tracked first, then new ones oldest first (by the start time
        in their metadata): when a process and its successor both appear in one scan (a
        restarted hub's first look), the old one's death comes before the new one's start."""
        locks = [n for n in names if n.endswith(".lock")]
        new = [n for n in locks if n[:-5] not in self.tracked]
        if len(new) < 2:
            return locks
        started = {n: float(read_lock(self.dir / n)[1].get("started") or 0.0) for n in new}
        return [n for n in locks if n[:-5] in self.tracked] + sorted(new, key=lambda n: started[n])

    # -- judgements ----------------------------------------------------------------------
    def _stalled_for(self, h: Header | None, now: float) -> float | None:
        """Seconds without progress when that exceeds the stall timeout, else None.

        Busy inside sample() with no step for stall_timeout_s, or a watchdog that has not
        written for stall_timeout_s (the process holds the GIL somewhere: a hang too)."""
        if h is None:
            return None
        if h.state == BUSY:
            since = h.in_step_since or max(h.last_progress, h.busy_since)
            if now - since > self.stall_timeout:
                return now - since
        if now - h.written_at > self.stall_timeout:
            return now - h.written_at
        return None

    def _dying(self, t: Tracked) -> bool:
        """faulthandler has written a fatal-signal report: the process is in its last
        milliseconds (Ray's own handler may still symbolise its stack for a second or more
        before it exits and the lock is released)."""
        if t.name not in self._tb_names:
            return False
        try:
            size = os.stat(f"{t.name}.tb", dir_fd=self._dfd).st_size
        except OSError:
            return False
        if size == t.tb_size:
            return False
        t.tb_size = size
        return read_head(self.dir / f"{t.name}.tb").startswith("Fatal Python error")

    def _ending(self, t: Tracked, holder: int) -> bool:
        """The kernel is ending the lock's holder (a pending SIGKILL, or do_exit under way):
        its death is reported now, not when its teardown closes its files. Only where the
        holder the lock shows is the pid the process wrote (one pid namespace)."""
        if holder != t.pid:
            return False
        t.ending = ending(holder)
        return t.ending is not None

    def _stack(self, t: Tracked, since: float, use_faulthandler: bool) -> dict:
        """The stuck thread's stack: the watchdog's, or (late) a faulthandler dump written
        after the stall began."""
        try:
            d = json.loads((self.dir / f"{t.name}.stack").read_text())
            if d.get("ts", since) >= since - 1.0:  # not a stack left from an earlier stall
                repro = [str(n)[:200] for n in d.get("repro") or [] if isinstance(n, str)][:8]
                return {"stack": d.get("stack", ""), "stack_source": "watchdog", "where": d.get("where", ""),
                        **({"repro": repro} if repro else {})}
        except (OSError, ValueError):
            pass
        if use_faulthandler:
            tb_path = self.dir / f"{t.name}.tb"
            try:
                fresh = os.stat(tb_path).st_mtime >= since
            except OSError:
                fresh = False
            tb = read_tail(tb_path) if fresh else ""
            if "File " in tb:
                return {"stack": tb, "stack_source": "faulthandler"}
        return {}

    def _kill(self, t: Tracked, holder: int) -> bool:
        if t.meta.get("local") or holder != t.pid:
            return False  # never the driver, never a recycled pid
        try:
            os.kill(holder, signal.SIGKILL)
            t.killed = True
            return True
        except OSError:
            return False

    def _died(self, t: Tracked, now: float) -> dict[str, Any]:
        h = t.header
        ev = self._event("died", t, now)
        tb = read_head(self.dir / f"{t.name}.tb", 200) + read_tail(self.dir / f"{t.name}.tb", 3000)
        ev["traceback_tail"] = tb
        ev.update(_crash_frame(read_head(self.dir / f"{t.name}.tb", CRASH_DUMP_BYTES)))
        try:
            ev["exception"] = json.loads((self.dir / f"{t.name}.exc").read_text())
        except (OSError, ValueError):
            pass
        if h is not None:
            ev["last_heartbeat_age_s"] = round(now - h.written_at, 3)
            ev["last_step_age_s"] = round(now - h.last_progress, 3)
            ev["state_at_death"] = h.state_name
        ev["killed_by_flow1"] = t.killed
        ev.update(exit_signal_from(tb, h, t.killed, "exception" in ev))
        if t.ending == "SIGKILL" and ev.get("signal_inferred"):   # seen, not inferred
            ev.update(signal_inferred=False, signal_seen="pending")
        if t.ending:
            ev["seen_ending"] = t.ending
        if h is not None and h.state == STOPPED:
            ev["kind"] = "stopped"
        self._remove(t.name)
        return ev

    def _event(self, kind: str, t: Tracked, now: float, **kw: Any) -> dict[str, Any]:
        h = t.header
        return {"kind": kind, "key": t.key, "name": t.name, "pid": t.pid, "ts": now,
                "worker_index": t.meta.get("worker_index"), "eval": t.meta.get("eval", False),
                "actor_id": t.meta.get("actor_id"), "node_id": t.meta.get("node_id"),
                "role": t.meta.get("role", "env_runner"), "steps": h.steps if h else None, **kw}

    def _keep_open(self, name: str, lock_name: str, dfd: int | None) -> None:
        """Keep a descriptor per tracked lock file: no open/close per file per scan. Our
        descriptors do not touch the holder's record locks (those are per process)."""
        try:
            self._fds[name] = os.open(lock_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:  # out of descriptors: probe this one by name each scan
            pass

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._dfd is not None:
            os.close(self._dfd)
            self._dfd = None

    def _remove(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self.tracked.pop(name, None)
        for suffix in SUFFIXES:
            try:
                os.unlink(self.dir / f"{name}{suffix}")
            except OSError:
                pass

    def summary(self) -> dict[str, Any]:
        now = time.time()
        workers = []
        for t in self.tracked.values():
            h = t.header
            workers.append({"key": t.key, "pid": t.pid, "worker_index": t.meta.get("worker_index"),
                            "eval": t.meta.get("eval", False), "role": t.meta.get("role", "env_runner"),
                            "stalled": t.stalled,
                            "steps": h.steps if h else None,
                            "step_time_ema": h.step_time_ema if h else None, "rss": h.rss if h else None,
                            "heartbeat_age_s": round(now - h.written_at, 3) if h else None,
                            "state": h.state_name if h else None})
        return {"workers": workers, "scans": self.scans, "last_scan_ms": round(self.last_scan_s * 1e3, 3)}


#: faulthandler's first line for each fatal signal it handles
_FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
          "Floating-point exception": "SIGFPE", "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def exit_signal_from(tb: str, header: Header | None, killed_by_flow1: bool, had_exception: bool) -> dict[str, Any]:
    """How the process ended, from what it left behind.

    A fatal signal Python can catch leaves faulthandler's report; an exit through the
    interpreter marks the header EXITING; a graceful stop marks it STOPPED; an error that left
    sample() or an os._exit was recorded first (``had_exception``). A process that left none
    of these ran no exit code: SIGKILL (a kill -9, the OOM killer, flow1's stall_action="kill")
    or a forced exit from C (ray.kill) -- inferred, and said so.
    """
    for text, sig in _FATAL.items():
        if f"Fatal Python error: {text}" in tb:
            return {"exit_signal": sig, "signal_inferred": False}
    if killed_by_flow1:
        return {"exit_signal": "SIGKILL", "signal_inferred": False}
    if header is not None and header.state == STOPPED:
        return {"exit_signal": None, "exit": "stopped"}
    if header is not None and header.state == EXITING:
        return {"exit_signal": None, "exit": "interpreter exit"}
    if had_exception:   # it recorded why it was ending, then ended without its exit code (RLlib's ray.kill)
        return {"exit_signal": None, "exit": "ended after the error it recorded"}
    return {"exit_signal": "SIGKILL", "signal_inferred": True}
