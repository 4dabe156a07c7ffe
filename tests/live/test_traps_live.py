"""The live half of ``tests/envcheck/test_traps.py`` (real Ray and RLlib runs). The traps that look
like success (a reward paid for a change the env made itself; an observation that knows the
future): the reward-logic audit (REWARD_UNEARNED) and the temporal-leakage advisory
(OBS_LEAKAGE), each found on its planted env with its code and silent on the correct look-alikes
and on real envs nobody here wrote."""

from __future__ import annotations

import json

import pytest

import traps
from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C


# --- the audit on planted envs ------------------------------------------------------------


# --- temporal leakage --------------------------------------------------------------------


# --- real envs nobody here wrote ----------------------------------------------------------


# --- live: one runner of a real training run -------------------------------------------------


@pytest.mark.slow
def test_live_audit_on_one_runner_names_the_moving_goal(ray_session, tmp_path):
    """The env moves its goal (REWARD_UNEARNED) and the run's step is far too large (lr 0.05, 10
    epochs: its curves look sick too): the diagnosis names the env as the primary symptom and
    lists the curve findings as what follows from it, their advice held back."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from test_learner_live import _train

    from flow1_ray.report.rundir import load_run_report

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, audit_reward=True,
                                     state_actions=False)
    config = (PPOConfig().environment(traps.MovingGoal).callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=10, lr=0.05))
    _, events, run_dir = _train(config, 4)
    curves = {e["code"] for e in events if e["module"] in (C.TRAIN_CURVES, C.GRADIENT_FLOW) and e["status"] != C.PASS}
    assert curves, [e["code"] for e in events]
    d = load_run_report(run_dir).diagnosis()
    assert d["primary"]["code"] == C.REWARD_UNEARNED and d["primary"]["stage"] == "env", d["line"]
    assert curves <= {c["code"] for c in d["chain"]}, (curves, d["chain"])
    assert all("data the env made wrong (REWARD_UNEARNED)" in c["why"] for c in d["chain"] if c["code"] in curves)
    found = [{**e, "evidence": json.loads(e["evidence"])} for e in events if e["code"] == C.REWARD_UNEARNED]
    assert found, [e["code"] for e in events]
    f = found[0]
    assert f["status"] == C.FAIL and f["evidence"]["attribute"] == "goal" and f["worker_index"] == 1
    assert f["evidence"]["audited"].startswith("sub-env 0 of this runner")


