"""The run's last word when its hub has no time to say it.

The hub writes an unclean stop record as the Algorithm's process dies under it
(:meth:`flow1_ray.hub.hub.HubCore._watch_owner`), but Ray decides how long it lives after
that death: ~1.4 s measured on an idle node, and on a busy 2-core machine sometimes too
little for the hub's watcher thread to run at all. A driver that started its own Ray
(``ray.init()``: the raylet shares its fate) and is then OOM-killed is the common case.

So the hub starts this small process beside it, in its own session and not its child (a
double fork: a worker's children are ended with the worker), which waits on two pids:

- the hub dies first, the Algorithm's process living on (Ray restarts it, and the new hub starts its own last word; or the run
  was stopped and its hub ended): nothing to say, it exits;
- the Algorithm's process dies first: it waits up to :data:`GRACE_S` for the hub to end,
  and writes the unclean stop record only if the hub left none, with the last iteration of
  the hub's heartbeat (the last one written; rows the hub held unflushed are lost either way).

It holds no Ray and imports only the standard library until it has to write (~10 MB).

    python -m flow1_ray.hub.lastword RUN_DIR OWNER_PID HUB_PID GRACE_S
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

#: after the Algorithm's process died: how long the hub has to end (and write its own record)
GRACE_S = 10.0
#: how often pids are polled where pidfds are missing
POLL_S = 0.2


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``; -1 when the process is gone already; None where pidfds are missing."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1
    except (AttributeError, OSError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True


def first_to_end(pids: list[int], timeout: float | None = None) -> int | None:
    """The first of ``pids`` to end (the first of the list if several have), or None when
    ``timeout`` seconds passed with all of them alive."""
    fds = {pid: _pidfd(pid) for pid in pids}
    try:
        for pid, fd in fds.items():
            if fd == -1:
                return pid
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if all(fd is not None for fd in fds.values()):
                ready, _, _ = select.select(list(fds.values()), [], [], left)
                for pid, fd in fds.items():
                    if fd in ready:
                        return pid
            else:
                for pid in pids:
                    if not _alive(pid):
                        return pid
                time.sleep(POLL_S if left is None else min(POLL_S, left))
            if deadline is not None and time.monotonic() >= deadline:
                return None
    finally:
        for fd in fds.values():
            if fd is not None and fd >= 0:
                os.close(fd)


def watch(run_dir: str, owner: int, hub: int, grace_s: float = GRACE_S) -> bool:
    """Wait as the module says; True when it wrote the stop record."""
    if first_to_end([hub, owner]) == hub and _alive(owner):
        return False
    first_to_end([hub], grace_s)
    from ..rundir.runrecord import HEARTBEAT_JSON, STOP_JSON, read_json, write_stop

    stop, problem = read_json(run_dir, STOP_JSON)
    if stop is not None or problem is not None:   # the hub's own record (a torn one too) stands
        return False
    beat, _ = read_json(run_dir, HEARTBEAT_JSON)
    write_stop(run_dir, (beat or {}).get("iteration"),
               f"the Algorithm's process (pid {owner}) died without stopping the run (a SIGKILL, the OOM killer, "
               f"a crash) and Ray ended flow1's hub (pid {hub}) before it could write this; flow1's last-word "
               f"process wrote it: rows the hub had not flushed are lost", clean=False, written_by="last-word")
    return True


def start(run_dir: str, owner: int, grace_s: float = GRACE_S) -> subprocess.Popen | None:
    """Start the last word of the calling hub for ``owner``; the caller reaps the returned
    launcher (it exits at once, its child living on). None when it cannot start."""
    try:
        return subprocess.Popen([sys.executable, "-m", __name__, str(run_dir), str(int(owner)), str(os.getpid()),
                                 str(grace_s)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except Exception:
        return None


def main(argv: list[str]) -> int:
    run_dir, owner, hub, grace_s = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    if os.fork():        # the launcher ends at once: the watcher is no child of the hub
        return 0
    try:
        watch(run_dir, owner, hub, grace_s)
    except Exception:
        return 1
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
