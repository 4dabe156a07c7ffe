"""The node probe: one per node, reads every lock file of its node, reports changes at once.

:class:`ProbeLoop` runs scans every ``probe_interval_s`` on a thread (and at once when a tracked
process exits: :mod:`flow1_ray.hub.exit_wake`) and hands transitions
(``new``, ``restarted``, ``died``, ``stopped``, ``stalled``, ``recovered``) to the monitor as
soon as a scan finds one; otherwise one summary per ``heartbeat_interval_s``: one report per
node per period, never per worker. The hub's own node is scanned by a loop inside the hub;
every other node gets a NodeProbe actor.

The engine, :class:`~flow1_ray.hub.lockscan.LockScanner` (no Ray: the lock-file format and
the transition kinds), is in lockscan.py; this module holds its loop and the NodeProbe actor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from ..liveness.lockdir import job_lock_dir, sweep_stale
from .exit_wake import ExitWake
from .lockscan import LockScanner

MAX_BUSY = 5.0  # scan interval >= 5x the last scan's duration
FAILURES_OFF = 5  # scans failed in a row before the probe says its node is not watched
WATCH_DIR_TRIES = 20  # scans that try to watch the lock directory (inotify refused: the timed wait alone)


class ProbeLoop:
    """One node's scan loop on a thread: scans every ``probe_interval_s`` and hands
    transitions to ``report(node_id, changes, summary)`` as soon as a scan finds one, else
    one summary per ``heartbeat_interval_s``. It runs inside the run's hub for the hub's own
    node (``report`` is then a plain call) and inside a NodeProbe actor on every other node
    (``report`` is then a fire-and-forget call to the hub)."""

    def __init__(self, job_id: str, node_id: str, stall_timeout_s: float, probe_interval_s: float,
                 heartbeat_interval_s: float, stall_action: str, report: Callable[[str, list, dict], Any],
                 error: Callable[[str, str], Any], off: Callable[[str, str], Any] | None = None,
                 lock_dir: Any = None) -> None:
        """``off(node_id, error)`` is told once when scans keep failing (the node is then
        not watched); raises when the node's lock directory cannot be used. ``lock_dir``: the
        directory to scan (default: the job's on this node, from Ray's KV)."""
        from ..checks.run.contention import node_load

        self._node_load = node_load
        self.node_id = node_id
        self.report, self.error, self.off = report, error, off
        self.failures = 0          # scans failed in a row
        self.keys: set[str] = set()
        self.local_prefixes: tuple[str, ...] = ()
        sweep_stale()
        self.scanner = LockScanner(lock_dir or job_lock_dir(job_id, node_id), stall_timeout_s, key_filter=self._ours,
                                   stall_action=stall_action)
        self.interval = probe_interval_s
        self.summary_every = heartbeat_interval_s
        self._wake = ExitWake()   # a tracked process's exit starts the next scan at once
        self._thread = threading.Thread(target=self._loop, daemon=True, name="flow1-probe")
        self._thread.start()

    def _ours(self, key: str) -> bool:
        return key in self.keys or (bool(self.local_prefixes) and key.startswith(self.local_prefixes))

    def set_keys(self, keys: list[str], local_prefixes: list[str]) -> int:
        self.keys = set(keys)
        self.local_prefixes = tuple(local_prefixes)
        self._wake.poke()   # scan for them now, not at the next interval
        return len(self.keys)

    def seed(self, known: dict[str, dict]) -> int:
        self.scanner.seed(known)
        return len(known)

    def _loop(self) -> None:
        last_summary = 0.0
        tries = 0   # to watch the lock directory: a fatal-signal report written there wakes the loop too
        # at thousands of lock files a scan takes tens of ms: keep the probe under
        # ~1/MAX_BUSY of a core by spacing scans, detection stays well under 0.5 s; a death
        # does not wait for the next scan (a pidfd per tracked process wakes the loop)
        while not self._wake.wait(max(self.interval, MAX_BUSY * self.scanner.last_scan_s)):
            try:
                changes = self.scanner.scan()
                self._wake.watch({t.pid for t in self.scanner.tracked.values()})
                if tries < WATCH_DIR_TRIES and self.scanner.tracked:   # the directory exists once a lock is held
                    tries = WATCH_DIR_TRIES if self._wake.watch_dir(self.scanner.dir) else tries + 1
                now = time.monotonic()
                if changes or now - last_summary >= self.summary_every:
                    summary = self.scanner.summary()
                    summary["load"] = self._node_load()
                    self.report(self.node_id, changes, summary)
                    last_summary = now
                self.failures = 0
            except Exception as e:  # keep probing whatever happens; persistent failure is said
                self.failures += 1
                try:
                    self.error(self.node_id, f"{type(e).__name__}: {e}")
                    if self.failures == FAILURES_OFF and self.off is not None:
                        self.off(self.node_id, f"{FAILURES_OFF} scans in a row failed: {type(e).__name__}: {e}")
                except Exception:
                    pass

    def stop(self) -> bool:
        """End of the run: one last scan clears the files of runners that stopped."""
        self._wake.stop()
        self._thread.join(timeout=2.0)
        try:
            self.scanner.scan()
        finally:
            self.scanner.close()
            if not self._thread.is_alive():
                self._wake.close()
        try:   # the job's directory on this node, when no lock file is left in it
            self.scanner.dir.rmdir()
        except OSError:
            pass
        return True

    def info(self) -> dict:
        return {"node_id": self.node_id, "scans": self.scanner.scans, "pid": os.getpid()}


def make_probe_actor():
    """The NodeProbe Ray actor class: a :class:`ProbeLoop` on a node other than the hub's
    (built lazily so this module imports without Ray)."""
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1)
    class NodeProbe:
        def __init__(self, job_id: str, hub: Any, node_id: str, stall_timeout_s: float,
                     probe_interval_s: float, heartbeat_interval_s: float, stall_action: str) -> None:
            """Never raises (a constructor that raises would be restarted forever): a probe
            that cannot scan answers its ping with the error, and the hub says so."""
            self.loop: ProbeLoop | None = None
            self.error = ""
            try:
                self.loop = ProbeLoop(job_id, node_id, stall_timeout_s, probe_interval_s, heartbeat_interval_s,
                                      stall_action, report=lambda *a: hub.report.remote(*a),
                                      error=lambda *a: hub.probe_error.remote(*a),
                                      off=lambda *a: hub.probe_off.remote(*a))
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"[:300]

        def set_keys(self, keys: list[str], local_prefixes: list[str]) -> int:
            return self.loop.set_keys(keys, local_prefixes) if self.loop else 0

        def seed(self, known: dict[str, dict]) -> int:
            return self.loop.seed(known) if self.loop else 0

        def stop(self) -> bool:
            return self.loop.stop() if self.loop else True

        def ping(self) -> dict:
            return self.loop.info() if self.loop else {"error": self.error, "pid": os.getpid()}

    return NodeProbe
