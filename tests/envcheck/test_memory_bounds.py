"""What the checker keeps is bounded by bytes: batch buffers, and the per-step series."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import zoo
from flow1_ray import Thresholds, check_env
from flow1_ray.common import codes as C
from flow1_ray.checks.env.rollout import RolloutChecker
from flow1_ray.checks.series import Series


def test_series_keeps_every_row_under_its_cap_and_a_uniform_sample_past_it():
    full = Series(max_bytes=16 * 10_000)
    for i in range(5000):
        full.append(float(i), i + 1)
    v, s = full.rows()
    assert not full.sampled and v.tolist() == [float(i) for i in range(5000)] and s[0] == 1

    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, 200_000)
    x[123_456] = np.nan
    x[150_000] = 1e9
    capped = Series(max_bytes=16 * 2_000)
    for i, r in enumerate(x):
        capped.append(float(r), i + 1)
    v, s = capped.rows()
    assert capped.sampled and capped.seen == 200_000 and len(capped) == 2_000
    assert capped.non_finite == 1 and int(s[np.isnan(v)][0]) == 123_457  # the first NaN, with its step
    assert v[np.isfinite(v)].max() == 1e9 and np.all(np.diff(s) > 0)   # the exact maximum; step order
    assert 80_000 < np.median(s) < 120_000                              # spread over the whole run
    assert abs(np.nanmedian(v)) < 0.1                                   # an unbiased sample of N(0, 1)
    assert capped.describe() == {"rows": 200_000, "sampled": True, "rows_judged": 2_000, "max_bytes": 32_000}


def test_series_window_keeps_the_most_recent_rows():
    w = Series(max_bytes=16 * 100, window=1_000)
    for i in range(10_000):
        w.append(float(i), i)
    v, _ = w.rows()
    assert v.tolist() == [float(i) for i in range(9_000, 10_000)] and not w.sampled


class _BigFrames(gym.Env):
    """1 MiB float32 frames, 300-step episodes (longer than a 256-row buffer), a NaN at
    step 203: found by the batch checks however small the batches."""

    observation_space = spaces.Box(-1.0, 1.0, (512, 512), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((512, 512), np.float32), {}

    def step(self, action):
        self.t += 1
        o = np.full((512, 512), 0.5, np.float32)
        if self.t == 203:
            o[7, 7] = np.nan
        return o, 1.0, False, self.t >= 300, {}


def test_batch_buffers_are_judged_when_they_reach_their_byte_cap():
    th = Thresholds().with_overrides({"batch_max_bytes": 8 * 2**20})
    rc = RolloutChecker(_BigFrames.observation_space, _BigFrames.action_space, th)
    assert rc.batch_rows == 7  # 8 MiB / (1 MiB + 8 bytes of action)
    report = check_env(_BigFrames, steps=300, thresholds=th)
    (nan,) = [e for e in report.events if e.code == C.OBS_NAN_INF]
    assert nan.env_step == 203
    flow = report.summary["modules"][C.OBS_FLOW]
    # every observation, 7 at a time: 300 steps, the reset before them and the one after the episode
    assert flow["judged_in_batches"] == 302 and flow["batch_rows_max"] == 7


def test_past_the_series_cap_the_rules_judge_a_sample_and_say_so():
    th = Thresholds().with_overrides({"series_max_bytes": 16 * 500})
    report = check_env(zoo.NanRewardAtStep23, steps=5000, thresholds=th)
    (nan,) = [e for e in report.events if e.code == C.REWARD_NAN]
    assert nan.env_step == 23 and nan.evidence["non_finite"] == 1 and nan.evidence["steps_checked"] == 5000
    report = check_env(zoo.Base, steps=5000, thresholds=th)
    (row,) = [e for e in report.events if e.module == C.REWARD_STATS and e.code == C.CHECKS_PASSED]
    assert "rewards: the distribution rules judged a uniform sample of 500 of 5,000" in row.message
    assert row.evidence["steps"] == 5000 and row.evidence["steps_judged"] >= 500
    (spec,) = [e for e in report.events if e.module == C.ENV_SPEC and e.code == C.CHECKS_PASSED]
    assert "step times: the distribution rules judged a uniform sample of 500 of 5,000" in spec.message


_PEAK = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def test_peak_memory_of_a_4_mb_observation_check(cli_env):
    """flow1 check of 300 steps of 4 MiB observations in 500-step episodes: the buffers
    used to hold 256 of them and a stacked copy (2 GiB); now 64 MiB batches."""
    out = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "flow1_ray", "check", "--env",
                          "zoo:BigObservation", "--steps", "300"], capture_output=True, text=True, env=cli_env,
                         timeout=600)
    code, peak_mib = map(int, out.stdout.split())
    assert code == 0, out.stderr
    assert peak_mib < 700, f"peak RSS {peak_mib} MiB"
