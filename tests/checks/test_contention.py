"""RESOURCE_CONTENTION and MEMORY_LEAK_SUSPECTED from the numbers runners write in their lock files."""

from __future__ import annotations

import re

import numpy as np
import pytest


from flow1_ray.common import codes as C
from flow1_ray.checks.run.contention import ContentionCore, node_load


def summary(step_ms: dict[str, float], steps: int, rss_mb: dict[str, float] | None = None) -> dict:
    return {"workers": [{"key": k, "worker_index": i + 1, "pid": 100 + i, "steps": steps,
                         "step_time_ema": ms / 1e3, "rss": int((rss_mb or {}).get(k, 200) * 1e6)}
                        for i, (k, ms) in enumerate(step_ms.items())],
            "load": {"cpu_load_avg_1m": 3.5, "cpu_count": 2, "mem_usage_percent": 40.0}}


class Node:
    """Replays node summaries one second apart, as the probe sends them."""

    def __init__(self, **thresholds):
        from flow1_ray.checks.thresholds import DEFAULT

        self.core = ContentionCore("r", DEFAULT.with_overrides(thresholds))
        self.steps, self.t = 0, 0.0

    def observe(self, step_ms: dict[str, float], seconds: int = 1) -> list:
        out = []
        for _ in range(seconds):
            self.steps += 100
            self.t += 1.0
            out += self.core.observe("n1", summary(step_ms, self.steps), now=self.t)
        return out


def test_contention_needs_three_slow_workers_sustained_then_rearms():
    node = Node()
    keys = ["a", "b", "c", "d"]
    assert node.observe({k: 2.0 for k in keys}, 6) == []                                  # baselines 2 ms
    assert node.observe({"a": 9.0, "b": 9.0, "c": 2.0, "d": 2.0}, 20) == []               # 2 slow: no
    assert node.observe({"a": 9.0, "b": 9.0, "c": 8.0, "d": 2.0}, 10) == []               # 3 slow, 9 s so far
    (ev,) = node.observe({"a": 9.0, "b": 9.0, "c": 8.0, "d": 2.0}, 1)
    assert ev.code == C.RESOURCE_CONTENTION and ev.evidence["cpu_load_avg_1m"] == 3.5
    assert "3 of 4 workers" in ev.message and ev.evidence["threshold_ratio"] == 3.0
    assert ev.evidence["sustained_s"] >= 10.0
    assert node.observe({"a": 9.0, "b": 9.0, "c": 8.0, "d": 2.0}, 5) == []                # once per episode
    assert node.observe({k: 2.0 for k in keys}, 1) == []
    assert len(node.observe({"a": 9.0, "b": 9.0, "c": 8.0, "d": 2.0}, 11)) == 1


def test_a_short_slowdown_is_not_contention():
    """A runner restarting beside the others slows them for a few seconds: no finding."""
    node = Node()
    node.observe({k: 2.0 for k in "abc"}, 6)
    assert node.observe({k: 9.0 for k in "abc"}, 5) == []
    assert node.observe({k: 2.0 for k in "abc"}, 1) == []
    assert node.observe({k: 9.0 for k in "abc"}, 5) == []


def test_fewer_than_three_workers_is_never_contention():
    """'1 of 1 workers slower' is that worker, not the node (contention needs three slow workers)."""
    node = Node()
    node.observe({"a": 2.0, "b": 2.0}, 6)
    assert node.observe({"a": 20.0, "b": 20.0}, 30) == []


def test_a_slowdown_below_the_floor_is_not_contention():
    """0.054 -> 0.194 ms per CartPole step (measured while a runner restarted) is > 3x but
    costs nothing a user could act on beside RLlib's own ~1 ms per step."""
    node = Node()
    node.observe({k: 0.054 for k in "abc"}, 6)
    assert node.observe({k: 0.194 for k in "abc"}, 30) == []
    assert len(node.observe({k: 1.5 for k in "abc"}, 1)) == 0  # the sustain clock restarts ...
    assert len(node.observe({k: 1.5 for k in "abc"}, 10)) == 1  # ... and 10 s later it is contention


def test_idle_workers_are_not_judged():
    node = Node()
    node.observe({k: 1.0 for k in "abc"}, 6)
    node.steps -= 100  # no new steps since the last look
    core = node.core
    assert core.observe("n1", summary({k: 9.0 for k in "abc"}, node.steps), now=100.0) == []
    assert core.observe("n1", summary({k: 9.0 for k in "abc"}, node.steps), now=200.0) == []


def _replay_leak(core, sites_at: int | None = None, sites: dict | None = None, n: int = 30):
    """A summary every 5 s, 1000 steps apart (200 steps/s): worker 'leaky' gains 2 MB per
    1000 steps, 'flat' none; ``sites`` reach the hub after summary ``sites_at``."""
    events = []
    for i in range(1, n):
        if sites_at is not None and i == sites_at:
            core.add_sites("leaky", sites)
        events += core.observe("n1", summary({"leaky": 1.0, "flat": 1.0}, 1000 * i,
                                             {"leaky": 200 + 2.0 * i, "flat": 200 + (i % 2)}), now=5.0 * i)
    return [e for e in events if e.code in (C.MEMORY_LEAK_SUSPECTED, C.MEMORY_GROWTH_NOT_ENV)]


def _sites(**grown_per_step: float) -> dict:
    steps = 3000
    return {"steps": steps, "seconds": 12.0, "grown": {o: int(b * steps) for o, b in grown_per_step.items()},
            "sites": {o: [{"site": f"{o}_code.py:7", "bytes": int(b * steps), "blocks": steps}]
                      for o, b in grown_per_step.items()}}


def test_memory_leak_needs_a_lasting_trend_and_span_and_names_the_env_site():
    """2,000 bytes a step of RSS, 1,800 of them traced in the env's code: the env's leak."""
    (ev,) = _replay_leak(ContentionCore("r"), 5, _sites(env=1800.0, framework=40.0))
    assert ev.code == C.MEMORY_LEAK_SUSPECTED and ev.worker_index == 1
    assert 1.9 < ev.evidence["mb_per_1000_steps"] < 2.1 and ev.evidence["r2"] > 0.99
    assert ev.evidence["steps_per_s"] == pytest.approx(200.0) and ev.evidence["mb_per_night"] > 10_000
    assert ev.evidence["owner"] == "env" and ev.evidence["site"] == "env_code.py:7"
    assert re.search(r"grows in the env's code: env_code.py:7 \(sampled: 1.8e\+03 bytes a step, 90% of", ev.message)


def test_a_growth_in_the_framework_or_native_memory_is_not_the_envs():
    """The same RSS trend, its traced growth in RLlib's code (or none traced at all: native
    memory): the advisory, never the WARN."""
    (ev,) = _replay_leak(ContentionCore("r"), 5, _sites(env=3.0, framework=1500.0))
    assert ev.code == C.MEMORY_GROWTH_NOT_ENV and ev.evidence["owner"] == "framework"
    assert "the framework's code (RLlib, Ray" in ev.message and "framework_code.py:7" in ev.message
    (ev,) = _replay_leak(ContentionCore("r"), 5, _sites(env=2.0, framework=20.0))
    assert ev.code == C.MEMORY_GROWTH_NOT_ENV and ev.evidence["owner"] == "native"
    assert re.search(r"native memory .*grew 22 bytes a step, 1% of the RSS growth", ev.message)


def test_a_leak_verdict_waits_for_the_sites_then_says_it_could_not_sample():
    """No window reaches the hub: the verdict waits SITES_WAIT_S, then the WARN says where is
    unknown and why; a runner that could not trace (tracemalloc already on) says so at once."""
    from flow1_ray.checks.run.leak import SITES_WAIT_S

    assert _replay_leak(ContentionCore("r"), n=30) == []           # 145 s of replay: verdict at ~60 s, waiting
    (ev,) = _replay_leak(ContentionCore("r"), n=int((60 + SITES_WAIT_S) / 5) + 6)
    assert ev.code == C.MEMORY_LEAK_SUSPECTED and ev.evidence["owner"] is None
    assert "where it grows is unknown (no allocation-site window reached the hub" in ev.message
    (ev,) = _replay_leak(ContentionCore("r"), 5, {"off": "the process traces its allocations already"})
    assert ev.code == C.MEMORY_LEAK_SUSPECTED and "(the process traces its allocations already)" in ev.message


def _trend(points):
    from flow1_ray.checks.run.leak import LeakTrend

    t = LeakTrend()
    for steps, mb, sec in points:
        t.add(steps, mb * 1e6, sec)
    return t.judge()


def test_a_warm_up_that_flattens_is_not_a_leak():
    """RSS 530 -> 537 MB over the first 5,000 steps (measured on an RLlib runner), then flat."""
    rng = np.random.default_rng(0)
    pts = [(s, 530 + 7 * min(s, 5000) / 5000 + rng.normal(0, 0.3), s / 1000) for s in range(500, 40_001, 500)]
    assert _trend(pts[:10]) is None          # 5,000 steps of warm-up alone
    assert _trend(pts) is None


def test_a_small_leak_is_found_over_a_long_run_and_flat_noise_is_not():
    """10 bytes a step (RLlib's MemoryLeakingEnv: ~10 KB per 1,000 steps) under 1 MB of RSS
    noise, at 1,000 steps/s: 288 MB a night."""
    rng = np.random.default_rng(1)
    leak = [(s, 500 + 1e-5 * s + rng.normal(0, 1.0), s / 1000) for s in range(10_000, 2_000_001, 10_000)]
    v = _trend(leak)
    assert v is not None and v.mb_per_1000_steps == pytest.approx(0.01, rel=0.2) and v.mb_per_night > 256
    flat = [(s, 500 + rng.normal(0, 1.0), s / 1000) for s in range(10_000, 2_000_001, 10_000)]
    assert _trend(flat) is None


def test_node_load_reads_this_machine():
    load = node_load()
    assert load["cpu_count"] >= 1 and 0 <= load["mem_usage_percent"] <= 100


def test_stall_event_names_the_innermost_frame_in_both_stack_formats():
    from flow1_ray.checks.run.incidents import MonitorCore

    core = MonitorCore("r", 3.0, "kill")
    watchdog = '  File "env.py", line 3, in step\n  File "envcheck/demo.py", line 9, in _env_step_hangs_here\n'
    dump = ('Timeout (0:00:04)!\nThread 0x01 (most recent call first):\n  File "threading.py", line 1 in wait\n'
            'Thread 0x02 (most recent call first):\n  File "envcheck/demo.py", line 9 in _env_step_hangs_here\n'
            '  File "single_agent_env_runner.py", line 5 in sample\n')
    for stack, source in ((watchdog, "watchdog"), (dump, "faulthandler")):
        ch = {"kind": "stalled", "key": "k", "pid": 7, "ts": 1.0, "worker_index": 1, "stalled_s": 3.4,
              "stack": stack, "stack_source": source, "where": "inside env.step", "killed": True}
        (ev,) = core.events_for("n", [ch])
        assert ev.code == C.WORKER_STALLED and "_env_step_hangs_here" in ev.message.split("stuck at")[1]
        assert "flow1 killed it" in ev.message


def test_one_incident_one_finding_for_a_stall_flow1_killed():
    """WORKER_STALLED is the incident; flow1's own kill and Ray's restart belong to it."""
    from flow1_ray.checks.run.incidents import MonitorCore

    core = MonitorCore("r", 3.0, "kill")
    base = {"key": "k", "worker_index": 1, "ts": 1.0}
    (stalled,) = core.events_for("n", [{**base, "kind": "stalled", "pid": 7, "stalled_s": 3.2, "stack": "",
                                        "killed": True}])
    died = core.died_event({**base, "kind": "died", "pid": 7, "killed_by_flow1": True, "exit_signal": "SIGKILL"},
                           core.update("n", {**base, "kind": "died", "pid": 7}))
    (restarted,) = core.events_for("n", [{**base, "kind": "restarted", "pid": 8, "previous_pid": 7}])
    assert (stalled.status, died.status, restarted.status) == (C.FAIL, C.PASS, C.PASS)
    assert "not a second incident" in died.message and "recovery" in restarted.message


def test_a_death_is_a_fail_and_an_unexplained_restart_a_warn():
    from flow1_ray.checks.run.incidents import MonitorCore

    core = MonitorCore("r", 3.0, "report")
    base = {"key": "k", "worker_index": 1, "ts": 1.0}
    died = core.died_event({**base, "kind": "died", "pid": 7, "exit_signal": "SIGSEGV"},
                           core.update("n", {**base, "kind": "died", "pid": 7}))
    assert died.status == C.FAIL
    (other,) = core.events_for("n", [{"key": "j", "worker_index": 2, "ts": 1.0, "kind": "new", "pid": 5},
                                     {"key": "j", "worker_index": 2, "ts": 2.0, "kind": "restarted", "pid": 6,
                                      "previous_pid": 5}])
    assert other.code == C.WORKER_RESTARTED and other.status == C.WARN and "saw no death" in other.message


def test_the_death_rllib_makes_of_an_env_crash_belongs_to_it():
    from flow1_ray.checks.run.incidents import MonitorCore

    core = MonitorCore("r", 3.0, "report")
    ch = {"key": "k", "worker_index": 1, "ts": 1.0, "kind": "died", "pid": 7, "exit": "exit code 1",
          "exception": {"exception": "ValueError", "error": "boom", "frame": "step (env.py:3)"}}
    where = core.update("n", ch)
    assert core.died_event(ch, where, crash_recorded=True).status == C.PASS
    # the ENV_CRASHED never reached the Recorder: the death stays the incident's FAIL
    assert core.died_event(ch, where, crash_recorded=False).status == C.FAIL


def test_an_actor_leaving_through_its_interpreter_during_algo_stop_has_stopped_not_died():
    """RLlib ends remote Learners with exit_actor() in algo.stop(): an interpreter exit that,
    before the stop, would be LEARNER_DIED. A signal during the stop is still a death."""
    from flow1_ray.checks.run.incidents import MonitorCore

    core = MonitorCore("r", 3.0, "report")
    exit_ = {"key": "L", "worker_index": 0, "ts": 1.0, "kind": "died", "pid": 9, "exit": "interpreter exit",
             "exit_signal": None, "role": "learner"}
    assert core.graceful(exit_) is exit_   # training: a death
    core.stopping = True
    assert core.events_for("n", [exit_]) == [] and core.workers["L"]["status"] == "stopped"
    killed = {**exit_, "key": "K", "exit": None, "exit_signal": "SIGKILL", "signal_inferred": True}
    assert core.graceful(killed)["kind"] == "died"


def test_a_flat_rss_is_judged_without_importing_scipy_stats():
    """Every hub judges each runner's RSS: a flat one is cleared by the growth gate before the
    rank test, so the hub never pays scipy.stats' import (~0.8 s of CPU, ~50 MB)."""
    import subprocess
    import sys

    script = ("import sys; from flow1_ray.checks.run.leak import LeakTrend; t = LeakTrend()\n"
              "for i in range(100): t.add(1000.0 * i, 500e6 + (i % 3) * 1e5, 2.0 * i)\n"
              "print(t.judge(), 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["None", "False"], out.stdout + out.stderr[-2000:]
