"""Back-pressure with a real slow Recorder: batches beyond max_pending_calls are dropped and
counted, the sender never blocks, and the Recorder turns the count into SAMPLES_DROPPED."""

from __future__ import annotations

import time

import pytest

from flow1_ray import codes as C
from flow1_ray.events import Event
from flow1_ray.worker.sender import Sender

pytestmark = pytest.mark.slow


def test_full_queue_drops_and_counts_without_blocking(ray_session, tmp_path):
    import ray

    from flow1_ray.actors.recorder import make_recorder_actor

    Recorder = make_recorder_actor()

    @ray.remote(num_cpus=0)
    class SlowRecorder(Recorder.__ray_actor_class__):  # the real Recorder, with a stuck disk
        def ingest(self, batch):
            time.sleep(0.5)
            super().ingest(batch)

    rec = SlowRecorder.options(max_pending_calls=2, max_concurrency=1).remote(str(tmp_path), "r", 0.2)
    ray.get(rec.ping.remote())
    sender = Sender("w1", lambda: rec, worker_index=1)
    ev = Event(C.REWARD_NAN, "reward nan at step 3", {"first_step": 3}).to_dict()
    t0 = time.perf_counter()
    results = [sender.send([ev]) for _ in range(10)]
    assert time.perf_counter() - t0 < 0.5, "sending never waits for the Recorder"
    assert sum(results) == 2 and sender.dropped == 8
    time.sleep(1.5)
    assert sender.send([ev])  # the queue drained: the count travels with the next batch
    time.sleep(1.0)
    status = ray.get(rec.status.remote())
    assert status["samples_dropped"] == 8
    ray.get(rec.flush.remote())
    from flow1_ray import load_events
    codes = load_events(tmp_path).column("code").to_pylist()
    assert codes.count(C.SAMPLES_DROPPED) == 1 and codes.count(C.REWARD_NAN) == 3
    ray.kill(rec)


def test_events_wait_until_the_run_is_reachable():
    sender = Sender("w1", lambda: None)
    ev = Event(C.REWARD_NAN, "x").to_dict()
    for _ in range(3):
        assert not sender.send([ev])
    assert len(sender.waiting) == 3 and sender.dropped == 0 and sender.has_news
