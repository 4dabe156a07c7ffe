"""A Learner actor (num_learners=1) gets the EnvRunners' lock-file liveness: hung inside
update() it is LEARNER_STALLED with its stack; killed, LEARNER_DIED -- where RLlib's train()
would only block; ended by its own loss's ``os._exit``, LEARNER_DIED names the exit, the Learner
and the frame."""

from __future__ import annotations

import json
import os
import re
import signal
import threading

import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C
from test_rllib_callbacks import Run

pytestmark = pytest.mark.slow


def test_a_hung_learner_is_stalled_with_its_stack_and_a_killed_one_dead(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig
    from sick_modules import hang_next_update

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     stall_timeout_s=3.0)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .learners(num_learners=1)
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)).build_algo()
    stuck = threading.Thread(target=lambda: _quietly(algo.train), daemon=True)
    try:
        result = algo.train()
        assert result["flow1"]["learners"] == {"alive": 1, "dead": 0, "stalled": 0}
        run = Run(result)
        (pid,) = [r.get() for r in algo.learner_group.foreach_learner(hang_next_update)]
        stuck.start()
        events = run.wait_events(lambda e: any(x["code"] == C.LEARNER_STALLED for x in e), timeout=30)
        (stalled,) = [e for e in events if e["code"] == C.LEARNER_STALLED]
        ev = json.loads(stalled["evidence"])
        assert stalled["status"] == C.FAIL and stalled["pid"] == pid
        assert "hang_next_update" in ev["stack"] or "sick_modules" in ev["stack"], ev["stack"][-800:]
        assert "learner 0" in stalled["message"] and "no gradient step" in stalled["message"]
        os.kill(pid, signal.SIGKILL)
        events = run.wait_events(lambda e: any(x["code"] == C.LEARNER_DIED for x in e), timeout=20)
        (died,) = [e for e in events if e["code"] == C.LEARNER_DIED]
        assert died["pid"] == pid and json.loads(died["evidence"])["exit_signal"] == "SIGKILL"
        assert not any(e["code"] in (C.WORKER_DIED, C.WORKER_STALLED) for e in events)
    finally:
        stuck.join(timeout=30)
        stopper = threading.Thread(target=lambda: _quietly(algo.stop), daemon=True)
        stopper.start()
        stopper.join(timeout=30)


def test_a_learner_that_exits_in_its_loss_is_named_with_the_exit_code_and_the_frame(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    import faulty_parts as fp

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .learners(num_learners=1)
            .training(learner_class=fp.AbortingLearner, train_batch_size_per_learner=500, minibatch_size=128,
                      num_epochs=1)).build_algo()
    try:
        run = Run(algo.train())
        with pytest.raises(Exception):   # RLlib's train() raises: its Learner is gone
            algo.train()
        events = run.wait_events(lambda e: any(x["code"] == C.LEARNER_DIED for x in e), timeout=30)
        (died,) = [e for e in events if e["code"] == C.LEARNER_DIED]
        assert re.search(r"learner 0 \(pid \d+\) died: exited with code 3; the Learner \(AbortingLearner\) called "
                         r"os._exit\(3\) in compute_loss_for_module \(faulty_parts\.py:\d+\)", died["message"]), died["message"]
        assert died["status"] == C.FAIL and "SIGKILL" not in died["message"]
    finally:
        stopper = threading.Thread(target=lambda: _quietly(algo.stop), daemon=True)
        stopper.start()
        stopper.join(timeout=30)


def _quietly(fn):
    try:
        fn()
    except Exception:
        pass
