"""Runs that several live tests read: trained once a session, on the shared Ray."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sick_run(ray_session, tmp_path_factory) -> dict:
    """PPO on CartPole made sick on purpose (seed 0, lr 0.05, 10 epochs of 1,000-step batches):
    KL_SPIKE at iteration 1 and ENTROPY_COLLAPSE after it; ``on_fail="checkpoint+stop"`` saves
    the guard's checkpoint beside the run directory and says done. Four iterations. The
    learner test asserts on its findings, the what-if test branches from its checkpoint.

    Returns ``results`` (the four results), ``events`` (the event rows read when it ended,
    before any test wrote beside it) and ``run_dir``."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path_factory.mktemp("sick")), print_events=False,
                                     on_fail="checkpoint+stop", state_actions=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
            .env_runners(num_env_runners=1, sample_timeout_s=20)
            .training(train_batch_size_per_learner=1000, lr=0.05, num_epochs=10)).build_algo()
    try:
        results = [algo.train() for _ in range(4)]
    finally:
        algo.stop()
    run_dir = Path(results[-1]["flow1"]["run_dir"])
    return {"results": results, "events": load_events(run_dir).to_pylist(), "run_dir": run_dir}
