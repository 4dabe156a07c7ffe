"""The run-level REWARD_DROP rule over a sequence of smoothed returns."""

from __future__ import annotations

import numpy as np

from flow1_ray import codes as C
from flow1_ray.checks.curves import RunReturnDrop, result_number


def feed(returns, episodes_per_iter=10, window=100, start_episodes=100):
    rule = RunReturnDrop(window=window)
    out = []
    for i, r in enumerate(returns):
        f = rule.add(i + 1, r, start_episodes + episodes_per_iter * i)
        if f is not None:
            out.append((i + 1, f))
    return out


def test_a_dip_that_recovers_is_not_a_drop():
    """A healthy PPO CartPole run: up to 500, a few iterations near 340, back to 500."""
    curve = list(np.linspace(25, 500, 12)) + [500, 480, 360, 340, 350, 420, 500, 500, 495, 500]
    assert feed(curve) == []


def test_a_sustained_drop_is_one_finding_then_rearms():
    curve = list(np.linspace(25, 500, 12)) + [500] * 3 + [200] * 15 + [500] * 3 + [150] * 15
    got = feed(curve)
    assert [f.code for _, f in got] == [C.REWARD_DROP, C.REWARD_DROP]
    (it, f), _ = got
    # the drop began at iteration 16; 10 episodes per iteration: a full window of 100 after 10 more
    assert it == 26 and f.status == C.WARN
    assert f.evidence["best"] == 500 and f.evidence["drop_began_iteration"] == 16
    assert "fell from its best 500 (iteration" in f.message and "stayed below" in f.message


def test_long_episodes_need_a_full_window_of_new_episodes():
    """2 episodes per iteration: 100 new episodes take 50 iterations below the line."""
    curve = [100.0] * 5 + [10.0] * 50
    assert feed(curve, episodes_per_iter=2) == []
    assert len(feed(curve + [10.0], episodes_per_iter=2)) == 1


def test_negative_returns_are_judged_on_the_gain():
    """Pendulum-like: -1200 -> -200 is the gain; -450 loses 25 % of it (no), -600 loses 40 % (yes)."""
    up = list(np.linspace(-1200, -200, 10))
    assert feed(up + [-450] * 20) == []
    assert len(feed(up + [-600] * 20)) == 1


def test_no_judgement_before_the_first_full_window_or_without_a_return():
    rule = RunReturnDrop(window=100)
    assert rule.add(1, 500.0, 50) is None and rule.start is None
    assert rule.add(2, None, 150) is None and rule.add(3, 500.0, None) is None
    assert rule.start is None


def test_result_number_reads_nested_and_flattened_results():
    assert result_number({"env_runners": {"episode_return_mean": np.float64(3.5)}},
                         "env_runners", "episode_return_mean") == 3.5
    assert result_number({"env_runners/episode_return_mean": 2}, "env_runners", "episode_return_mean") == 2.0
    assert result_number({"env_runners": {"episode_return_mean": float("nan")}},
                         "env_runners", "episode_return_mean") is None
    assert result_number({}, "a", "b") is None
