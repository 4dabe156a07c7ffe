"""A checked window of observations judged in one go (checks/obs_flow.check_obs_batch): the
clean window is passed on its columns' extremes, and a window holding a fault still names
the fault's code, its first step and how many rows -- the same as row by row."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray.common import codes as C
from flow1_ray.checks.env.obs_flow import check_obs_batch
from flow1_ray.checks.spaces import leaves
from flow1_ray.checks.thresholds import DEFAULT

FRAMES = spaces.Box(-1.0, 1.0, (16, 16, 4), np.float32)
UNEVEN = spaces.Box(np.array([0.0, -5.0, -1.0], np.float32), np.array([1.0, 5.0, 1.0], np.float32))
INTS = spaces.Box(0, 10, (6,), np.int64)


def _judge(space, batch):
    (leaf,) = leaves(space, "obs")
    steps = np.arange(100, 100 + len(batch))
    return {f.code: f for f in check_obs_batch(leaf, batch, steps, DEFAULT)}


def _window(space, n=40, seed=0):
    rng = np.random.default_rng(seed)
    low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
    return rng.uniform(low, high, (n,) + space.shape).astype(space.dtype)


@pytest.mark.parametrize("space", [FRAMES, UNEVEN, INTS], ids=["frames", "uneven-bounds", "ints"])
def test_a_clean_window_is_silent(space):
    assert _judge(space, _window(space)) == {}


@pytest.mark.parametrize("space, row, index, value, code", [
    (FRAMES, 7, (3, 5, 2), np.nan, C.OBS_NAN_INF),
    (FRAMES, 12, (0, 0, 0), -np.inf, C.OBS_NAN_INF),
    (FRAMES, 30, (15, 15, 3), 1.5, C.OBS_OUT_OF_BOUNDS),
    (UNEVEN, 3, (0,), 1.25, C.OBS_OUT_OF_BOUNDS),          # inside the widest bound (5), outside its own (1)
    (INTS, 21, (4,), 11, C.OBS_OUT_OF_BOUNDS),
], ids=["nan", "inf", "frame-above", "uneven-above-its-own", "int-above"])
def test_one_bad_value_is_named_with_its_first_step_and_its_rows(space, row, index, value, code):
    batch = _window(space)
    batch[(row,) + index] = value
    batch[row + 5][index] = value
    got = _judge(space, batch)
    assert code in got, got
    assert got[code].evidence["first_step"] == 100 + row and got[code].evidence["steps_bad"] == 2
