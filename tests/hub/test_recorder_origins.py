"""The Recorder keeps each process's last WARN/FAIL findings, bounded, for its death's likely
origin (the monitor asks for them when the process dies)."""

from __future__ import annotations

from flow1_ray.common import codes as C
from flow1_ray.common.events import Event
from flow1_ray.hub import recorder as R


def test_the_last_findings_of_each_process_are_kept_bounded_and_oldest_first(tmp_path):
    core = R.RecorderCore(tmp_path, "run", 60.0, {})
    for i in range(R.FINDINGS_PER_PID + 2):
        core.add_events([Event(C.OBS_NAN_INF, f"nan {i}", {}, pid=7).to_dict()])
    core.add_events([Event(C.OBS_NAN_INF, "passed", {}, status=C.PASS, pid=7).to_dict()])
    kept = core.findings_of(7)
    assert [f["message"] for f in kept] == [f"nan {i}" for i in range(2, R.FINDINGS_PER_PID + 2)]
    assert kept[-1]["status"] == C.FAIL and isinstance(kept[-1]["ts"], float)
    assert core.findings_of(8) == []
    for pid in range(R.PIDS_KEPT + 10):
        core.add_events([Event(C.REWARD_NAN, "x", {}, pid=1000 + pid).to_dict()])
    assert len(core.findings_by_pid) == R.PIDS_KEPT and core.findings_of(1000) == []


def test_a_death_is_written_at_once_and_another_warn_waits_for_the_flush_gap(tmp_path, monkeypatch):
    """The Recorder's thread spaces its flushes (MIN_FLUSH_GAP_S) so that a burst of findings is
    one file part; a death or a lost node (URGENT_CODES) must not wait for that gap. With the gap
    made 4 s, a WORKER_DIED reaches flow1.log within 2 s of a flush, a WARN does not (the false
    failure needs the recorder's thread to wait > 2 s for its turn on the CPU)."""
    import time

    monkeypatch.setattr(R, "MIN_FLUSH_GAP_S", 4.0)
    rec = R.RecorderService(str(tmp_path / "run"), "r", flush_interval_s=60.0)
    log = tmp_path / "run" / "flow1.log"

    def written(text: str, within: float) -> bool:
        end = time.monotonic() + within
        while time.monotonic() < end:
            if log.exists() and text in log.read_text():
                return True
            time.sleep(0.01)
        return False

    try:
        rec.add_events([Event(C.REWARD_SPIKES, "first warn", {}, run_id="r").to_dict()])
        assert written("first warn", 6.0)      # the thread's first flush: after one gap
        rec.add_events([Event(C.REWARD_SCALE, "second warn", {}, run_id="r").to_dict()])
        rec.add_events([Event(C.WORKER_DIED, "train worker 1 (pid 7) died", {}, run_id="r", pid=7).to_dict()])
        assert written("train worker 1 (pid 7) died", 2.0)
        rec.add_events([Event(C.REWARD_SPARSE, "third warn", {}, run_id="r", status=C.WARN).to_dict()])
        assert not written("third warn", 2.0)
    finally:
        rec.close()
