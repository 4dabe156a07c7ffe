"""``repro/`` entries written by the hub and read by ``flow1 replay`` as untrusted input: a
round trip keeps every number; a damaged or hostile entry is one line, nothing unpickled."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from flow1_ray.common.errors import Flow1InputError
from flow1_ray.rundir.repro import entries, entry_name, read_entry, write_entry

MANIFEST = {"finding": "ENV_CRASHED", "env": {"spec": "CartPole-v1", "how": "gym id"},
            "start": {"seed": 3, "whole": True}, "failure": {"call": "step", "step": 4}}


def _arrays():
    return {"actions": np.array([0, 1, 1, 0]), "digests": np.array([0.5, 0.25, np.nan, 1.0]),
            "rewards": np.ones(4)}


def test_an_entry_round_trips_and_is_listed_once_complete(tmp_path):
    name = entry_name("train", 2, 1234, 1, "ENV_CRASHED")
    assert name == "train2-pid1234-001-env_crashed"
    d = write_entry(tmp_path, name, _arrays(), MANIFEST)
    assert d is not None and entries(tmp_path) == [name]
    man, arrays = read_entry(tmp_path / "repro" / name)
    assert man["schema"] == 1 and man["failure"] == {"call": "step", "step": 4}
    np.testing.assert_array_equal(arrays["digests"], _arrays()["digests"])
    (tmp_path / "repro" / "half-written").mkdir()   # no manifest yet: not an entry
    assert entries(tmp_path) == [name]


def test_what_cannot_be_written_safely_is_not_written(tmp_path):
    assert write_entry(tmp_path, "../out", _arrays(), MANIFEST) is None
    assert write_entry(tmp_path, "x", {"actions": np.array([object()])}, MANIFEST) is None
    assert write_entry(tmp_path, "y", _arrays(), MANIFEST, max_bytes=10) is None
    assert entries(tmp_path) == []


def _entry(tmp_path, manifest=None, arrays=None):
    d = tmp_path / "repro" / "e"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest or
                                                                                         {"schema": 1, **MANIFEST}))
    if arrays is not None:
        arrays(d / "arrays.npz")
    return d


@pytest.mark.parametrize("make, says", [
    (lambda p: p / "nowhere", "no such directory"),
    (lambda p: _entry(p, "{not json"), "manifest.json is not JSON"),
    (lambda p: _entry(p, {"schema": 99}), "not a schema-1 manifest"),
    (lambda p: _entry(p, {"schema": 1, "env": "x", "start": {}, "failure": {}}), "has no 'env' object"),
    (lambda p: _entry(p, arrays=lambda f: f.write_bytes(b"PK\x03\x04 not a zip")), "arrays.npz cannot be read"),
    (lambda p: _entry(p, arrays=lambda f: np.savez(f, actions=np.array([{"a": 1}], dtype=object))),
     "arrays.npz cannot be read"),
    (lambda p: _entry(p, arrays=lambda f: np.savez(f, payload=np.ones(2))), "unknown array 'payload'"),
    (lambda p: _entry(p, arrays=lambda f: os.symlink("/etc/hostname", f)), "is a link; refused"),
    (lambda p: _entry(p, {"schema": 1, "env": {}, "start": {"multi_agent": True, "agents": "ab"}, "failure": {}}),
     "a multi-agent entry without its agents' ids and action kinds"),
    (lambda p: _entry(p, {"schema": 1, "env": {}, "start": {"multi_agent": True, "agents": [[0]]}, "failure": {}}),
     "a multi-agent entry without its agents' ids"),
])
def test_a_damaged_or_hostile_entry_is_one_line(tmp_path, make, says):
    with pytest.raises(Flow1InputError, match=says) as e:
        read_entry(make(tmp_path))
    assert "\n" not in str(e.value)


LEARNER = {"schema": 1, "kind": "learner", "env": {}, "start": {}, "failure": {"call": "update", "step": 1},
           "learner": {"modules": {"p": {}}, "arrays": {"a0": {"what": "batch", "module": "p", "path": ["obs"]}}}}


@pytest.mark.parametrize("change, arrays, says", [
    ({"learner": "x"}, None, "a learner entry without its 'learner' object"),
    ({"learner": {"modules": {}, "arrays": {"../a0": {"what": "batch"}}}}, None, "learner array '../a0' is not described"),
    ({"learner": {"modules": {}, "arrays": {"a0": {"what": "exec"}}}}, None, "learner array 'a0' is not described"),
    ({"learner": {"modules": {}, "arrays": {}, "config": [1]}}, None, "the learner's 'config' is not an object"),
    ({}, lambda f: np.savez(f, actions=np.ones(2)), "unknown array 'actions'"),   # a learner entry's names are a<N>
])
def test_a_damaged_or_hostile_learner_entry_is_one_line(tmp_path, change, arrays, says):
    with pytest.raises(Flow1InputError, match=says) as e:
        read_entry(_entry(tmp_path, {**LEARNER, **change}, arrays))
    assert "\n" not in str(e.value)


def test_a_learner_entry_round_trips_its_indexed_arrays(tmp_path):
    d = write_entry(tmp_path, "learner0-pid1-001-learner_nonfinite", {"a0": np.full((2, 3), np.nan, np.float32),
                                                                     "evil": np.ones(1)}, LEARNER)
    man, arrays = read_entry(d.path)
    assert set(arrays) == {"a0"} and np.isnan(arrays["a0"]).all() and man["learner"]["arrays"]["a0"]["path"] == ["obs"]
