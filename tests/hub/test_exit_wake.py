"""A death does not wait for the probe's next scan: real processes holding real lock files, a
real SIGSEGV and SIGKILL, the probe's loop on its thread (no Ray: the lock directory given)."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from flow1_ray.hub.exit_wake import ExitWake
from flow1_ray.hub.probe import ProbeLoop
from flow1_ray.liveness.holder import WorkerLiveness
from flow1_ray.liveness.lockdir import private_dir

#: the probe's scan interval in these tests: a death reported well before it came from the wake
INTERVAL_S = 30.0


def _holder(directory, key: str, slow_after_report_s: float = 0.0) -> int:
    """A forked child holding a lock file under ``key`` (sleeps until killed). With
    ``slow_after_report_s``, a SIGSEGV's handler after faulthandler's (installed first, so
    faulthandler chains to it) keeps the process alive that long after the report is written,
    as a process's teardown or a slow native handler does."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if slow_after_report_s:   # pytest's faulthandler (inherited) would otherwise stay first
                faulthandler.disable()
                signal.signal(signal.SIGSEGV, lambda *a: (time.sleep(slow_after_report_s), os._exit(139)))
            WorkerLiveness(directory, f"{key}.{os.getpid()}", {"worker_index": 1}, heartbeat_interval_s=0.05,
                           stall_timeout_s=30)
            os.write(w, b"x")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    return pid


def _tracking(lock_dir, key: str):
    """A probe loop scanning every INTERVAL_S, told of ``key`` and back in its wait once the
    holder is tracked; (the loop, its reports as (time, changes), an event set at a death)."""
    reports: list[tuple[float, list]] = []
    got = threading.Event()

    def report(node, changes, summary):
        reports.append((time.monotonic(), changes))
        if any(c["kind"] == "died" for c in changes):
            got.set()

    loop = ProbeLoop("job", "node", 60.0, INTERVAL_S, 3600.0, "report", report, error=lambda *a: None,
                     lock_dir=lock_dir)
    loop.set_keys([key], [])    # a scan at once for the new key: the runner is tracked
    deadline = time.monotonic() + 10.0
    while not any(c["kind"] == "new" for _, cs in reports for c in cs) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reports, "the new key was not scanned for"
    return loop, reports, got


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_a_killed_holder_is_reported_at_once_not_at_the_next_scan(tmp_path, sig):
    """The loop scans every 30 s; the death arrives within a few seconds of the kill (a
    busy-machine margin: the scan and faulthandler's report take milliseconds), so only the
    exit's wake can have started that scan."""
    lock_dir = private_dir(tmp_path / "locks")
    pid = _holder(lock_dir, "runnerA")
    loop, reports, got = _tracking(lock_dir, "runnerA")
    try:
        time.sleep(0.05)                  # the loop is back in its wait, holding the runner's pidfd
        t0 = time.monotonic()
        os.kill(pid, sig)
        assert got.wait(10.0), reports
        os.waitpid(pid, 0)
        (died,) = [c for _, cs in reports for c in cs if c["kind"] == "died"]
        assert died["pid"] == pid and died["exit_signal"] == signal.Signals(sig).name
        assert reports[-1][0] - t0 < 5.0 < INTERVAL_S
    finally:
        loop.stop()


def test_a_fatal_signal_report_wakes_the_probe_before_the_process_ends(tmp_path):
    """faulthandler's report of a SIGSEGV is written, then the process lives on 8 s (a slow
    handler chained after it): with scans 30 s apart, the death is named at the report's write
    (the lock directory's inotify watch), not at the exit's pidfd nor at the next scan."""
    lock_dir = private_dir(tmp_path / "locks")
    pid = _holder(lock_dir, "runnerB", slow_after_report_s=8.0)
    loop, reports, got = _tracking(lock_dir, "runnerB")
    try:
        time.sleep(0.2)                   # the loop is back in its wait, the directory watched
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSEGV)
        assert got.wait(10.0), reports
        # a busy-machine margin: the report and the scan take milliseconds; the exit comes at 8 s
        assert reports[-1][0] - t0 < 4.0, reports[-1][0] - t0
        (died,) = [c for _, cs in reports for c in cs if c["kind"] == "died"]
        assert died["pid"] == pid and "Fatal Python error: Segmentation fault" in died["traceback_tail"]
    finally:
        loop.stop()
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_wake_ends_at_a_process_exit_at_stop_and_never_spins_on_a_zombie():
    w = ExitWake()
    try:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
        w.watch({p.pid})
        t0 = time.monotonic()
        assert w.wait(30.0) is False and time.monotonic() - t0 < 20.0
        w.watch({p.pid})                      # exited, not reaped yet: not watched again
        t0 = time.monotonic()
        assert w.wait(0.3) is False and time.monotonic() - t0 >= 0.25
        p.wait()
        threading.Timer(0.1, w.stop).start()
        t0 = time.monotonic()
        assert w.wait(30.0) is True and time.monotonic() - t0 < 20.0
    finally:
        w.close()


def test_the_kernel_shows_an_ending_process_and_not_a_living_one_or_a_zombie():
    """A SIGKILL pending (the thread's or the shared set) reads as "SIGKILL"; this process and
    an exited child not yet reaped (a zombie: its files are closed, its lock released) are
    not ending. (A pending SIGKILL cannot be held here: the kernel acts on it at once.)"""
    from flow1_ray.hub.exit_wake import ending, pending_sigkill

    mine = open(f"/proc/{os.getpid()}/status", "rb").read()
    assert not pending_sigkill(mine) and ending(os.getpid()) is None
    assert pending_sigkill(b"Name:\tx\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n")
    assert pending_sigkill(b"SigPnd:\t0000000000000000\nShdPnd:\t0000000000004100\n")
    assert not pending_sigkill(b"SigPnd:\t0000000000000200\nShdPnd:\t0000000000000000\n")   # SIGSEGV alone
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while open(f"/proc/{child.pid}/stat", "rb").read().split(b") ")[1][:1] != b"Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ending(child.pid) is None
    child.wait()
    assert ending(child.pid) is None   # gone
