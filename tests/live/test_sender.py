"""Back-pressure with a real slow Recorder: batches beyond max_pending_calls are dropped and
counted, the sender never blocks, and the Recorder turns the count into SAMPLES_DROPPED."""

from __future__ import annotations

import time

import pytest

from flow1_ray.common import codes as C
from flow1_ray.common.events import Event
from flow1_ray.runner.sender import Sender

pytestmark = pytest.mark.slow


def _drained(actor, timeout_s: float = 60.0) -> None:
    """Wait until the actor has served every call sent before (it serves them in order);
    on a loaded machine this takes longer than the calls' own 0.5 s each."""
    import ray

    deadline = time.time() + timeout_s
    while True:
        try:
            ray.get(actor.ping.remote(), timeout=timeout_s)
            return
        except ray.exceptions.PendingCallsLimitExceeded:  # still queued: not drained yet
            assert time.time() < deadline, "the actor never drained its queue"
            time.sleep(0.1)


def _hub_args(tmp_path, run_id: str = "r", states: bool = False, **opts) -> tuple:
    import ray

    from flow1_ray.options import Flow1Options

    o = Flow1Options().with_overrides(flush_interval_s=0.2, **opts).as_dict()
    return str(tmp_path), run_id, ray.get_runtime_context().get_job_id(), o, states


def test_full_queue_drops_and_counts_without_blocking(ray_session, tmp_path):
    import ray

    from flow1_ray.hub.hub import CONCURRENCY, make_hub_actor

    Hub = make_hub_actor()

    @ray.remote(num_cpus=0, concurrency_groups=CONCURRENCY)
    class SlowHub(Hub.__ray_actor_class__):  # the real hub, with a stuck disk
        @ray.method(concurrency_group="recorder")
        def ingest(self, batch):
            time.sleep(0.5)
            super().ingest(batch)

    rec = SlowHub.options(max_pending_calls=2).remote(*_hub_args(tmp_path))
    ray.get(rec.ping.remote())
    sender = Sender("w1", lambda: rec, worker_index=1)
    ev = Event(C.REWARD_NAN, "reward nan at step 3", {"first_step": 3}).to_dict()
    t0 = time.perf_counter()
    results = [sender.send([ev]) for _ in range(10)]
    assert time.perf_counter() - t0 < 0.5, "sending never waits for the Recorder"
    assert sum(results) == 2 and sender.dropped == 8
    _drained(rec)
    assert sender.send([ev])  # the queue drained: the count travels with the next batch
    _drained(rec)
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


@pytest.mark.parametrize("where", ["hub", "own-actor"])
def test_state_batches_reach_the_clusterer_and_its_snapshot_the_recorder(ray_session, tmp_path, where):
    """The real clusterer (inside the hub, or its own actor as with a GPU share) and the
    hub's Recorder: a runner's sender drop count reaches the Recorder as SAMPLES_DROPPED, a
    snapshot is computed off the request path, and finish_states() returns only once the
    Recorder holds the last one."""
    import numpy as np
    import ray

    from flow1_ray.common import iteration as I
    from flow1_ray import load_clusters, load_events, load_learner, load_metrics
    from flow1_ray.driver.learner_watch import learner_columns
    from flow1_ray.common.schema import DRIVER_MS, SAMPLES_DROPPED
    from flow1_ray.hub.clusterer import make_clusterer_actor
    from flow1_ray.hub.hub import make_hub_actor
    from flow1_ray.common.names import hub_name

    rid = f"states-test-{where}"
    hub = make_hub_actor().options(name=hub_name(rid), namespace="flow1").remote(
        *_hub_args(tmp_path, rid, states=where == "hub", n_clusters=4))
    cl = hub if where == "hub" else make_clusterer_actor().remote(hub_name(rid), "flow1", 4, "auto", {}, 0)
    sender = Sender("w1/states", lambda: cl, worker_index=1, method="ingest_states")
    rng = np.random.default_rng(0)

    def batch(n):
        return {"modules": {"default_policy": {
            "x": rng.normal(size=(n, 3)).astype(np.float32), "a": rng.integers(0, 2, n), "fail": np.zeros(n, bool),
            "policy": np.full((n, 2), np.nan, np.float32), "labels": ["0", "1"]}}}

    assert sender.call(batch(300)) is True
    assert ray.get(cl.snapshot.remote(1), timeout=10) is True
    # the next batch of a runner whose sender met a full queue three times
    cl.ingest_states.remote({**batch(300), "source": "w1/states", "worker_index": 1, "dropped": 3})
    assert ray.get(cl.finish_states.remote(2, 10.0, 30.0), timeout=40) is True
    st = ray.get(cl.states_status.remote(), timeout=10)
    assert st["snapshots"] == 2 and st["received"] == 600 and st["placement"] == "cpu" and st["backend"] == "sklearn"
    # what the driver asks after each iteration, in one call: the clusterer's counts only where it lives in the hub
    view = ray.get(hub.driver_view.remote(0), timeout=10)
    lines, cursor = view["lines"]
    assert cursor > 0 and any(C.STATE_SNAPSHOT in line for line in lines)
    assert view["rec"]["run_dir"] == str(tmp_path) and "probes" in view["status"]
    assert ("states" in view) == (where == "hub") and view.get("states", st)["received"] == 600
    assert ray.get(hub.driver_view.remote(cursor), timeout=10)["lines"] == ([], cursor)
    warned = view["rec"]["events"].get(C.WARN, 0)
    # that one call also brings the driver's part of the iteration's metrics row and the
    # learner's events and rows: the row is kept, completed from the view answered, and the
    # events are among that same answer's lines
    turn = {"events": [Event(C.REWARD_DROP, "expected the return to hold, actual a drop", iteration=3).to_dict()],
            "learner_rows": [{**{c: None for c in learner_columns()}, "iteration": 3, "module_id": "default_policy",
                              "kind": "module", "entropy": 0.25}],
            "row": {I.ROW_HEAD: {"iteration": 3, "env_steps": 300, "episode_return_mean": 9.0}, I.ROW_DROPPED: 2,
                    I.ROW_TAIL: {DRIVER_MS: 1.5, "flow1/learner/default_policy/kl": 0.01}},
            "states": {"received": 7}}   # the driver's last counts of a clusterer of its own
    view = ray.get(hub.driver_view.remote(cursor, turn), timeout=10)
    assert [line for line in view["lines"][0] if C.REWARD_DROP in line] and view["lines"][1] == cursor + 1
    status = ray.get(hub.close.remote(), timeout=40)
    row = load_metrics(tmp_path).to_pylist()[-1]
    assert row["iteration"] == 3 and row["env_steps"] == 300 and row[DRIVER_MS] == 1.5
    assert row["flow1/learner/default_policy/kl"] == 0.01 and row["flow1/events/WARN"] == warned + 1
    assert row[SAMPLES_DROPPED] == view["rec"]["samples_dropped"] + 2 == 5
    assert row["flow1/states/received"] == (600 if where == "hub" else 7)
    assert "flow1/worker/alive" in row and list(row)[:3] == ["iteration", "env_steps", "episode_return_mean"]
    assert load_learner(tmp_path).column("entropy").to_pylist() == [0.25]
    assert status["snapshots"] == 2 and status["heatmaps"]["written"] == 2 and status["samples_dropped"] == 3
    assert sorted(set(load_clusters(tmp_path).column("iteration").to_pylist())) == [1, 2]
    codes = load_events(tmp_path).column("code").to_pylist()
    assert codes.count(C.STATE_SNAPSHOT) == 2 and C.SAMPLES_DROPPED in codes
    for actor in {cl, hub}:
        ray.kill(actor)
