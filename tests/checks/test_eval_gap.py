"""TRAIN_EVAL_GAP: RLlib's evaluation runners against the training runners. The numbers of
the unit tests are the measured ones (PPO CartPole, 1,000-step batches, lr 1e-3, seed 0, 5
evaluation episodes an iteration); the live test runs the sick one."""

from __future__ import annotations


from flow1_ray.common import codes as C
from flow1_ray import diagnose_curves
from flow1_ray.checks.learner.eval_gap import config_differences

TRAIN = [20.4, 34.6, 64.3, 99.7, 106.6, 95.2, 117.9, 176.5]
CAPPED = [16.6, 20.0, 20.0, 20.0, 19.6, 20.0, 20.0, 20.0]          # eval env_config max_episode_steps=20
GREEDY = [69.6, 128.6, 138.4, 105.0, 130.0, 167.6, 209.8, 224.0]   # eval explore=False


def _results(train, evals):
    return [{"training_iteration": i + 1, "env_runners": {"episode_return_mean": t, "episode_len_mean": t},
             "evaluation": {"env_runners": {"episode_return_mean": e, "episode_len_mean": e}}}
            for i, (t, e) in enumerate(zip(train, evals))]


def _gap(results, config):
    return [e for e in diagnose_curves(results, config=config) if e.code == C.TRAIN_EVAL_GAP]


def test_an_eval_env_with_a_shorter_time_limit_is_named_with_the_setting_and_its_training_value():
    config = {"env_config": {}, "explore": True, "evaluation_config": {"env_config": {"max_episode_steps": 20}}}
    (f,) = _gap(_results(TRAIN, CAPPED), config)
    assert f.iteration == 4 and f.status == C.WARN
    assert "80% below the training return 99.7 on 3 evaluations in a row" in f.message
    assert "env_config.max_episode_steps (None in training, 20 in evaluation)" in f.message
    (knob,) = f.evidence["knobs"]
    assert knob["value"] == {} and knob["line"] == "config.evaluation(evaluation_config={})"


def test_a_greedy_evaluation_scoring_above_a_stochastic_training_return_is_by_design():
    assert _gap(_results(TRAIN, GREEDY), {"explore": True, "evaluation_config": {"explore": False}}) == []


def test_an_eval_far_below_training_with_no_config_difference_says_so():
    (f,) = _gap(_results(TRAIN, [t * 0.4 for t in TRAIN]), {"explore": True, "evaluation_config": {}})
    assert "changes nothing that alters the task" in f.message and f.evidence["knobs"] == []


def test_an_eval_task_that_is_easier_than_the_training_one_is_named_when_its_env_config_differs():
    config = {"env_config": {"difficulty": 3}, "evaluation_config": {"env_config": {"difficulty": 1}}}
    (f,) = _gap(_results(TRAIN, [t * 2.5 for t in TRAIN]), config)
    assert "above the training return" in f.message and f.evidence["differences"] == {"env_config.difficulty": [3, 1]}
    assert f.evidence["knobs"][0]["value"] == {"env_config": {"difficulty": 3}}


def test_a_gap_over_too_few_evaluation_episodes_is_noise():
    """Measured on the set-up matrix's healthy run: 2 episodes an evaluation, 14 against 22."""
    results = _results([22.0] * 6, [14.0] * 6)
    for r in results:
        r["evaluation"]["env_runners"]["num_episodes"] = 2
    assert _gap(results, {"evaluation_config": {}}) == []
    for r in results:
        r["evaluation"]["env_runners"]["num_episodes"] = 5
    assert len(_gap(results, {"evaluation_config": {}})) == 1


def test_one_bad_evaluation_and_a_run_without_evaluation_are_silent():
    evals = list(GREEDY)
    evals[3] = 10.0
    assert _gap(_results(TRAIN, evals), {"evaluation_config": {"explore": False}}) == []
    assert _gap([{"training_iteration": 1, "env_runners": {"episode_return_mean": 5.0}}], None) == []


def test_config_differences_reads_an_algorithm_config_too():
    from ray.rllib.algorithms.ppo import PPOConfig

    cfg = PPOConfig().environment("CartPole-v1", env_config={"a": 1}).evaluation(
        evaluation_config={"explore": False, "env_config": {"a": 2}, "num_env_runners": 1})
    assert config_differences(cfg) == {"explore": (True, False), "env_config.a": (1, 2)}


