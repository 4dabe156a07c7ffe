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
