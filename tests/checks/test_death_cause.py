"""A runner's WORKER_DIED from what its probe found: the cause the runner recorded before it
ended (its component, its frame, an exit code), Ray's words as detail, and "cause not seen"
where flow1 saw none -- never a guess."""

from __future__ import annotations

import pytest

from flow1_ray.checks.run.incidents import MonitorCore
from flow1_ray.common import codes as C


def _died(**ch):
    core = MonitorCore("run", 5.0, "none")
    base = {"key": "K", "worker_index": 1, "pid": 9, "ts": 1000.0, "kind": "died", "last_heartbeat_age_s": 0.4}
    return core.died_event({**base, **ch}, {"worker_index": 1, "pid": 9}, crash_recorded=True)


def test_a_connectors_exception_is_the_cause():
    e = _died(exit="ended after the error it recorded", exception={
        "component": "module-to-env connector", "component_class": "ActionRemap", "exception": "KeyError",
        "error": "'left'", "frame": "__call__ (conn.py:12)", "ts": 999.5})
    assert e.status == C.FAIL, "the death is the finding: no ENV_CRASHED came before it"
    assert e.message == ("train worker 1 (pid 9) died: ended after the error it recorded; the module-to-env "
                         "connector ActionRemap raised KeyError: 'left' in __call__ (conn.py:12); "
                         "last heartbeat 0.40 s before")


def test_an_exit_code_is_said_and_proves_no_sigkill():
    e = _died(exit_signal="SIGKILL", signal_inferred=True, exception={
        "component": "env", "exit_call": "os._exit", "exit_code": 3, "frame": "step (sim.py:40)", "ts": 999.9})
    assert "died: exited with code 3; the env called os._exit(3) in step (sim.py:40)" in e.message
    assert "SIGKILL" not in e.message


def test_a_death_with_no_record_says_cause_not_seen_and_what_is_known():
    e = _died(exit_signal="SIGKILL", signal_inferred=True)
    assert "no exit code ran (SIGKILL: a kill -9, the OOM killer; or a forced exit such as ray.kill)" in e.message
    assert "cause not seen by flow1" in e.message and e.status == C.FAIL
    seg = _died(exit_signal="SIGSEGV", signal_inferred=False)
    assert "signal SIGSEGV" in seg.message and "cause not seen" not in seg.message


def test_the_envs_own_crash_stays_one_incident_with_its_env_crashed():
    e = _died(exit="interpreter exit", exception={"exception": "ValueError", "error": "boom", "frame": "step (e.py:1)"})
    assert "env.step raised ValueError: boom in step (e.py:1)" in e.message
    assert e.status == C.PASS and "not a second one" in e.message


def test_deaths_are_counted_by_what_each_is_charged_to_and_a_restarted_hub_counts_them_again():
    core = MonitorCore("run", 5.0, "none")
    base = {"worker_index": 1, "ts": 1.0, "kind": "died"}
    deaths = [{**base, "key": "A", "pid": 1, "exception": {"component": "env-to-module connector"}},
              {**base, "key": "B", "pid": 2, "exception": {"exception": "ValueError"}},   # an env's, before components
              {**base, "key": "C", "pid": 3, "exit_signal": "SIGSEGV", "signal_inferred": False},
              {**base, "key": "D", "pid": 4, "exit_signal": "SIGKILL", "signal_inferred": True}]
    events = core.events_for("node", deaths)
    want = {"env-to-module connector": 1, "env": 1, "fatal signal": 1, "not seen": 1}
    assert core.status()["deaths_by_component"] == want
    again = MonitorCore("run", 5.0, "none")
    again.rebuild(events)
    assert again.status()["deaths_by_component"] == want


def _finding(code, status, ts, message="train worker 1: obs has NaN/inf: expected finite values (found by the scan)"):
    return {"code": code, "status": status, "ts": ts, "message": message}


def test_a_finding_of_the_same_process_shortly_before_is_named_as_the_deaths_likely_origin():
    core = MonitorCore("run", 5.0, "none")
    base = {"key": "K", "worker_index": 1, "pid": 9, "ts": 1000.0, "kind": "died", "last_heartbeat_age_s": 0.4,
            "exit": "ended after the error it recorded",
            "exception": {"component": "action sampling", "component_class": "Categorical", "exception": "RuntimeError",
                          "error": "probability tensor contains nan", "frame": "sample (categorical.py:148)"}}
    prior = [_finding("REWARD_SCALE", "WARN", 990.0), _finding("OBS_NAN_INF", "FAIL", 996.8),
             _finding("MEMORY_LEAK_SUSPECTED", "WARN", 999.0)]
    e = core.died_event(base, {"worker_index": 1, "pid": 9}, False, prior)
    assert ("; likely origin: OBS_NAN_INF (FAIL) of this process 3.2 s before: obs has NaN/inf: expected finite "
            "values;") in e.message, "a FAIL before a WARN; the worker's name and the detail in brackets left out"
    assert e.evidence["likely_origin"]["code"] == "OBS_NAN_INF" and e.status == C.FAIL


@pytest.mark.parametrize("prior, origin", [
    ([_finding("REWARD_SCALE", "WARN", 999.0)], None),              # not a finding that kills a process
    ([_finding("OBS_NAN_INF", "FAIL", 1000.0 - 301)], None),         # too long before
    ([_finding("MEMORY_LEAK_SUSPECTED", "WARN", 1000.0 - 3000)], "MEMORY_LEAK_SUSPECTED"),   # memory grows to the end
    ([_finding("OBS_NAN_INF", "FAIL", 1002.0)], None),               # after the death: not its origin
    ([], None),
])
def test_only_a_finding_that_can_kill_a_process_and_came_before_it_is_an_origin(prior, origin):
    from flow1_ray.checks.run.death_cause import likely_origin

    found = likely_origin(prior, 1000.0)
    assert (found or {}).get("code") == origin


def test_rays_exit_detail_follows_as_a_row_of_the_same_incident():
    """The death is reported without waiting for the GCS; Ray's words come after it, as a PASS
    row naming the death it details, and no row where the GCS had no record."""
    core = MonitorCore("run", 5.0, "none")
    ch = {"key": "K", "worker_index": 1, "pid": 9, "ts": 1000.0, "kind": "died", "exit_signal": "SIGKILL",
          "signal_inferred": True}
    died = core.died_event(ch, {"worker_index": 1, "pid": 9})
    assert died.code == C.WORKER_DIED and died.status == C.FAIL and "Ray" not in died.message
    row = core.exit_detail_event(ch, {"worker_index": 1, "pid": 9}, died, {
        "ray_exit_type": "NODE_OUT_OF_MEMORY", "ray_exit_detail": "Task was killed due to the node running low on memory."})
    assert row.code == C.WORKER_EXIT_DETAIL and row.status == C.PASS and row.pid == 9
    assert row.message == ("train worker 1 (pid 9): Ray's exit detail of the WORKER_DIED reported above: "
                           "NODE_OUT_OF_MEMORY: Task was killed due to the node running low on memory.")
    assert row.evidence["of"] == C.WORKER_DIED and row.evidence["death_ts"] == died.ts.isoformat()
    assert row.ts >= died.ts   # stamped when Ray's words were read
    assert core.exit_detail_event(ch, {}, died, {"ray_exit_lookup_error": "no answer from the GCS within 2 s"}) is None
    assert core.exit_detail_event(ch, {}, died, {}) is None
