"""Comparing values of every valid space: nested containers, arrays inside lists, object
arrays, NaN. ``==`` raises on most of them ("the truth value of an array ... is ambiguous")."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray import check_env
from flow1_ray.common import codes as C
from flow1_ray.checks.env.action_pipe import action_cast_error
from flow1_ray.checks.env.info_alias import InfoWatch
from flow1_ray.checks.values import values_equal

A = np.array([1.0, np.nan], np.float32)


def _obj(*items):
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


@pytest.mark.parametrize("a,b,equal", [
    (A, A.copy(), True),                                                # NaN equals itself
    (A, np.array([1.0, 2.0], np.float32), False),
    (np.zeros(2), np.zeros(3), False),                                  # shapes differ
    ({"x": [np.ones(2), np.ones(3)]}, {"x": [np.ones(2), np.ones(3)]}, True),  # arrays inside a list
    ({"x": [np.ones(2), np.ones(3)]}, {"x": [np.ones(2), np.zeros(3)]}, False),
    ([{"a": np.ones(2)}], [{"a": np.ones(2)}], True),                    # RLlib's Repeated: a list of dicts
    ((np.ones(2), None), (np.ones(2), None), True),                     # a GraphInstance with no edges
    (spaces.GraphInstance(np.ones((2, 2)), None, np.zeros((1, 2), int)),
     spaces.GraphInstance(np.ones((2, 2)), None, np.ones((1, 2), int)), False),
    (_obj(np.ones(2), "a"), _obj(np.ones(2), "a"), True),               # object arrays
    (_obj(np.ones(2), "a"), _obj(np.ones(2), "b"), False),
    (_obj(np.ones(2)), np.ones(2), False),                              # shape (1,) against (2,)
    (float("nan"), float("nan"), True),
    (np.float32("nan"), np.float32("nan"), True),
    (1, 1.0, True),
    ("abc", "abc", True),
    ("abc", b"abc", False),
    ({"a": 1}, {"b": 1}, False),
    ((1, 2), [1, 2], True),                                             # a Sequence sample may come either way
    (np.array(["a", "b"]), np.array([1, 2]), False),
])
def test_values_equal(a, b, equal):
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal


def test_info_watch_sees_inside_object_arrays():
    w = InfoWatch()
    inner = np.zeros(2)
    info = {"parts": _obj(inner, "tag")}
    assert w.observe(info, 1) is None
    inner[0] = 5.0  # the env edits an array it handed out, inside an object array
    msg, ev = w.observe({"parts": _obj(np.zeros(2), "tag")}, 2)
    assert ev["kind"] == "modified" and "was modified by the env" in msg


def _reassign(info):
    info["x"] = np.float64(2.0)


def _edit_array(info):
    info["arr"][0] = 7


def _edit_nested(info):
    info["sub"]["k"].append(3)


def _delete(info):
    del info["n"]


@pytest.mark.parametrize("edit", [_reassign, _edit_array, _edit_nested, _delete])
def test_info_watch_finds_each_edit_of_a_returned_info(edit):
    w = InfoWatch()
    info = {"x": np.float64(1.0), "n": float("nan"), "arr": np.zeros(3), "sub": {"k": [1]}, "s": "a", 3: None}
    assert w.observe(info, 1) is None
    edit(info)
    msg, ev = w.observe(dict(info), 2)
    assert ev["kind"] == "modified", msg


def test_info_watch_is_silent_on_fresh_infos_of_scalars_and_nans():
    """Hopper's info: numpy scalars, a NaN that stays a NaN; each step a new dict."""
    w = InfoWatch()
    for t in range(5):
        info = {"x_position": np.float64(t), "reward_ctrl": np.float32(-0.1), "lost": float("nan"),
                "nan32": np.float32("nan"), "step": t}
        assert w.observe(info, t) is None


def test_action_cast_error_on_object_and_nan_actions():
    a = np.array([np.nan, 1.0], np.float32)
    assert action_cast_error(a, a.copy()) is None  # NaN reached the env as sent
    msg, ev = action_cast_error(a, np.array([np.nan, 2.0], np.float32))
    assert "values changed" in msg and ev["max_abs_diff"] == 1.0
    assert action_cast_error(_obj("l", np.ones(2)), _obj("l", np.ones(2))) is None


class _ListOf(spaces.Space):
    """A package's own space of variable-length lists (like RLlib's Repeated)."""

    def __init__(self, child: spaces.Space, max_len: int) -> None:
        super().__init__()
        self.child, self.max_len = child, max_len

    def sample(self, mask=None, probability=None):
        return [self.child.sample() for _ in range(int(self.np_random.integers(1, self.max_len + 1)))]

    def contains(self, x) -> bool:
        return isinstance(x, list) and len(x) <= self.max_len and all(self.child.contains(c) for c in x)


class _Nested(gym.Env):
    """Observations from nested Dict/Tuple/Sequence/Graph/OneOf spaces, with arrays inside
    lists, a NaN that every reset returns, and object-array infos; reset is deterministic
    unless ``drift`` (then every reset moves one value deep in the tree)."""

    observation_space = spaces.Dict({
        "pose": spaces.Tuple((spaces.Box(-np.inf, np.inf, (2,), np.float32), spaces.Discrete(3))),
        "trail": spaces.Sequence(spaces.Dict({"p": spaces.Box(-10, 10, (2,), np.float32)})),
        "map": spaces.Graph(spaces.Box(0.0, 1.0, (2,), np.float32), None),
        "either": spaces.OneOf((spaces.Discrete(4), spaces.Box(0.0, 1.0, (2,), np.float32))),
        "deep": spaces.Dict({"inner": spaces.Tuple((spaces.Box(0.0, 1.0, (1,), np.float32),))}),
        "players": _ListOf(spaces.Dict({"hp": spaces.Box(0.0, 1.0, (2,), np.float32)}), 3),
    })
    action_space = spaces.Discrete(2)
    drift = False

    def __init__(self):
        self.resets = 0
        self.t = 0

    def _obs(self):
        trail = tuple({"p": np.full(2, i, np.float32)} for i in range(1 + self.t % 3))
        graph = spaces.GraphInstance(np.full((2, 2), 0.5, np.float32), None, None)
        either = (1, np.full(2, 0.25, np.float32))
        deep = np.full(1, 0.1 * (self.resets if self.drift else 1), np.float32)
        players = [{"hp": np.full(2, 0.5, np.float32)} for _ in range(2)]  # arrays inside a list
        return {"pose": (np.array([np.nan, 0.0], np.float32), 1), "trail": trail, "map": graph,
                "either": either, "deep": {"inner": (deep,)}, "players": players}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.t = 0
        return self._obs(), {"parts": _obj(np.zeros(2), [np.ones(2)])}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 10, {"parts": _obj(np.full(2, self.t), [np.ones(2)])}


class _NestedDrifting(_Nested):
    drift = True


def test_nested_space_envs_are_judged_without_a_traceback():
    report = check_env(_Nested, steps=100)
    assert report.summary["steps"] == 100 and report.codes() == {C.OBS_NAN_INF}, report.codes()  # the NaN, rightly
    assert C.FLOW1_INTERNAL not in report.codes(C.PASS)
    assert C.NONDETERMINISTIC_RESET not in report.codes()  # the NaN and the nested arrays repeat exactly
    report = check_env(_NestedDrifting, steps=100)
    assert C.NONDETERMINISTIC_RESET in report.codes()


def test_rllib_simple_rpg_is_judged_by_the_cli(cli_env):
    """RLlib's example env with a Repeated (list of dicts of arrays) observation space."""
    pytest.importorskip("ray.rllib.examples.envs.classes.simple_rpg")
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "flow1_ray", "check", "--env",
                        "ray.rllib.examples.envs.classes.simple_rpg:SimpleRPG", "--steps", "200", "--json", "-"],
                       capture_output=True, text=True, env=cli_env, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["summary"]["steps"] == 200
    # its reset() ignores the seed (observation_space.sample()): a true finding, not a crash
    assert "NONDETERMINISTIC_RESET" in {e["code"] for e in report["events"]}
    assert "FLOW1_INTERNAL" not in {e["code"] for e in report["events"]}
