"""The hub's repro/ entries are bounded: repeats of one kind keep the first and the latest, and
no more than repro_max entries are written in all."""

from __future__ import annotations

import numpy as np

from flow1_ray.hub.repro_store import ReproStore
from flow1_ray.rundir.repro import entries

MAN = {"env": {}, "start": {}, "failure": {}}


def test_repeats_keep_the_first_and_the_latest_and_the_count_is_bounded(tmp_path):
    store = ReproStore(str(tmp_path), max_entries=3)
    arrays = {"actions": np.zeros(3)}
    for k in range(1, 6):   # five crashes of one kind on worker 1
        assert store.add(f"train1-pid1-{k:03d}-env_crashed", arrays, MAN, "ENV_CRASHED:train1")
    assert entries(tmp_path) == ["train1-pid1-001-env_crashed", "train1-pid1-005-env_crashed"]
    assert store.add("train2-pid2-001-env_crashed", arrays, MAN, "ENV_CRASHED:train2")
    assert store.add("train3-pid3-001-env_crashed", arrays, MAN, "ENV_CRASHED:train3") is None   # 4th entry
    assert store.add("train1-pid1-006-env_crashed", arrays, MAN, "ENV_CRASHED:train1")   # replaces the latest
    assert entries(tmp_path) == ["train1-pid1-001-env_crashed", "train1-pid1-006-env_crashed",
                                 "train2-pid2-001-env_crashed"]
    assert store.status() == {"written": 7, "refused": 1, "kept": 3}
