"""configs/thresholds.json stays in step with the code's defaults, and loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow1_ray import Flow1InputError, Thresholds

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "thresholds.json"


def test_config_lists_every_default():
    data = {k: v for k, v in json.loads(CONFIG.read_text()).items() if not k.startswith("_")}
    assert data == Thresholds().as_dict()
    assert Thresholds.from_file(CONFIG) == Thresholds()


def test_bad_threshold_files(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"reward_sparse_ratio": 0.05}')
    assert Thresholds.from_file(p).reward_sparse_ratio == 0.05
    p.write_text("[1, 2]")
    with pytest.raises(Flow1InputError, match="expected a JSON object"):
        Thresholds.from_file(p)
    p.write_text("{")
    with pytest.raises(Flow1InputError, match="not JSON"):
        Thresholds.from_file(p)
    with pytest.raises(Flow1InputError, match="cannot read"):
        Thresholds.from_file(tmp_path / "missing.json")


def test_state_action_thresholds_come_from_the_same_place():
    from flow1_ray.checks.states.state_action import StateActionThresholds

    th = Thresholds().with_overrides({"chaos_entropy": 0.9, "rare_share": 0.001}).family(StateActionThresholds)
    assert th.chaos_entropy == 0.9 and th.rare_share == 0.001 and th.blind_spot_max == 0.3


@pytest.mark.parametrize("opts, match", [
    ({"clusterer_backend": "faiss"}, "clusterer_backend must be one of"),
    ({"heatmap_every": 0}, "n_clusters and heatmap_every must be >= 1"),
    ({"heatmap_budget": 1.0}, r"heatmap_budget must be in \[0, 1\), got 1.0"),
    ({"heatmap_budget": -0.1}, "heatmap_budget must be in"),
    ({"n_clusters": 0}, "n_clusters and heatmap_every"),
    ({"state_sample_rate": 1.5}, "state_sample_rate must be in"),
    ({"state_send_interval_s": -1}, "state_send_interval_s must be >= 0"),
    ({"clusterer_num_gpus": -0.5}, "clusterer_num_gpus must be >= 0"),
])
def test_bad_state_action_options(opts, match):
    from flow1_ray import Flow1Callbacks

    with pytest.raises(ValueError, match=match):
        Flow1Callbacks.with_options(**opts)


def test_clusterer_gpu_share_follows_the_option():
    from flow1_ray.driver.run import clusterer_gpus
    from flow1_ray.options import Flow1Options

    assert clusterer_gpus(Flow1Options(clusterer_num_gpus=0.5)) == 0.5
    assert clusterer_gpus(Flow1Options(clusterer_num_gpus=0)) == 0.0


def test_a_thresholds_file_of_an_earlier_version_still_loads(tmp_path):
    import json

    import pytest

    from flow1_ray import Thresholds

    p = tmp_path / "old.json"
    p.write_text(json.dumps({"reward_spike_share": 0.2, "reward_skew": 4.0, "reward_sparse_ratio": 0.02}))
    with pytest.warns(UserWarning, match="'reward_spike_share' no longer applies"):
        th = Thresholds.from_file(p)
    assert th.reward_sparse_ratio == 0.02
