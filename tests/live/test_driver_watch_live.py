"""The live half of ``tests/checks/test_driver_watch.py`` (real Ray and RLlib runs). The driver
watchdog names the silent hangs no worker lock shows: a build_algo() that waits forever for an
actor the cluster cannot place (RLlib prints nothing), and the pure reading of the GCS actor
table behind it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flow1_ray.common import codes as C
from flow1_ray import load_events
from flow1_ray.checks.run.driver import config_needs

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_an_appo_learner_that_can_never_be_placed_is_named_within_30_s(ray_session, tmp_path, cli_env):
    import ray

    env = {**cli_env, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    proc = subprocess.Popen([sys.executable, str(TESTS / "jobs" / "unplaceable_job.py"), str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    try:
        found = None
        while time.time() - t0 < 45 and found is None:
            time.sleep(1.0)
            for run in tmp_path.iterdir():
                if (run / "events").is_dir():
                    found = [e for e in load_events(run).to_pylist() if e["code"] == C.ACTOR_UNPLACEABLE]
                    found = found or None
        assert found, "no ACTOR_UNPLACEABLE within 45 s"
        took = time.time() - t0
        (ev,) = found
        evidence = json.loads(ev["evidence"])
        assert ev["status"] == C.FAIL and evidence["waited_s"] <= 30 and took <= 40, (evidence["waited_s"], took)
        assert any("Learner" in line and "CPU 1" in line and "SingleAgentEnvRunner x2" in line
                   for line in evidence["pending"]), evidence["pending"]
        assert evidence["config_needs"]["CPU"] == 3.0 and "build_algo()" in ev["message"]
        assert proc.poll() is None, "the build is still blocked (flow1 names it, it does not end it)"
    finally:
        proc.kill()
        out, err = proc.communicate(timeout=30)
    assert "built" not in out and "ACTOR_UNPLACEABLE" in err   # the log line on the driver's stderr
    # the job's actors go with its driver: the shared Ray gets its CPUs back
    deadline = time.time() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) >= 2


@pytest.mark.slow
def test_a_train_call_that_does_not_return_is_driver_stalled_with_the_drivers_stack(ray_session, tmp_path):
    import threading

    from ray.rllib.algorithms.ppo import PPOConfig
    from flow1_ray import Flow1Callbacks
    from sick_modules import hang_next_update
    from test_rllib_callbacks import Run

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     driver_stall_floor_s=3.0, driver_stall_factor=3.0)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)).build_algo()
    results = []

    def loop():  # every train() from one thread, as a user's loop: the second one hangs 12 s
        results.append(algo.train())
        algo.learner_group.foreach_learner(hang_next_update, seconds=12.0)
        results.append(algo.train())

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        deadline = time.time() + 10
        while not results and time.time() < deadline:
            time.sleep(0.2)
        run = Run(results[0])
        events = run.wait_events(lambda e: any(x["code"] == C.DRIVER_STALLED for x in e), timeout=15)
        (stalled,) = [e for e in events if e["code"] == C.DRIVER_STALLED]
        ev = json.loads(stalled["evidence"])
        assert stalled["status"] == C.WARN and ev["quiet_s"] >= 3.0
        assert "sick_modules.py" in ev["stack"] and "train" in ev["stack"], ev["stack"][-600:]
    finally:
        t.join(timeout=30)
        algo.stop()
    assert len(results) == 2   # the run went on: a warning, not an intervention


def test_a_long_train_call_that_computes_is_not_a_stall(ray_session, tmp_path):
    """A 2 s limit, a Learner in the driver working (not sleeping) for 6 s: a long
    iteration, not DRIVER_STALLED (measured on main before: DQN's 120 s iterations inside
    torch's backward on a busy machine were named stalled twice)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from flow1_ray import Flow1Callbacks, load_events
    from sick_modules import slow_next_update

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     driver_stall_floor_s=2.0, driver_stall_factor=3.0)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)).build_algo()
    try:
        first = algo.train()
        algo.learner_group.foreach_learner(slow_next_update, seconds=6.0)
        t0 = time.time()
        algo.train()
        assert time.time() - t0 >= 6.0
        time.sleep(2.5)   # the hub's next flush
    finally:
        algo.stop()
    events = load_events(first["flow1"]["run_dir"]).to_pylist()
    assert not [e for e in events if e["code"] == C.DRIVER_STALLED], [e["message"][:200] for e in events]


def test_runners_that_are_placed_but_slow_to_build_are_a_slow_start(ray_session, tmp_path):
    """Each EnvRunner's env takes 6 s to construct, startup_timeout_s is 2 s: every actor has
    its CPU, so it is SLOW_START (an advisory), never ACTOR_UNPLACEABLE (measured on main
    before: "2 SingleAgentEnvRunner actor(s) wait for CPU 1; 0/2 CPU held by no actor of this
    job (free 0)", a FAIL)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from flow1_ray import Flow1Callbacks, load_events
    from sick_modules import SlowInitCartPole

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     startup_timeout_s=2.0, learner_tracing=False)
    algo = (PPOConfig().environment(SlowInitCartPole, env_config={"init_s": 6.0}).callbacks(cb)
            .env_runners(num_env_runners=1, create_env_on_local_worker=False)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)).build_algo()
    try:
        result = algo.train()
        time.sleep(2.5)
    finally:
        algo.stop()
    events = load_events(result["flow1"]["run_dir"]).to_pylist()
    assert not [e for e in events if e["code"] == C.ACTOR_UNPLACEABLE], [e["message"][:300] for e in events]
    (slow,) = [e for e in events if e["code"] == C.SLOW_START]
    assert slow["status"] == C.PASS and "placed and still in their constructor" in slow["message"]
    assert "SingleAgentEnvRunner" in slow["message"] and "slow, not stuck" in slow["message"]
