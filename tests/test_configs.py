"""configs/thresholds.json stays in step with the code's defaults, and loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow1_ray import Flow1InputError, Thresholds

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "thresholds.json"


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
    with pytest.raises(Flow1InputError, match="is not JSON"):
        Thresholds.from_file(p)
    with pytest.raises(Flow1InputError, match="cannot read"):
        Thresholds.from_file(tmp_path / "missing.json")
