"""Stalls inside ray.get: the wait is named, and a wait while an actor of the run starts is
held (a slow start, not a hang) until the actors are up plus stall_timeout_s, or the hold's
limit. The stack below is the one a real IMPALA runner wrote (RLlib 2.60) while it waited for
RLlib's EnvRunnerStateServer to start on a loaded 2-core machine; the GCS read is the one
input given by hand (``starting``: the run's actors that are not up yet)."""

from __future__ import annotations

from flow1_ray.checks.run.incidents import WAIT_HOLD_FACTOR, MonitorCore
from flow1_ray.common import codes as C
from flow1_ray.common.stacks import ray_wait
from flow1_ray.hub.waits import HOLD_RECHECK_S, WaitHolds

SITE = "/venv/lib/python3.11/site-packages"
IMPALA_STACK = f'''  File "{SITE}/ray/_private/workers/default_worker.py", line 323, in <module>
    worker.main_loop()
  File "{SITE}/ray/_private/worker.py", line 1069, in main_loop
    self.core_worker.run_task_loop()
  File "{SITE}/ray/rllib/utils/actor_manager.py", line 195, in apply
    return func(self, *args, **kwargs)
  File "{SITE}/ray/rllib/env/env_runner.py", line 192, in sample_get_state_and_metrics
    _episodes = self.sample()
  File "{SITE}/flow1_ray/runner/agent.py", line 137, in wrapped_sample
    samples = sample(*args, **kwargs)
  File "{SITE}/ray/util/tracing/tracing_helper.py", line 487, in _resume_span
    return method(self, *_args, **_kwargs)
  File "{SITE}/ray/rllib/env/single_agent_env_runner.py", line 218, in sample
    _server_state = ray.get(
  File "{SITE}/ray/_private/auto_init_hook.py", line 22, in auto_init_wrapper
    return fn(*args, **kwargs)
  File "{SITE}/ray/_private/client_mode_hook.py", line 134, in wrapper
    return func(*args, **kwargs)
  File "{SITE}/ray/_private/worker.py", line 3009, in get
    values, debugger_breakpoint = worker.get_objects(
  File "{SITE}/ray/_private/worker.py", line 1007, in get_objects
    ] = self.core_worker.get_objects(
'''
USER_DUMP = f'''Timeout (0:00:31)!
Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
Thread 0x00007f02 (most recent call first):
  File "{SITE}/ray/_private/worker.py", line 2890 in wait
  File "/home/u/my_env.py", line 40 in step
  File "{SITE}/ray/rllib/env/single_agent_env_runner.py", line 300 in _sample
'''
ENV_HANG = '  File "/home/u/my_env.py", line 40, in step\n    time.sleep(3600)\n'


def _stall(stack: str, ts: float = 100.0, **kw) -> dict:
    return {"kind": "stalled", "key": "k1", "pid": 7, "worker_index": 1, "ts": ts, "stalled_s": 31.0,
            "stack": stack, "where": "inside sample(), between steps"} | kw


def test_the_wait_and_the_frame_that_made_it_are_read_from_either_stack_format():
    assert ray_wait(IMPALA_STACK) == {"call": "ray.get", "frame": "single_agent_env_runner.py:218 in sample",
                                      "file": f"{SITE}/ray/rllib/env/single_agent_env_runner.py",
                                      "code": "_server_state = ray.get(", "by": "rllib"}
    user = ray_wait(USER_DUMP)
    assert (user["call"], user["frame"], user["by"], user["code"]) == ("ray.wait", "my_env.py:40 in step", "user", "")
    assert ray_wait(ENV_HANG) is None and ray_wait("") is None
    # Ray's plumbing alone (a worker idle in its task loop) is no wait of the runner's
    assert ray_wait(IMPALA_STACK.split('  File "' + SITE + '/ray/rllib/utils')[0]) is None


def test_a_wait_while_every_actor_is_up_is_a_stall_that_names_it():
    holds = WaitHolds(30.0, lambda: [])
    ch = _stall(IMPALA_STACK)
    assert not holds.hold("n", ch)
    (ev,) = MonitorCore("r", 30.0, "report").events_for("n", [ch])
    assert ev.code == C.WORKER_STALLED and ev.status == C.FAIL
    assert ("stuck in ray.get at single_agent_env_runner.py:218 in sample (RLlib's code: "
            "`_server_state = ray.get(`): it waits on another Ray actor or task; every actor of the run is up"
            in ev.message), ev.message
    assert ev.evidence["ray_wait"]["by"] == "rllib"


def test_a_wait_while_an_actor_starts_is_held_and_a_slow_start_when_it_steps_again():
    starting = ["EnvRunnerStateServer (pid 9, in its constructor)"]
    holds = WaitHolds(30.0, lambda: list(starting))
    ch = _stall(IMPALA_STACK)
    assert holds.hold("n", ch) and "k1" in holds.held
    assert holds.due(110.0) == []          # the actor still starts
    text, stall = holds.end({"kind": "recovered", "key": "k1", "pid": 7, "worker_index": 1, "ts": 150.0})
    assert stall is None and not holds.held
    assert text.startswith("advisory: train worker 1 (pid 7) waited 81 s in ray.get at "
                           "single_agent_env_runner.py:218 in sample"), text
    assert "while EnvRunnerStateServer (pid 9, in its constructor) started: a slow start, not a hang" in text


def test_a_held_wait_becomes_the_stall_once_the_actors_are_up_and_it_still_waits():
    starting = ["EnvRunnerStateServer (pid 9, in its constructor)"]
    holds = WaitHolds(30.0, lambda: list(starting))
    ch = _stall(IMPALA_STACK)
    assert holds.hold("n", ch)
    starting.clear()
    assert holds.due(110.0) == []          # up from now: it gets stall_timeout_s more
    assert holds.due(110.0 + HOLD_RECHECK_S) == []
    ((node, found),) = holds.due(141.0)
    assert node == "n" and found["actors_up"] and found["stalled_s"] == 72.0
    (ev,) = MonitorCore("r", 30.0, "report").events_for(node, [found])
    assert ev.status == C.FAIL and "no step for 72.0 s" in ev.message
    assert ("it waited 41 s for EnvRunnerStateServer (pid 9, in its constructor) to start, and still no step "
            "now that the run's actors are up") in ev.message, ev.message


def test_a_hold_ends_at_its_limit_and_a_gcs_that_cannot_answer_holds_nothing():
    holds = WaitHolds(10.0, lambda: ["a Learner actor (being restarted)"])
    assert holds.hold("n", _stall(IMPALA_STACK, stalled_s=11.0))
    assert holds.due(100.0 + WAIT_HOLD_FACTOR * 10.0 - 12.0) == []
    # the limit counts from the last step (11 s before the stall was seen), as the kill does
    ((_, found),) = holds.due(100.0 + WAIT_HOLD_FACTOR * 10.0 - 11.0)
    (ev,) = MonitorCore("r", 10.0, "report").events_for("n", [found])
    assert "no step for 50.0 s" in ev.message and "a Learner actor (being restarted) still not up after 39 s" in ev.message, ev.message

    def broken():
        raise ConnectionError("GCS unreachable")

    ch = _stall(IMPALA_STACK)
    assert not WaitHolds(10.0, broken).hold("n", ch)
    (ev,) = MonitorCore("r", 10.0, "report").events_for("n", [ch])
    assert "it waits on another Ray actor or task" in ev.message and "every actor" not in ev.message


def test_flow1s_kill_at_the_end_of_a_hold_reports_the_stall_it_ends():
    holds = WaitHolds(10.0, lambda: ["Slow (pid 3, in its constructor)"])
    assert holds.hold("n", _stall(IMPALA_STACK, kill_at_s=50.0))
    text, stall = holds.end({"kind": "died", "key": "k1", "pid": 7, "ts": 140.0, "killed_by_flow1": True})
    assert text is None and stall["kind"] == "stalled" and stall["stalled_s"] == 71.0
    (ev,) = MonitorCore("r", 10.0, "kill").events_for("n", [stall])
    assert "stall_action='kill': flow1 kills it if it still makes no step 50 s after its last" in ev.message
    # a death of its own cause ends the hold without a stall: that death is the incident
    assert holds.hold("n", _stall(IMPALA_STACK))
    assert holds.end({"kind": "died", "key": "k1", "pid": 7, "ts": 120.0}) == (None, None) and not holds.held
