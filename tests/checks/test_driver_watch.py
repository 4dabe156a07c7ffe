"""The driver watchdog names the silent hangs no worker lock shows: a build_algo() that
waits forever for an actor the cluster cannot place (RLlib prints nothing), and the pure
reading of the GCS actor table behind it."""

from __future__ import annotations


from flow1_ray.checks.run.driver import config_needs, explain_pending


def test_pending_actors_are_explained_with_who_holds_what():
    actors = [{"class": "SingleAgentEnvRunner", "state": "ALIVE", "resources": {"CPU": 1.0}},
              {"class": "SingleAgentEnvRunner", "state": "ALIVE", "resources": {"CPU": 1.0}},
              {"class": "APPOTorchLearner", "state": "PENDING_CREATION", "resources": {"CPU": 1.0}},
              {"class": "Big", "state": "PENDING_CREATION", "resources": {"GPU": 1.0}}]
    lines = explain_pending(actors, {"CPU": 2.0}, {"CPU": 0.0})
    assert lines[0] == ("1 APPOTorchLearner actor(s) wait for CPU 1; 2/2 CPU held by SingleAgentEnvRunner x2 "
                        "(free 0)")
    assert lines[1] == "1 Big actor(s) wait for GPU 1, and the cluster has 0 in all: it can never be placed"
    assert explain_pending(actors[:2], {"CPU": 2.0}, {"CPU": 0.0}) == []


def test_config_needs_count_runners_and_learner_actors():
    from ray.rllib.algorithms.appo import APPOConfig

    cfg = APPOConfig().env_runners(num_env_runners=2).learners(num_learners=1)
    assert config_needs(cfg) == {"CPU": 3.0, "GPU": 0.0}
    assert config_needs(cfg.learners(num_learners=1, num_gpus_per_learner=1)) == {"CPU": 2.0, "GPU": 1.0}


