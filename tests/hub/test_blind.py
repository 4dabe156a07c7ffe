"""flow1 is never silently blind: every watcher that turns off says so (WATCHER_OFF), in the
run directory and in ``result["flow1"]``, so that the verdict can never be a plain PASS. (A
squatted predictable temp path, which used to blind a run, is tests/live/test_run_life.py's.)"""

from __future__ import annotations


from flow1_ray.common import codes as C
from flow1_ray import load_events
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.common.events import Event


def test_a_recorder_that_cannot_write_keeps_its_rows_and_says_so(tmp_path):
    """A table folder that cannot be written (here a file in its place): the rows stay in
    memory, one WATCHER_OFF says the Recorder is not writing, and once the folder can be
    written again every row lands, the WATCHER_OFF with them."""
    rec = RecorderCore(str(tmp_path), "run-w")
    (tmp_path / "metrics").write_text("in the way")
    rec.add_metrics({"iteration": 1, "x": 1.0})
    rec.add_events([Event(C.WORKER_DIED, "worker 1 died", {}, worker_index=1).to_dict()])
    rec.flush()
    st = rec.status()
    assert st["write_failures"] == 1 and st["watchers_off"] and "run directory" in st["watchers_off"][0]
    assert rec.lines_since(0)[0][-1].count("| FLOW1 | WARN | WATCHER_OFF recorder is off") == 1
    (tmp_path / "metrics").unlink()
    rec.add_metrics({"iteration": 2, "x": 2.0})
    rec.flush()
    assert rec.status()["write_failures"] == 1
    from flow1_ray import load_metrics

    assert load_metrics(tmp_path).column("iteration").to_pylist() == [1, 2]
    codes = [e["code"] for e in load_events(tmp_path).to_pylist()]
    assert codes.count(C.WATCHER_OFF) == 1 and codes.count(C.WORKER_DIED) == 1
