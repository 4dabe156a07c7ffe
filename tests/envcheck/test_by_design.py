"""The corpus of envs that are correct by design, from what RLlib ships and from envs users
reported as false alarms, each judged silent on what it does on purpose; beside it the planted faults, each
found. RLlib's classes live in ``ray.rllib.examples.envs.classes``: nobody here wrote them.

"Silent on what it does on purpose": the codes an env's design could be mistaken for must not
be raised; its other, real deviations (RLlib's RandomEnv pays a 0-d array reward, several of
RLlib's envs ignore reset's seed) are findings of their own and are listed where they occur."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray import check_env
from flow1_ray.common import codes as C

E = "ray.rllib.examples.envs.classes"


def _make(path: str, *args):
    import importlib

    mod, cls = path.rsplit(".", 1)
    return getattr(importlib.import_module(f"{E}.{mod}"), cls)(*args)


class WinPays100(gym.Env):
    """A game of 30 moves: +1 a point (a right guess), and on the last move +100 for a win
    (more than 10 points; random play wins about a third of the games), -100 for a loss."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.score = 0, 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        point = int(action == self.np_random.integers(3))
        self.score += point
        done = self.t == 30
        reward = (100.0 if self.score > 10 else -100.0) if done else float(point)
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, done, False, {}


def _parametric_cartpole():
    """RLlib's ParametricActionsCartPole, its own randomness seeded here: it draws its valid
    actions from Python's ``random`` and never passes reset's seed to its inner CartPole (its
    NONDETERMINISTIC_RESET), so unseeded each run of this test would judge other resets."""
    import random

    random.seed(0)
    np.random.seed(0)
    env = _make("parametric_actions_cartpole.ParametricActionsCartPole", 10)
    env.wrapped.reset(seed=0)
    return env


#: (id, factory, codes that would mistake its design, the env's own real deviations allowed)
BY_DESIGN = [
    ("SimpleCorridor: a goal of 1 against -0.01 steps",
     lambda: _make("simple_corridor.SimpleCorridor", {"corridor_length": 10}), {C.REWARD_SPIKES}, set()),
    ("WheelBanditEnv: the best arm pays 50",
     lambda: _make("multi_agent.bandit_envs_discrete.WheelBanditEnv"), {C.REWARD_SPIKES},
     {C.OBS_DTYPE_MISMATCH, C.NONDETERMINISTIC_RESET}),      # float64 contexts, an unseeded reset
    ("CliffWalking: the cliff's -100 recurs", lambda: gym.make("CliffWalking-v1"), {C.REWARD_SPIKES}, set()),
    ("a game whose win pays 100", WinPays100, {C.REWARD_SPIKES}, set()),
    ("ActionMaskEnv: masked actions raise",
     lambda: _make("action_mask_env.ActionMaskEnv", {"action_space": gym.spaces.Discrete(100),
                                                     "observation_space": gym.spaces.Box(-1.0, 1.0, (5,))}),
     {C.ENV_CRASHED, C.ACTION_MASK_INVALID}, {C.REWARD_NOT_SCALAR, C.NONDETERMINISTIC_RESET}),
    ("ParametricActionsCartPole: 2 valid actions of 10", _parametric_cartpole,
     {C.ENV_CRASHED, C.ACTION_MASK_INVALID}, {C.NONDETERMINISTIC_RESET}),
    ("TransformedActionPendulum: a documented rescale",
     lambda: _make("transformed_action_space_env.TransformedActionPendulum", {"low": -15.0, "high": 1.0}),
     {C.ACTION_CAST_WARNING}, set()),
    ("StatelessCartPole: velocities hidden on purpose",
     lambda: _make("stateless_cartpole.StatelessCartPole"), {C.OBS_SHAPE_MISMATCH, C.OBS_DISTRIBUTION_DRIFT}, set()),
    ("CartPoleSparseRewards: the return only at the end",
     lambda: _make("cartpole_sparse_rewards.CartPoleSparseRewards"), {C.REWARD_SPIKES},
     {C.NONDETERMINISTIC_RESET}),
    ("RandomEnv: rewards uniform noise", lambda: _make("random_env.RandomEnv"), {C.REWARD_SPIKES, C.REWARD_DROP},
     {C.REWARD_NOT_SCALAR, C.NONDETERMINISTIC_RESET}),
]


@pytest.mark.parametrize("name, make, mistaken, own", BY_DESIGN, ids=[c[0].split(":")[0] for c in BY_DESIGN])
def test_correct_by_design_is_silent(name, make, mistaken, own):
    report = check_env(make(), steps=1000)
    loud = {e.code for e in report.events if e.status != C.PASS}
    assert not loud & mistaken, [e.log_line() for e in report.events if e.code in mistaken]
    assert loud <= own, [e.log_line() for e in report.events if e.status != C.PASS and e.code not in own]


class IsolatedSpike(gym.Wrapper):
    """CartPole paying +1 a step, and once, mid-episode, +5000 (a bonus with three zeros too many)."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.t = 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        return obs, (5000.0 if self.t == 150 else r), term, trunc, info


class LiarMask(gym.Env):
    """A mask that allows action 1, and an env that rejects it."""

    action_space = gym.spaces.Discrete(3)
    observation_space = gym.spaces.Dict({"obs": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                                         "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"obs": np.zeros(2, np.float32), "action_mask": np.array([0, 1, 0], np.int8)}, {}

    def step(self, action):
        raise ValueError(f"action {action} is not allowed")


PLANTED = [
    ("CartPoleCrashing (RLlib)", lambda: _make("cartpole_crashing.CartPoleCrashing", {"p_crash": 0.05}),
     C.ENV_CRASHED, "step() raised"),
    ("TenStepErrorEnv (RLlib)", lambda: _make("ten_step_error_env.TenStepErrorEnv", {}), C.ENV_CRASHED,
     "step() raised"),
    ("an isolated +5000", IsolatedSpike, C.REWARD_SPIKES, "1 isolated reward(s)"),
    ("a mask the env disagrees with", LiarMask, C.ENV_CRASHED, "the mask and the env disagree"),
    ("a clip on the way to step", lambda: gym.wrappers.ClipAction(gym.make("Pendulum-v1")), C.ACTION_CAST_WARNING,
     "values clipped on the way to env.step"),
]


@pytest.mark.parametrize("name, make, code, fragment", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_faults_stay_found(name, make, code, fragment):
    report = check_env(make(), steps=1000)
    hits = [e for e in report.events if e.code == code and e.status != C.PASS]
    assert hits and any(fragment in e.message for e in hits), [e.log_line() for e in report.events]


class UnseededPendulum(gym.Wrapper):
    """Pendulum whose reset ignores the seed it is given (its start drawn from its own RNG)."""

    def __init__(self):
        super().__init__(gym.make("Pendulum-v1"))
        self._rng = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=int(self._rng.integers(2**31)))


def test_a_stateful_wrapper_is_named_and_an_unseeded_env_inside_it_is_still_a_warn():
    """NormalizeObservation's running statistics change its reset observation: an advisory
    naming the wrapper (measured before: a WARN advising to seed the env's RNG, which was
    seeded); the same wrapper around an env that ignores reset's seed stays a WARN."""
    report = check_env(gym.wrappers.NormalizeObservation(gym.make("Pendulum-v1")), steps=300)
    (hit,) = [e for e in report.events if e.code == C.NONDETERMINISTIC_RESET]
    assert hit.advisory and hit.evidence["wrapper"] == "NormalizeObservation", hit.log_line()
    assert "keeps state across resets by design" in hit.message
    report = check_env(gym.wrappers.NormalizeObservation(UnseededPendulum()), steps=300)
    (hit,) = [e for e in report.events if e.code == C.NONDETERMINISTIC_RESET]
    assert hit.status == C.WARN and hit.evidence["wrapper"] == "UnseededPendulum", hit.log_line()
    assert "pass reset's seed through" in hit.message
    report = check_env(gym.wrappers.NormalizeObservation(gym.make("Pendulum-v1").unwrapped.__class__()), steps=300)
    assert not [e for e in report.events if e.code == C.NONDETERMINISTIC_RESET and e.status == C.WARN]
    report = check_env(gym.wrappers.FrameStackObservation(gym.make("Pendulum-v1"), 4), steps=300)
    assert C.NONDETERMINISTIC_RESET not in {e.code for e in report.events}


def test_a_fixed_horizon_that_the_agent_sees_coming_is_not_a_time_limit_fault():
    """The corpus's process task terminated at its horizon of 60 steps is TIME_LIMIT_AS_TERMINATED;
    the same task with the time in its observation (a finite-horizon task whose end the agent
    sees) and a game of 30 moves that pays its outcome at the end (WinPays100) are not."""
    import corpus_env

    class TimeInObs(corpus_env.TimeLimitAsTerminated):
        def step(self, a):
            obs, r, term, trunc, info = super().step(a)
            obs[1] = self.t / self.N
            return obs, r, term, trunc, info

    assert C.TIME_LIMIT_AS_TERMINATED in check_env(corpus_env.TimeLimitAsTerminated(), steps=1000).codes(C.WARN)
    for env in (TimeInObs(), WinPays100()):
        assert C.TIME_LIMIT_AS_TERMINATED not in {e.code for e in check_env(env, steps=1000).events}
