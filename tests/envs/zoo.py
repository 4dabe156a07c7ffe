"""The fault zoo: tiny envs, each with one injected fault, and clean envs beside them.

Most faults appear after the first step or only in some episodes: that is what
first-step checkers (gymnasium's PassiveEnvChecker, SB3's check_env) miss.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Base(gym.Env):
    """A clean 3-d random walk: 20-step episodes (truncated: a time limit), reward ~ N(1, 0.1)."""

    observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
    action_space = spaces.Discrete(2)
    horizon = 20

    def __init__(self) -> None:
        self.t = 0
        self.ep = -1
        self.total = 0
        self.state = np.zeros(3, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.ep += 1
        self.state = self._initial_state()
        return self._obs(), {}

    def _initial_state(self) -> np.ndarray:
        return self.np_random.uniform(-1, 1, 3).astype(np.float32)

    def _obs(self):
        return self.state.copy()

    def _move(self, action) -> None:
        self.state = np.clip(self.state + self.np_random.normal(0, 0.1, 3), -5, 5).astype(np.float32)

    def _reward(self) -> float:
        return float(1.0 + 0.1 * self.np_random.standard_normal())

    def _info(self) -> dict:
        return {"t": self.t}

    def step(self, action):
        self.t += 1
        self.total += 1
        self._move(action)
        return self._obs(), self._reward(), False, self.t >= self.horizon, self._info()


# --- ENV_SPEC ---------------------------------------------------------------------------


class DtypeTurnsFloat64(Base):
    """From the 6th step of each episode the observation is float64."""

    def _obs(self):
        return self.state.astype(np.float64) if self.t >= 6 else self.state.copy()


class ShapeChangesInEpisode10(Base):
    """Episode 10 appends a fourth value to every observation."""

    def _obs(self):
        return np.append(self.state, 0.0).astype(np.float32) if self.ep == 10 else self.state.copy()


class RewardArray(Base):
    """Rewards come as a 1-element array."""

    def _reward(self):
        return np.array([super()._reward()])


class TerminatedInt(Base):
    """terminated is an int (0/1) from episode 2 on."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, int(term) if self.ep >= 2 else term, trunc, info


class InfoReused(Base):
    """One info dict is returned and rewritten at every step."""

    def __init__(self):
        super().__init__()
        self._shared = {}

    def _info(self):
        self._shared.clear()
        self._shared["t"] = self.t
        return self._shared


class InfoEditedLater(Base):
    """A new info dict per step, but the env edits the previous one afterwards."""

    def __init__(self):
        super().__init__()
        self._last = None

    def _info(self):
        if self._last is not None:
            self._last["next_t"] = self.t
        self._last = {"t": self.t}
        return self._last


class InfoNotDict(Base):
    """From step 3 info is None."""

    def _info(self):
        return None if self.t >= 3 else {"t": self.t}


class ObsAliased(Base):
    """Returns its state buffer itself and moves it in place."""

    def _obs(self):
        return self.state

    def _move(self, action):
        self.state += np.float32(0.05)


class ResetIgnoresSeed(Base):
    """reset() draws the initial state from an unseeded generator."""

    def _initial_state(self):
        return np.random.default_rng().uniform(-1, 1, 3).astype(np.float32)


class NeverEnds(Base):
    """No termination, no truncation."""

    horizon = 10**9


class SlowEveryTenth(Base):
    """Every tenth step takes 10 ms more (a render or I/O call on a timer)."""

    def step(self, action):
        if (self.total + 1) % 10 == 0:
            time.sleep(0.01)
        return super().step(action)


class CrashInEpisode3(Base):
    """A physics error raised at step 5 of episode 3."""

    def step(self, action):
        if self.ep == 3 and self.t == 4:
            self._integrate()
        return super().step(action)

    def _integrate(self):
        raise FloatingPointError("integrator diverged: dt too large")


class BadObsBounds(Base):
    """Bounds computed after construction, low and high swapped for one dimension."""

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.observation_space.low[1], self.observation_space.high[1] = 10.0, -10.0




class UnboundedActions(Base):
    """A continuous action space with infinite bounds."""

    action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)


class OldGymApi(Base):
    """step() answers with the pre-0.26 4-tuple."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term or trunc, info


class DictLeafTurnsInt64(Base):
    """A nested Dict observation whose 'flags' leaf becomes int64 at step 7."""

    observation_space = spaces.Dict({
        "pos": spaces.Box(-10.0, 10.0, (3,), np.float32),
        "flags": spaces.MultiBinary(2),
    })

    def _obs(self):
        flags = np.array([1, 0], dtype=np.int64 if self.t >= 7 else np.int8)
        return {"pos": self.state.copy(), "flags": flags}


class TextLeafOutsideCharset(Base):
    """A Dict observation whose Text leaf, from episode 2 on, says "go north!": '!' is not
    in its charset and the string is longer than max_length."""

    observation_space = spaces.Dict({
        "pos": spaces.Box(-10.0, 10.0, (3,), np.float32),
        "note": spaces.Text(max_length=8, charset="abcdefghijklmnopqrstuvwxyz "),
    })

    def _obs(self):
        note = "go north!" if self.ep >= 2 and self.t >= 5 else "go north"
        return {"pos": self.state.copy(), "note": note}


# --- OBS_FLOW ---------------------------------------------------------------------------


class NanObsAtStep40(Base):
    """One NaN in the observation at global step 40."""

    def _obs(self):
        o = self.state.copy()
        if self.total == 40:
            o[1] = np.nan
        return o


class LeavesBoundsLate(Base):
    """From episode 2, step 15 on, the first coordinate leaves the declared bounds."""

    def _obs(self):
        o = self.state.copy()
        if self.ep >= 2 and self.t >= 15:
            o[0] = 12.0
        return o


class ResetDrifts(Base):
    """The initial state creeps with the episode count (state leaks across resets)."""

    def _initial_state(self):
        return (self.np_random.uniform(-1, 1, 3) + 0.05 * self.ep).astype(np.float32)


class TimestampObservation(Base):
    """float64 observations carrying a Unix timestamp: float32 loses every step's change."""

    observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float64)

    def _obs(self):
        return np.array([1.7e9 + 0.01 * self.total, self.state[1], self.state[2]], dtype=np.float64)


class OverflowObservation(Base):
    """A float64 sentinel (1e39) that overflows float32 at step 12 of every episode."""

    observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float64)

    def _obs(self):
        o = self.state.astype(np.float64)
        if self.t == 12:
            o[2] = 1e39
        return o


class BigObservation(gym.Env):
    """Clean 4 MiB observations (a (1024, 1024) float32 frame) in 500-step episodes."""

    observation_space = spaces.Box(-1.0, 1.0, (1024, 1024), np.float32)
    action_space = spaces.Discrete(2)
    horizon = 500

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full(self.observation_space.shape, (self.t % 100) / 100.0, np.float32)
        return obs, 1.0, False, self.t >= self.horizon, {}


# --- REWARD_STATS -----------------------------------------------------------------------


class NanRewardAtStep23(Base):
    def _reward(self):
        return float("nan") if self.total == 23 else super()._reward()


class SparseReward(Base):
    """One non-zero reward every 500 steps."""

    def _reward(self):
        return 1.0 if self.total % 500 == 0 else 0.0


class RarePenaltySpike(Base):
    """Points: 0 on most steps, +1 on about 2 %, and a -1000 on one step in 500 (a penalty
    typed three zeros too long): it outweighs every point the agent can score."""

    def _reward(self):
        if self.total % 500 == 250:
            return -1000.0
        return 1.0 if self.np_random.random() < 0.02 else 0.0


class CollisionPenalty(Base):
    """-0.1 per step and a -100 collision where the walker is past the wall at x = 1: a
    recurring level of the env, its design (the agent learns to avoid it), not a spike."""

    def _reward(self):
        return -100.0 if self.state[0] > 1.0 else -0.1


class ActionBonusLevel(Base):
    """A +50 bonus for action 1 where x > 0 (a bandit's best arm in half of the states): a level
    the env pays for a state and an action, again and again, not a spike."""

    def step(self, action):
        self._last_action = int(action)
        return super().step(action)

    def _reward(self):
        bonus = 50.0 if self._last_action == 1 and self.state[0] > 0 else 0.0
        return super()._reward() + bonus


class RandomBonusLevel(Base):
    """A +50 bonus on a random fifth of the steps, whatever the state and the action: it carries
    ~90 % of the return, and the policy can do nothing about it."""

    def _reward(self):
        return super()._reward() + (50.0 if self.np_random.random() < 0.2 else 0.0)


class IsolatedBonus(Base):
    """Dense rewards ~ N(1, 0.1) and, once in the whole run, mid-episode, a +5000 (a bonus typed
    with too many zeros): it makes its episode's return 250 times what the others are."""

    def _reward(self):
        return 5000.0 if self.total == 333 else super()._reward()


class TinyReward(Base):
    def _reward(self):
        return super()._reward() * 1e-5


class RewardDecaysAcrossEpisodes(Base):
    """A difficulty counter that is never reset: returns shrink episode after episode."""

    def _reward(self):
        return super()._reward() / (1.0 + 0.2 * self.ep)


# --- ACTION_PIPE ------------------------------------------------------------------------


class ContinuousBase(Base):
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)


class CastToFloat64(gym.ActionWrapper):
    """A wrapper that hands the env float64 actions (a hidden np.asarray(..., float64))."""

    def action(self, action):
        return np.asarray(action, dtype=np.float64)


def cast_actions_env():
    return CastToFloat64(ContinuousBase())


class Rescale(gym.ActionWrapper):
    """A wrapper that silently halves every action."""

    def action(self, action):
        return action * np.float32(0.5)


def rescaled_actions_env():
    return Rescale(ContinuousBase())


# --- clean envs -------------------------------------------------------------------------


class CleanNestedDict(gym.Env):
    """Nested Dict/Tuple observations over every leaf type, and a Dict action space."""

    observation_space = spaces.Dict({
        "body": spaces.Dict({
            "pos": spaces.Box(-5.0, 5.0, (2,), np.float32),
            "vel": spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }),
        "mode": spaces.Discrete(3),
        "grid": spaces.MultiDiscrete([4, 5]),
        "pair": spaces.Tuple((spaces.MultiBinary(3), spaces.Box(0.0, 1.0, (), np.float32))),
    })
    action_space = spaces.Dict({"move": spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": spaces.Discrete(3)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def _obs(self):
        return {
            "body": {"pos": self.pos.copy(), "vel": self.np_random.normal(size=2).astype(np.float32)},
            "mode": int(self.np_random.integers(3)),
            "grid": self.np_random.integers(0, [4, 5]).astype(np.int64),
            "pair": (self.np_random.integers(0, 2, 3).astype(np.int8), np.float32(self.np_random.random())),
        }

    def step(self, action):
        self.t += 1
        self.pos = np.clip(self.pos + 0.1 * action["move"], -5, 5).astype(np.float32)
        reward = float(-np.linalg.norm(self.pos))
        return self._obs(), reward, bool(np.linalg.norm(self.pos) > 4.0), self.t >= 50, {"mode": action["mode"]}


class CleanImage(gym.Env):
    """84x84x3 uint8 frames of a moving square; reward for keeping it centred."""

    observation_space = spaces.Box(0, 255, (84, 84, 3), np.uint8)
    action_space = spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.xy = self.np_random.integers(10, 70, 2)
        return self._obs(), {}

    def _obs(self):
        img = np.zeros((84, 84, 3), np.uint8)
        x, y = self.xy
        img[y:y + 6, x:x + 6] = 255
        return img

    def step(self, action):
        self.t += 1
        dx, dy = [(1, 0), (-1, 0), (0, 1), (0, -1)][int(action)]
        self.xy = np.clip(self.xy + np.array([dx, dy]) * 2, 0, 78)
        reward = float(1.0 - np.abs(self.xy - 39).sum() / 78.0)
        return self._obs(), reward, False, self.t >= 100, {}


class CyclicInfo(Base):
    """An info dict that contains itself: flow1 must report its own trouble, not crash."""

    def _info(self):
        info = {"t": self.t}
        info["self"] = info
        return info


# --- clean envs with spaces that are not arrays -----------------------------------------


class TextObservation(Base):
    """A Text observation: a valid gymnasium space, judged by Text.contains on every step."""

    observation_space = spaces.Text(8)

    def _obs(self):
        return "abc"


class CleanDictWithText(Base):
    """A Dict observation with a Box leaf and a Text leaf that stays in its charset."""

    observation_space = TextLeafOutsideCharset.observation_space
    words = ("go north", "go south", "wait", "turn")

    def _obs(self):
        return {"pos": self.state.copy(), "note": self.words[self.t % len(self.words)]}


class GoalSpace(spaces.Space):
    """A package's own Space subclass (like MiniGrid's MissionSpace): "reach the <color> door"."""

    colors = ("red", "green", "blue")

    def __init__(self, seed=None):
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask=None, probability=None):
        return f"reach the {self.colors[int(self.np_random.integers(len(self.colors)))]} door"

    def contains(self, x):
        return isinstance(x, str) and x in {f"reach the {c} door" for c in self.colors}


class CleanExoticSpaces(Base):
    """Observations from Sequence, Graph, OneOf and a custom space, nested in a Dict; a
    Dict action space with a Text command (random actions come from its sample())."""

    observation_space = spaces.Dict({
        "pos": spaces.Box(-10.0, 10.0, (3,), np.float32),
        "goal": GoalSpace(),
        "trail": spaces.Sequence(spaces.Box(-10.0, 10.0, (3,), np.float32)),
        "map": spaces.Graph(spaces.Box(0.0, 1.0, (2,), np.float32), spaces.Discrete(3)),
        "either": spaces.OneOf((spaces.Discrete(4), spaces.Box(0.0, 1.0, (2,), np.float32))),
    })
    action_space = spaces.Dict({"cmd": spaces.Text(max_length=4, charset="lrud"), "speed": spaces.Discrete(3)})

    def _move(self, action):
        step = {"l": -0.1, "r": 0.1}
        dx = sum(step.get(c, 0.0) for c in action["cmd"]) * (1 + int(action["speed"]))
        self.state = np.clip(self.state + np.float32(dx), -5, 5).astype(np.float32)

    def _obs(self):
        n = int(self.np_random.integers(1, 4))
        trail = tuple(np.clip(self.state + self.np_random.normal(0, 0.1, 3), -10, 10).astype(np.float32)
                      for _ in range(n))
        nodes = self.np_random.random((3, 2)).astype(np.float32)
        graph = spaces.GraphInstance(nodes, np.array([0, 2]), np.array([[0, 1], [1, 2]]))
        either = (0, int(self.np_random.integers(4))) if self.t % 2 else (1, self.np_random.random(2).astype(np.float32))
        return {"pos": self.state.copy(), "goal": "reach the red door", "trail": trail, "map": graph, "either": either}


# --- clean envs with long episodes or sparse, point-like rewards --------------------------


class LongEpisodes(Base):
    """Episodes of 3,000 steps: longer than the default budget, but they end."""

    horizon = 3000


class NanAfterBudget(LongEpisodes):
    """3,000-step episodes with a NaN observation at step 1,500: past a 1,000-step budget,
    inside the extension that waits for the first episode to end."""

    def _obs(self):
        o = self.state.copy()
        if self.total == 1500:
            o[0] = np.nan
        return o


class AtariLikeReward(Base):
    """Pong-like points: 0 on most steps, -1 on about 2.5 % (the opponent scores), +1 on
    about 0.3 % (the agent does)."""

    def _reward(self):
        u = self.np_random.random()
        return -1.0 if u < 0.025 else (1.0 if u < 0.028 else 0.0)


# --- processes that hang or die (flow1 check runs the env in a child process) -------------


def _marker(name: str) -> None:
    """Tell a test the env got this far: a file in $FLOW1_TEST_MARKERS, if set."""
    import os

    folder = os.environ.get("FLOW1_TEST_MARKERS")
    if folder:
        with open(os.path.join(folder, name), "w") as f:
            f.write(str(os.getpid()))


def _sleep_forever():
    while True:
        time.sleep(3600)


def _spin_forever():
    """A busy Python loop: the interpreter holds the GIL but still runs signal handlers."""
    n = 0
    while True:
        n += 1


def _hold_gil_in_c():
    """A C call that never returns and holds the GIL: it locks a mutex it already holds,
    through ctypes.PyDLL (which keeps the GIL). Signals do not end the wait; only a C-level
    handler (faulthandler's) runs, and SIGKILL ends it."""
    import ctypes

    libc = ctypes.PyDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER (glibc, musl)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


def _read_null():
    import ctypes

    return ctypes.string_at(0)  # SIGSEGV


class ResetHangs(Base):
    """The 4th reset (after step 40) never returns: a simulator waiting for a server."""

    def reset(self, *, seed=None, options=None):
        if self.ep == 2:
            _sleep_forever()
        return super().reset(seed=seed, options=options)


class StepSleepsForever(Base):
    """Step 30 blocks in time.sleep (a socket read that never answers)."""

    def step(self, action):
        if self.total == 29:
            _marker("hanging")
            _sleep_forever()
        return super().step(action)


class StepSpinsForever(Base):
    """Step 30 spins in a busy Python loop, holding the GIL."""

    def step(self, action):
        if self.total == 29:
            _spin_forever()
        return super().step(action)


class StepHoldsGilInC(Base):
    """Step 30 sits in a C call that holds the GIL and ignores signals."""

    def step(self, action):
        if self.total == 29:
            _marker("hanging")
            _hold_gil_in_c()
        return super().step(action)


class DtypeFaultThenSegfault(DtypeTurnsFloat64):
    """float64 observations from step 6 of each episode, and a segfault at step 50."""

    def step(self, action):
        if self.total == 49:
            _read_null()
        return super().step(action)


class AbortsInStep(Base):
    """os.abort() at step 10 (a failed C assertion in a physics engine)."""

    def step(self, action):
        if self.total == 9:
            import os

            os.abort()
        return super().step(action)


class SysExitInStep(Base):
    """sys.exit(3) at step 10 (a library that exits on an error)."""

    def step(self, action):
        if self.total == 9:
            import sys

            sys.exit(3)
        return super().step(action)


class OsExitInStep(Base):
    """os._exit(3) at step 10: no exception, no traceback, no atexit."""

    def step(self, action):
        if self.total == 9:
            import os

            os._exit(3)
        return super().step(action)


class PrintsEveryStep(Base):
    """Prints to stdout on every reset and step (a chatty simulator)."""

    def reset(self, *, seed=None, options=None):
        print("resetting the simulator")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        print(f"step {self.total + 1}: action {action}")
        return super().step(action)


class RunsSlowly(Base):
    """1 ms steps, episodes that end, no fault: a run to interrupt with Ctrl-C."""

    def step(self, action):
        if self.total == 100:
            _marker("running")
        time.sleep(0.001)
        return super().step(action)


class LargeScaleObs(Base):
    """Observations around 3,000 (raw prices, sensor counts): the model gets them unscaled."""

    observation_space = spaces.Box(0.0, 1e4, (3,), np.float32)

    def _initial_state(self) -> np.ndarray:
        return self.np_random.uniform(2500, 3500, 3).astype(np.float32)

    def _move(self, action) -> None:
        self.state = np.clip(self.state + self.np_random.normal(0, 20, 3), 0, 1e4).astype(np.float32)


def large_scale_obs_normalized():
    """The same env behind gymnasium's NormalizeObservation: the model gets unit scale."""
    import gymnasium as gym

    return gym.wrappers.NormalizeObservation(LargeScaleObs())
