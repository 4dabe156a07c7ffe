"""Where a runner's memory grows (runner/alloc_sites.py): real tracemalloc windows over real
code that keeps memory: an env stepped through gymnasium's vector env, gymnasium's own code on a
thread, and plain code of the caller; the window opens only when the process's RSS grows."""

from __future__ import annotations

import collections
import threading
import time
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray.liveness.holder import _rss
from flow1_ray.runner.alloc_sites import (ENV, FRAMEWORK, USER, AllocSampler, Owners, env_code,
                                         env_objects)

from leaky_envs import ForgetsItsHistory, KeepsEveryObservation

FAST = dict(min_age_s=0.0, warm_s=0.2, half_s=0.5, gap_s=0.0, max_windows=1, trend=False)


@pytest.fixture(autouse=True)
def _no_tracing_left():
    yield
    if tracemalloc.is_tracing():
        tracemalloc.stop()


def _vector(env_cls, pad: int):
    return gym.vector.SyncVectorEnv([lambda: env_cls({"pad": pad})] * 2)


class Steps:
    """The runner's step count, as the liveness holder keeps it."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> int:
        return self.n


def _sampler(owners, **kw) -> tuple[AllocSampler, Steps]:
    steps = Steps()
    return AllocSampler(owners, steps, **{**FAST, **kw}), steps


def _run_window(sampler: AllocSampler, steps: Steps, step, deadline_s: float = 30.0, every: int = 50) -> dict:
    """Call ``step()`` (the steps it took) and tick the sampler with the process's RSS every
    ``every`` calls (a sample() call's end) until a window's summary comes back."""
    end, k = time.monotonic() + deadline_s, 0
    while time.monotonic() < end:
        steps.n += step()
        k += 1
        if k % every == 0:
            out = sampler.tick(_rss(), steps.n)
            if out is not None:
                return out
    raise AssertionError(f"no window closed in {deadline_s} s (tracing {sampler.tracing}, ref {sampler.ref})")


def test_an_env_that_keeps_every_observation_is_named_at_its_line():
    """~2 KB kept per sub-env step by the env (behind gymnasium's wrappers and vector env)."""
    vec = _vector(KeepsEveryObservation, 256)
    vec.reset(seed=0)
    lines, dirs = env_code(vec)
    assert any(f.endswith("leaky_envs.py") for f in lines) and not any("gymnasium" in f for f in lines)
    sampler, steps = _sampler(lambda: Owners(lines, dirs), trigger_mb=0.5)

    def step():
        vec.step(vec.action_space.sample())
        return 2

    out = _run_window(sampler, steps, step)
    assert not tracemalloc.is_tracing()
    per_step = out["grown"][ENV] / out["steps"]
    assert 1500 < per_step < 3000, out          # 260 float64 + the array's header per step
    assert out["sites"][ENV][0]["site"].endswith("leaky_envs.py:46"), out["sites"][ENV]
    assert out["grown"][ENV] > 10 * (out["grown"][FRAMEWORK] + out["grown"][USER]), out


def test_its_clean_twin_keeps_nothing_and_a_flat_rss_opens_no_window():
    """The twin clears its history at reset: a forced window (trigger 0) finds no env growth
    beyond one episode's history; with the default trigger the window never opens."""
    vec = _vector(ForgetsItsHistory, 256)
    vec.reset(seed=0)

    def step():
        vec.step(vec.action_space.sample())
        return 2

    out = _run_window(*_sampler(lambda: Owners(*env_code(vec)), trigger_mb=0.0), step)
    assert out["grown"][ENV] / out["steps"] < 100, out   # an episode's history, not 2 KB a step
    flat, _ = _sampler(lambda: Owners(*env_code(vec)), half_s=0.2)
    for i in range(2000):
        step()
        assert flat.tick(_rss(), 2 * i) is None and not flat.tracing


def test_what_the_rl_stack_keeps_on_its_own_is_the_frameworks_and_the_callers_loop_the_users():
    """gymnasium's Box.sample() keeping its arrays on a thread (no env, no user frame on the
    stack): the framework's. The same arrays appended by this test's own loop: the user's."""
    box = gym.spaces.Box(-1.0, 1.0, (200,), np.float64)
    kept: list = []

    def slow():
        while len(kept) < 200_000:
            time.sleep(0.0005)
            yield None

    sampler, steps = _sampler(lambda: Owners({}, ()), trigger_mb=0.0)
    sampler.tick(_rss(), 0)                          # the reference
    sampler.tick(_rss() + 1, 0)                      # opens the window
    assert sampler.tracing
    t = threading.Thread(target=kept.extend, args=(map(box.sample, slow()),), daemon=True)
    t.start()
    out = _run_window(sampler, steps, lambda: (time.sleep(0.01), 1)[1], every=1)
    assert out["grown"][FRAMEWORK] > 100_000 and out["sites"][FRAMEWORK][0]["site"].startswith("gymnasium/"), out
    assert out["grown"][USER] < out["grown"][FRAMEWORK] / 10, out
    kept.append(None)
    kept.extend([None] * 200_000)                    # ends the thread
    t.join(10)

    mine: list = []
    sampler, steps = _sampler(lambda: Owners({}, ()), trigger_mb=0.0)
    sampler.tick(_rss(), 0)

    def grow():
        mine.append(np.zeros(200))
        return 1

    out = _run_window(sampler, steps, grow)
    assert out["sites"][USER][0]["site"].endswith("test_alloc_sites.py:" + str(grow.__code__.co_firstlineno + 1))


def test_the_users_own_tracing_is_left_alone():
    tracemalloc.start(1)
    sampler, _ = _sampler(lambda: Owners({}, ()), trigger_mb=0.0)
    sampler.tick(100.0, 0)
    out = sampler.tick(200.0, 10)
    assert out == {"off": "the process traces its allocations already (tracemalloc is on)"}
    assert tracemalloc.is_tracing() and sampler.tick(300.0, 20) is None


def test_the_env_chain_is_read_from_instance_attributes_only():
    """A property of the user's env is never called to find what it wraps."""
    class Loud(ForgetsItsHistory):
        @property
        def env(self):
            raise AssertionError("a property was read")

    inner = ForgetsItsHistory()
    outer = gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(inner), 10)
    assert env_objects(outer)[-1] is inner
    assert env_objects(Loud()) and isinstance(env_objects(Loud())[0], Loud)
    assert collections.Counter(type(o).__name__ for o in env_objects(outer))["ForgetsItsHistory"] == 1


class _ScriptEnv(gym.Env):
    """An env defined in a user's script beside the callback below."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


def _script_callback(kept: list, info: dict) -> None:
    kept.append(dict(info))


def test_an_env_and_a_callback_in_one_script_are_told_apart_by_their_lines():
    owners = Owners(*env_code(gym.wrappers.TimeLimit(_ScriptEnv(), 10)))
    step, cb = _ScriptEnv.step.__code__, _script_callback.__code__
    assert owners.of_frame(step.co_filename, step.co_firstlineno + 1) == ENV
    assert owners.of_frame(cb.co_filename, cb.co_firstlineno + 1) == USER
    tl = gym.wrappers.TimeLimit.step.__code__
    assert owners.of_frame(tl.co_filename, tl.co_firstlineno + 1) == FRAMEWORK   # gymnasium's wrapper
    assert owners.of_frame(np.__file__, 10) is None                                # a library: skipped outward


def test_a_window_ends_on_the_clock_however_long_a_sample_call_lasts():
    """No tick for the whole window (one long sample() call under tracing): tracing still stops
    after warm + 2 halves, and the next tick brings the summary."""
    sampler, steps = _sampler(lambda: Owners({}, ()), trigger_mb=0.0)
    sampler.tick(_rss(), 0)
    sampler.tick(_rss() + 1, 0)
    assert tracemalloc.is_tracing()
    time.sleep(FAST["warm_s"] + 2 * FAST["half_s"] + 1.0)
    assert not tracemalloc.is_tracing() and not sampler.tracing
    out = sampler.tick(_rss(), 0)
    assert out is not None and out["window"] == 1 and out["seconds"] >= 2 * FAST["half_s"] - 0.05, out


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_window_waits_for_the_leak_rules_own_trend_not_a_settling_jump():
    """The RSS grows 5 MB once after the first minute and stays (a runner settling): the 4 MB
    gate passes, the trend test does not, no window. A steady growth: the trend holds, a window."""
    for shape, opens in (("jump", False), ("steady", True)):
        clock = Clock()
        steps = Steps()
        sampler = AllocSampler(lambda: Owners({}, ()), steps, clock=clock, **{**FAST, "min_age_s": 60.0,
                                                                              "trend": True})
        opened_at = None
        for i in range(400):                      # a tick a second, 1,000 steps a second
            clock.t, steps.n = float(i), 1000 * i
            mb = 500 + (5.0 if i >= 90 else 0.0) if shape == "jump" else 500 + 0.1 * i
            sampler.tick(mb * 1e6, steps.n)
            if sampler.tracing:
                opened_at = i
                break
        assert (opened_at is not None) == opens, (shape, opened_at)
        if opens:
            assert 60 < opened_at < 200, opened_at
            deadline = time.monotonic() + 10
            while sampler.tracing and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not tracemalloc.is_tracing()


def test_rllibs_own_memory_leaking_env_is_named_at_its_line():
    """RLlib's MemoryLeakingEnv (its example of the slightest leak: one dict entry per
    episode), stepped through gymnasium's vector env: the window names its line in RLlib's
    package as the env's -- the innermost env's classes are the env's wherever they ship, its
    base RandomEnv too (a 2-frame traceback inside RandomEnv's space sampling was once booked
    to the framework)."""
    from ray.rllib.examples.envs.classes.memory_leaking_env import MemoryLeakingEnv

    cfg = {"observation_space": gym.spaces.Box(-1.0, 1.0, (4,), np.float32), "action_space": gym.spaces.Discrete(2),
           "p_terminated": 0.05}
    vec = gym.vector.SyncVectorEnv([lambda: MemoryLeakingEnv(cfg)] * 2)
    vec.reset(seed=0)
    sampler, steps = _sampler(lambda: Owners(*env_code(vec)), trigger_mb=0.0)

    def step():
        vec.step(vec.action_space.sample())
        return 2

    out = _run_window(sampler, steps, step, every=100)
    # its line among the env's sites: beside it, RandomEnv's space sampling keeps ~10-20 KB of
    # numpy blocks in the first seconds of tracing (bounded, the env's code too), which a loaded
    # machine's slower steps can rank above a 1-second window's few dict entries
    assert any(x["site"].startswith("ray/rllib/examples/envs/classes/memory_leaking_env.py:")
               for x in out["sites"][ENV]), out["sites"]
    assert out["grown"][ENV] > 2 * out["grown"][FRAMEWORK], out["sites"]
