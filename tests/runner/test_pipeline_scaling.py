"""OBS_UNSCALED live: the runner's own env-to-module pipeline says whether observations far
from unit scale reach the model so (real RLlib EnvRunners, built in this process, and the
episodes they sample fed to the live checker)."""

from __future__ import annotations

import numpy as np
import pytest

import zoo
from flow1_ray.checks.env.rollout import RolloutChecker
from flow1_ray.common import codes as C
from flow1_ray.runner.env_watch import pipeline_scaling


def _runner(normalise: bool):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from ray.tune.registry import register_env

    register_env("flow1_large_scale_obs", lambda cfg: zoo.LargeScaleObs())
    config = PPOConfig().environment("flow1_large_scale_obs").env_runners(num_env_runners=0)
    if normalise:
        config = config.env_runners(env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter())
    return SingleAgentEnvRunner(config=config)


@pytest.mark.parametrize("normalise", [False, True], ids=["default-pipeline", "mean-std-filter"])
def test_the_advisory_names_the_pipeline_and_is_silent_behind_a_normalising_connector(normalise):
    runner = _runner(normalise)
    try:
        normalises, names = pipeline_scaling(runner)
        assert normalises is normalise and ("MeanStdFilter" in names) is normalise, names
        env = zoo.LargeScaleObs()
        rc = RolloutChecker(env.observation_space, env.action_space, live=True)
        rc.pipeline_of = lambda: pipeline_scaling(runner)
        obs, info = env.reset(seed=0)
        rc.on_reset(obs, info)
        for _ in range(300):
            a = env.action_space.sample()
            obs, r, term, trunc, info = env.step(a)
            rc.on_step(a, obs, r, term, trunc, info)
            if term or trunc:
                obs, info = env.reset()
                rc.on_reset(obs, info)
        rc.judge()
        hits = [f for f in rc.log.findings() if f.code == C.OBS_UNSCALED]
        if normalise:
            assert hits == []
        else:
            (hit,) = hits
            assert "no normalising connector in this runner's env-to-module pipeline (" in hit.message
            assert names.split(", ")[0] in hit.message and "MeanStdFilter()" in hit.message
            assert np.isclose(hit.evidence["rms_max"], 3000, rtol=0.3)
    finally:
        runner.stop()
