"""A crash at the first step after a reset, named as what reset() left behind: an env whose
step counter indexes a per-episode schedule and is never cleared in reset() runs its first
episode, then raises IndexError at the first step of every later episode. The check stops on
the crashes in a row, and the replay of the first episode from a new reset(seed) names the
counter (RESET_KEEPS_STATE) as their cause; its fixed twin is silent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from flow1_ray import check_env
from flow1_ray.common import codes as C


class ScheduleIndexNotReset(gym.Env):
    """A 30-step schedule of targets read at ``self.t``; ``t`` set in __init__ only (fixed: in
    reset too). The first episode truncates at its end; the next step reads past it."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    LENGTH = 30

    def __init__(self, fixed: bool = False) -> None:
        self.fixed, self.t = fixed, 0
        self.schedule = [0.5 * np.sin(i / 5) for i in range(self.LENGTH)]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fixed:
            self.t = 0
        self.x = float(self.np_random.uniform(-0.5, 0.5))
        return self._obs(), {}

    def _obs(self):
        return np.array([self.x, self.schedule[min(self.t, self.LENGTH - 1)]], np.float32)

    def step(self, action):
        target = self.schedule[self.t]        # IndexError once t passes the schedule
        self.x = float(np.clip(self.x + 0.1 * (2 * int(action) - 1), -1, 1))
        self.t += 1
        return self._obs(), -abs(self.x - target), False, self.t >= self.LENGTH, {}


def test_crashes_at_the_first_step_of_later_episodes_are_named_as_state_reset_left_behind():
    report = check_env(ScheduleIndexNotReset, steps=300)
    crashed = [e for e in report.events if e.code == C.ENV_CRASHED]
    assert crashed and "IndexError" in crashed[0].message
    assert "step() raised 3 times in a row" in str(report.summary.get("stopped_early"))
    (kept,) = [e for e in report.events if e.code == C.RESET_KEEPS_STATE]
    assert "kept from earlier episodes: t: 0 -> 30" in kept.message, kept.message
    assert "the crashes at the first step of the last 3 episodes come from that state" in kept.message
    assert kept.evidence["first_step_crashes"] == 3


def test_the_fixed_twin_is_silent():
    report = check_env(lambda: ScheduleIndexNotReset(fixed=True), steps=300)
    assert not [e.log_line() for e in report.events if e.status != C.PASS]
