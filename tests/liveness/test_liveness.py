"""Liveness with real processes and real signals, no Ray: lock, heartbeat, stack, death."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from flow1_ray.common import codes as C
from flow1_ray.hub.lockscan import LockScanner
from flow1_ray.liveness.holder import WorkerLiveness
from flow1_ray.liveness.lockfile import holder_pid
from flow1_ray.liveness.lockdir import LockDirError, fresh_dir, private_dir, verify_private


def _wait(scanner: LockScanner, kind: str, timeout: float = 10.0) -> list[dict]:
    seen: list[dict] = []
    t0 = time.time()
    while time.time() - t0 < timeout:
        seen += scanner.scan()
        if any(e["kind"] == kind for e in seen):
            return seen
        time.sleep(0.02)
    raise AssertionError(f"no {kind!r} transition in {timeout} s; saw {[e['kind'] for e in seen]}")


def _stuck_in_here(seconds: float) -> None:
    time.sleep(seconds)


def step(action: int) -> None:
    """An env's step over a C call that dereferences NULL (a native crash, SIGSEGV)."""
    import ctypes

    ctypes.string_at(0)


def _child(directory: Path, key: str, behaviour: str, ready_w: int) -> None:
    """Runs in a forked child: hold a lock, then behave."""
    try:
        lv = WorkerLiveness(directory, f"{key}.{os.getpid()}", {"worker_index": 1}, heartbeat_interval_s=0.05,
                            stall_timeout_s=0.5)
        if behaviour == "fork":
            if os.fork() == 0:  # a grandchild that inherits the open lock file and outlives us
                time.sleep(30)
                os._exit(0)
        os.write(ready_w, b"x")
        if behaviour == "hang":
            lv.busy()
            _stuck_in_here(60)
        elif behaviour == "hang in step":   # the runner's flight recorder dumps on the stall
            lv.on_stall = lambda stalled_s, frame: [f"repro/env_runner1-pid{os.getpid()}-001-env_hung"]
            lv.busy()
            lv.step_begin()
            _stuck_in_here(60)
        elif behaviour == "stop":
            lv.close()
            os._exit(0)
        elif behaviour == "native":
            time.sleep(0.2)
            step(0)
        time.sleep(60)
    finally:
        os._exit(0)


def _spawn(directory: Path, key: str, behaviour: str) -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(directory, key, behaviour, w)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    return pid


@pytest.fixture
def lock_dir(tmp_path):
    return private_dir(tmp_path / "locks")


def test_sigkill_is_seen_even_when_a_forked_child_keeps_the_file_open(lock_dir):
    pid = _spawn(lock_dir, "runnerA", "fork")
    sc = LockScanner(lock_dir, stall_timeout_s=5)
    assert [e["kind"] for e in sc.scan()] == ["new"]
    grandchildren = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    (died,) = [e for e in _wait(sc, "died") if e["kind"] == "died"]
    assert died["exit_signal"] == "SIGKILL" and died["signal_inferred"] is True
    assert grandchildren and all(_alive(g) for g in grandchildren), "the child still holds the file"
    for g in grandchildren:
        os.kill(g, signal.SIGKILL)


def test_sigsegv_is_named_from_faulthandlers_report(lock_dir):
    pid = _spawn(lock_dir, "runnerB", "sleep")
    sc = LockScanner(lock_dir, stall_timeout_s=5)
    sc.scan()
    os.kill(pid, signal.SIGSEGV)
    os.waitpid(pid, 0)
    (died,) = [e for e in _wait(sc, "died") if e["kind"] == "died"]
    assert died["exit_signal"] == "SIGSEGV" and died["signal_inferred"] is False
    assert "Fatal Python error: Segmentation fault" in died["traceback_tail"]
    assert not list(lock_dir.iterdir()), "a reported death leaves no files behind"


def test_a_native_crash_names_the_frame_its_crashing_thread_was_in(lock_dir):
    """SIGSEGV inside a C call under a Python function: the WORKER_DIED names that function
    (the innermost frame outside flow1 and the standard library: ctypes is skipped)."""
    from flow1_ray.checks.run.incidents import MonitorCore

    pid = _spawn(lock_dir, "runnerN", "native")
    sc = LockScanner(lock_dir, stall_timeout_s=5)
    sc.scan()
    os.waitpid(pid, 0)
    (died,) = [e for e in _wait(sc, "died") if e["kind"] == "died"]
    assert died["exit_signal"] == "SIGSEGV" and died["crash_frame"].startswith("step (test_liveness.py:"), died
    ev = MonitorCore("run", 5.0, "none").died_event(died, {"worker_index": 1, "pid": pid})
    assert "signal SIGSEGV (a native crash, no Python exception): its crashing thread was in step (test_liveness.py:" \
        in ev.message, ev.message
    assert "ctypes" in ev.evidence["crash_stack"] and ev.status == C.FAIL


def test_hang_gives_a_stall_with_the_stuck_function_then_kill(lock_dir):
    pid = _spawn(lock_dir, "runnerC", "hang")
    sc = LockScanner(lock_dir, stall_timeout_s=0.5, stall_action="kill")
    (stalled,) = [e for e in _wait(sc, "stalled") if e["kind"] == "stalled"]
    assert "_stuck_in_here" in stalled["stack"] and stalled["stack_source"] == "watchdog"
    assert stalled["killed"] is True
    os.waitpid(pid, 0)
    (died,) = [e for e in _wait(sc, "died") if e["kind"] == "died"]
    assert died["killed_by_flow1"] is True and died["exit_signal"] == "SIGKILL" and not died["signal_inferred"]


def test_a_stall_inside_a_step_names_the_flight_recorders_entry(lock_dir):
    """The watchdog calls ``on_stall`` (the runner's dump) before it writes the stack: the
    probe's stall, and the WORKER_STALLED made of it, name the entry the dump went to."""
    from flow1_ray.checks.run.incidents import MonitorCore

    pid = _spawn(lock_dir, "runnerH", "hang in step")
    sc = LockScanner(lock_dir, stall_timeout_s=0.5)
    (stalled,) = [e for e in _wait(sc, "stalled") if e["kind"] == "stalled"]
    entry = f"repro/env_runner1-pid{pid}-001-env_hung"
    assert stalled["repro"] == [entry] and "_stuck_in_here" in stalled["stack"], stalled
    (ev,) = MonitorCore("run", 0.5, "report").events_for("node", [stalled])
    assert ev.evidence["repro"] == [entry]
    assert ev.message.endswith(f"; its sub-env's life is in {entry} (flow1 replay plays it to the hang)"), ev.message
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_graceful_stop_is_not_a_death(lock_dir):
    pid = _spawn(lock_dir, "runnerD", "stop")
    os.waitpid(pid, 0)
    sc = LockScanner(lock_dir, stall_timeout_s=5)
    assert sc.scan() == []  # a stopped runner's leftovers are cleaned, not reported
    assert not list(lock_dir.iterdir())


def test_a_new_process_on_a_known_key_is_a_restart(lock_dir):
    sc = LockScanner(lock_dir, stall_timeout_s=5)
    first = _spawn(lock_dir, "runnerE", "sleep")
    sc.scan()
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    _wait(sc, "died")
    second = _spawn(lock_dir, "runnerE", "sleep")
    (restart,) = [e for e in _wait(sc, "restarted") if e["kind"] == "restarted"]
    assert restart["previous_pid"] == first and restart["pid"] == second
    os.kill(second, signal.SIGKILL)
    os.waitpid(second, 0)


def test_holder_pid_and_no_symlinks(lock_dir, tmp_path):
    pid = _spawn(lock_dir, "runnerF", "sleep")
    (lock,) = lock_dir.glob("*.lock")
    assert holder_pid(lock) == pid
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert holder_pid(lock) is None
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, lock_dir / "evil.1.lock")
    with pytest.raises(OSError):
        WorkerLiveness(lock_dir, "evil.1", {}, arm_faulthandler=False)
    link = tmp_path / "linkdir"
    os.symlink(tmp_path, link)
    with pytest.raises(LockDirError, match="symlink"):
        private_dir(link)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another uid needs root")
def test_a_lock_directory_of_another_uid_is_refused(tmp_path):
    """A directory someone else made (really owned by another uid) is refused with its
    reason, never adopted."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(LockDirError, match="owned by uid 65534"):
        private_dir(theirs)


def test_a_lock_directory_open_to_others_is_refused_and_a_fresh_one_is_private(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(LockDirError, match="mode 755"):
        verify_private(loose)
    a, b = fresh_dir(tmp_path, "job01"), fresh_dir(tmp_path, "job01")
    assert a != b and a.name.startswith("flow1-job01-")
    assert (a.stat().st_mode & 0o777) == 0o700 and a.stat().st_uid == os.getuid()


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_sweep_removes_only_old_unheld_locks(tmp_path):
    from flow1_ray.liveness.lockdir import sweep_stale

    root = tmp_path / "root"
    d = fresh_dir(root, "job1")
    live = _spawn(d, "alive", "sleep")
    (d / "dead.123.lock").write_text("")
    (d / "dead.123.tb").write_text("")
    (d / "fresh.456.lock").write_text("")
    old = time.time() - 7200
    for p in (d / "dead.123.lock", d / f"alive.{live}.lock"):
        os.utime(p, (old, old))
    assert sweep_stale(root, older_than_s=3600) == 1
    assert sorted(p.name for p in d.iterdir() if p.suffix == ".lock") == sorted([f"alive.{live}.lock", "fresh.456.lock"])
    assert not (d / "dead.123.tb").exists()
    os.kill(live, signal.SIGKILL)
    os.waitpid(live, 0)
