"""RESOURCE_CONTENTION and MEMORY_LEAK_SUSPECTED from the numbers runners write in their lock files."""

from __future__ import annotations

from flow1_ray import codes as C
from flow1_ray.actors.contention import ContentionCore, node_load


def summary(step_ms: dict[str, float], steps: int, rss_mb: dict[str, float] | None = None) -> dict:
    return {"workers": [{"key": k, "worker_index": i + 1, "pid": 100 + i, "steps": steps,
                         "step_time_ema": ms / 1e3, "rss": int((rss_mb or {}).get(k, 200) * 1e6)}
                        for i, (k, ms) in enumerate(step_ms.items())],
            "load": {"cpu_load_avg_1m": 3.5, "cpu_count": 2, "mem_usage_percent": 40.0}}


def test_contention_needs_three_slow_workers_then_rearms():
    core = ContentionCore("r")
    keys = ["a", "b", "c", "d"]
    steps = 0
    for _ in range(6):
        steps += 100
        assert core.observe("n1", summary({k: 1.0 for k in keys}, steps)) == []
    steps += 100
    assert core.observe("n1", summary({"a": 5.0, "b": 5.0, "c": 1.0, "d": 1.0}, steps)) == []  # 2 slow: no
    steps += 100
    (ev,) = core.observe("n1", summary({"a": 5.0, "b": 5.0, "c": 4.0, "d": 1.0}, steps))
    assert ev.code == C.RESOURCE_CONTENTION and ev.evidence["cpu_load_avg_1m"] == 3.5
    assert "3 of 4 workers" in ev.message and ev.evidence["threshold_ratio"] == 3.0
    steps += 100
    assert core.observe("n1", summary({"a": 5.0, "b": 5.0, "c": 4.0, "d": 1.0}, steps)) == []  # once per episode
    steps += 100
    assert core.observe("n1", summary({k: 1.0 for k in keys}, steps)) == []
    steps += 100
    assert len(core.observe("n1", summary({"a": 5.0, "b": 5.0, "c": 4.0, "d": 1.0}, steps))) == 1


def test_with_fewer_than_three_workers_all_must_be_slow():
    core = ContentionCore("r")
    for i in range(6):
        core.observe("n1", summary({"a": 1.0, "b": 1.0}, 100 * (i + 1)))
    assert core.observe("n1", summary({"a": 5.0, "b": 1.0}, 800)) == []
    assert len(core.observe("n1", summary({"a": 5.0, "b": 5.0}, 900))) == 1


def test_idle_workers_are_not_judged():
    core = ContentionCore("r")
    for i in range(6):
        core.observe("n1", summary({"a": 1.0}, 100 * (i + 1)))
    assert core.observe("n1", summary({"a": 9.0}, 600)) == []  # no new steps since the last look


def test_memory_leak_needs_slope_fit_and_span():
    core = ContentionCore("r")
    events = []
    for i in range(1, 20):
        events += core.observe("n1", summary({"leaky": 1.0, "flat": 1.0}, 1000 * i,
                                             {"leaky": 200 + 2.0 * i, "flat": 200 + (i % 2)}))
    (ev,) = [e for e in events if e.code == C.MEMORY_LEAK_SUSPECTED]
    assert ev.worker_index == 1 and 1.9 < ev.evidence["mb_per_1000_steps"] < 2.1 and ev.evidence["r2"] > 0.99


def test_node_load_reads_this_machine():
    load = node_load()
    assert load["cpu_count"] >= 1 and 0 <= load["mem_usage_percent"] <= 100


def test_stall_event_names_the_innermost_frame_in_both_stack_formats():
    from flow1_ray.actors.monitor import MonitorCore

    core = MonitorCore("r", 3.0, "kill")
    watchdog = '  File "env.py", line 3, in step\n  File "demo.py", line 9, in _env_step_hangs_here\n'
    dump = ('Timeout (0:00:04)!\nThread 0x01 (most recent call first):\n  File "threading.py", line 1 in wait\n'
            'Thread 0x02 (most recent call first):\n  File "demo.py", line 9 in _env_step_hangs_here\n'
            '  File "single_agent_env_runner.py", line 5 in sample\n')
    for stack, source in ((watchdog, "watchdog"), (dump, "faulthandler")):
        ch = {"kind": "stalled", "key": "k", "pid": 7, "ts": 1.0, "worker_index": 1, "stalled_s": 3.4,
              "stack": stack, "stack_source": source, "where": "inside env.step", "killed": True}
        (ev,) = core.events_for("n", [ch])
        assert ev.code == C.WORKER_STALLED and "_env_step_hangs_here" in ev.message.split("stuck at")[1]
        assert "flow1 killed it" in ev.message
