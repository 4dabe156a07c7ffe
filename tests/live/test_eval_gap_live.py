"""The live half of ``tests/checks/test_eval_gap.py`` (real Ray and RLlib runs). TRAIN_EVAL_GAP:
RLlib's evaluation runners against the training runners. The numbers of the unit tests are the
measured ones (PPO CartPole, 1,000-step batches, lr 1e-3, seed 0, 5 evaluation episodes an
iteration); the live test runs the sick one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow1_ray.common import codes as C


@pytest.mark.slow
def test_a_live_ppo_run_evaluated_on_a_shorter_episode_limit_is_train_eval_gap(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    config = (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
              .env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=1000, lr=1e-3)
              .evaluation(evaluation_interval=1, evaluation_num_env_runners=0, evaluation_duration=5,
                          evaluation_duration_unit="episodes",
                          evaluation_config={"env_config": {"max_episode_steps": 20}}))
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(5)]
    finally:
        algo.stop()
    assert all(r["evaluation"]["env_runners"]["episode_len_mean"] <= 20 for r in results)
    events = load_events(Path(results[-1]["flow1"]["run_dir"])).to_pylist()
    (f,) = [e for e in events if e["code"] == C.TRAIN_EVAL_GAP]
    ev = json.loads(f["evidence"])
    assert ev["differences"] == {"env_config.max_episode_steps": [None, 20]} and ev["eval_return"] <= 20
    assert ev["knobs"][0]["line"] == "config.evaluation(evaluation_config={})"
    # the evaluation return is in the metrics table beside the training return (the report's and the panel's curve)
    from flow1_ray import load_metrics
    from flow1_ray.common.schema import EVAL_RETURN

    rows = load_metrics(Path(results[-1]["flow1"]["run_dir"])).to_pylist()
    assert [r[EVAL_RETURN] for r in rows] == pytest.approx(
        [r["evaluation"]["env_runners"]["episode_return_mean"] for r in results])
