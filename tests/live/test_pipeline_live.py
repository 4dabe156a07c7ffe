"""``flow1 check --config --checkpoint``: a real run's EnvRunner state, taken by the check's
runner. RLlib's MeanStdFilter on an env with a constant feature, sampled by two EnvRunners whose
statistics RLlib merges after each iteration: the merged mean of the constant feature drifts
away from its value, so the RLModule of the checkpoint sees a feature the env never changes
vary (PIPE_OBS_INVENTED); before any merge (no checkpoint) the filter maps it to 0, silent
(tests/pipeline/test_check_config.py). The same rules live in the run's EnvRunners
(runner/pipe_watch.py) name it there too, from the windows after the first merge."""

from __future__ import annotations

import re

import numpy as np

from flow1_ray.checks.thresholds import DEFAULT
from flow1_ray.common import codes as C
from flow1_ray.pipeline.check import drive_config
from flow1_ray.pipeline.config import ConfigTarget


def test_a_mean_std_filter_merged_over_runners_makes_a_constant_feature_vary(ray_session, tmp_path):
    from ray.rllib.utils.filter import RunningStat

    import pipeline_faults
    from flow1_ray import Flow1Callbacks, load_events

    # live: each runner judges a window at its first sample() (the filter exact: silent) and one
    # every 300 of its steps after (the merged statistics: the feature varies)
    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path / "runs"), print_events=False, state_actions=False,
                                     pipeline_every_steps=300)
    algo = pipeline_faults.mean_std_constant().callbacks(cb).build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        state = algo.env_runner_group.local_env_runner.get_state()
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    events = load_events(result["flow1"]["run_dir"]).to_pylist()
    live = [e for e in events if e["code"] == C.PIPE_OBS_INVENTED]
    assert live and all(re.match(r"train worker [12]: feature 4 is 1 on every one of", e["message"]) for e in live)
    assert {e["code"] for e in events if e["status"] != C.PASS} == {C.PIPE_OBS_INVENTED}, \
        [(e["code"], e["message"]) for e in events if e["status"] != C.PASS]
    stats = RunningStat.from_state(state["env_to_module_connector"]["MeanStdFilter"][None]["running_stats"][0])
    assert abs(stats.mean[4] - 1.0) > 0.1, f"the merged mean of the constant feature: {stats.mean[4]}"
    _, findings, summary = drive_config(ConfigTarget("pipeline_faults:mean_std_constant", str(tmp_path / "ckpt")),
                                        300, 0, DEFAULT)
    (f,) = [f for f in findings if f.code == C.PIPE_OBS_INVENTED]
    assert re.search(r"feature 4 is 1 on every one of \d+ steps in the env, but reaches the RLModule varying over "
                     r"[\d.]+ \.\. [\d.]+: the env-to-module pipeline \(MeanStdFilter\)", f.message), f.message
    assert np.ptp(f.evidence["module_range"]) > DEFAULT.invented_spread
    assert summary["modules"][C.PIPELINE]["trained"] is True
    assert [x.code for x in findings if x.status != C.PASS] == [C.PIPE_OBS_INVENTED]


def test_a_collapsed_initial_policy_is_named_live_and_not_again_on_its_restored_run(ray_session, tmp_path):
    """The first window of a fresh runner judges the RLModule as initialised; a run restored
    from a checkpoint samples with trained weights from its first step, which may well have
    chosen: its runners judge no initial policy."""
    from ray.rllib.algorithms.algorithm import Algorithm

    import pipeline_faults
    from flow1_ray import Flow1Callbacks, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path / "runs"), print_events=False, state_actions=False)
    algo = (pipeline_faults.logits_scaled().callbacks(cb).env_runners(num_env_runners=1)
            .training(train_batch_size_per_learner=500, minibatch_size=100, num_epochs=1)).build_algo()
    try:
        result = algo.train()
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    (collapsed,) = [e for e in load_events(result["flow1"]["run_dir"]).to_pylist() if e["code"] == C.PIPE_POLICY_COLLAPSED]
    assert collapsed["worker_index"] == 1 and "train worker 1: the initial policy has already chosen" in \
        collapsed["message"], collapsed
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        result = restored.train()
    finally:
        restored.stop()
    codes = {e["code"] for e in load_events(result["flow1"]["run_dir"]).to_pylist()}
    assert C.PIPE_POLICY_COLLAPSED not in codes, codes
