"""Single-agent cases of the corpus (``corpus.py``): each env is the reported fault as small as
it goes; ``fixed=True`` is its twin, the thread's fix applied. Addresses and causes are the
threads' own (see each case's ``cause``)."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from corpus import case


class DictLeafDtype(gym.Env):
    """A Dict observation whose ``time`` leaf is declared float64 and returned float32."""

    action_space = spaces.Discrete(2)
    observation_space = spaces.Dict({"time": spaces.Box(-1e20, 1e20, (1,), np.float64),
                                     "load": spaces.Box(0.0, 1e6, (5,), np.float32)})

    def __init__(self, fixed=False):
        self.fixed = fixed

    def _obs(self):
        return {"time": np.array([self.t], dtype=np.float64 if self.fixed else np.float32),
                "load": np.zeros(5, np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0.0
        return self._obs(), {}

    def step(self, a):
        self.t += 1.0
        return self._obs(), 0.0, False, self.t >= 10, {}


class ObsFloat64(gym.Env):
    """Observations computed with NumPy (float64) against a float32 Box."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.t = fixed, 0

    def _obs(self):
        o = self.np_random.uniform(-1, 1, 3)
        return o.astype(np.float32) if self.fixed else o

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, a):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 20, {}


class ObsOutOfBounds(gym.Env):
    """A height that leaves its declared bound when the agent flies straight up."""

    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed = fixed
        hi = 2.5 if fixed else 1.5
        self.observation_space = spaces.Box(-hi, hi, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.y, self.t = 1.4, 0
        return np.array([self.y], np.float32), {}

    def step(self, a):
        self.y += 0.05 if a == 1 else -0.05
        self.t += 1
        terminated = abs(self.y) >= 2.0 if self.fixed else False
        return np.array([self.y], np.float32), 0.0, terminated, self.t >= 200, {}


class ObsShapeInStep(gym.Env):
    """reset() returns the declared 6 features, step() appends 8 more."""

    observation_space = spaces.Box(-np.inf, np.inf, (6,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.t = fixed, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(6, np.float32), {}

    def step(self, a):
        self.t += 1
        feats = np.zeros(14, np.float32)
        return (feats[:6] if self.fixed else feats), 0.0, False, self.t >= 20, {}


class OldStepApi(gym.Env):
    """step() answers in the pre-0.26 gym API: (obs, reward, done, info)."""

    observation_space = spaces.Box(0, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.t = fixed, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, a):
        self.t += 1
        obs, done = np.zeros(2, np.float32), self.t >= 20   # the old API has one flag: its TimeLimit said done
        return (obs, 0.0, False, done, {}) if self.fixed else (obs, 0.0, done, {})


class InfoList(gym.Env):
    """step() returns its info as a list."""

    observation_space = spaces.Box(0, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.t = fixed, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, a):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 20, ({"dist": 0.3} if self.fixed else [0.3])


class DiscreteStart(gym.Env):
    """Actions declared Discrete(2, start=1) and looked up by value."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    levels = {1: 0.2, 2: 0.8}

    def __init__(self, fixed=False):
        self.fixed = fixed
        self.action_space = spaces.Discrete(2) if fixed else spaces.Discrete(2, start=1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, a):
        level = self.levels[int(a) + 1 if self.fixed else int(a)]
        return np.array([level], np.float32), level, True, False, {}


class RewardArray(gym.Env):
    """A reward of one term per objective, returned as an array."""

    observation_space = spaces.Box(0, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.t = fixed, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, a):
        self.t += 1
        per = np.array([1.0, -0.5])
        if self.fixed:
            return np.zeros(2, np.float32), float(per.sum()), False, self.t >= 20, {"per_term": per}
        return np.zeros(2, np.float32), per, False, self.t >= 20, {}


class NeverDone(gym.Env):
    """An episode ends only at a goal that random play never reaches; no time limit."""

    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed = fixed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.pos = 0, 0
        return np.zeros(1, np.float32), {}

    def step(self, a):
        self.t += 1
        self.pos = self.pos + 1 if a == 1 else 0     # 500 ones in a row
        terminated = self.pos >= 500
        truncated = self.t >= 100 if self.fixed else False
        return np.array([self.pos], np.float32), float(terminated), terminated, truncated, {}


class TimeLimitAsTerminated(gym.Env):
    """A process control task (hold x at 0) with a fixed horizon of 60 steps, signalled as
    terminated; the observation is the process state, not the time."""

    observation_space = spaces.Box(-10, 10, (2,), np.float32)
    action_space = spaces.Discrete(3)
    N = 60

    def __init__(self, fixed=False):
        self.fixed = fixed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.uniform(-1, 1))
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, a):
        self.t += 1
        self.x = float(np.clip(self.x + 0.1 * (a - 1) + self.np_random.normal(0, 0.05), -10, 10))
        out_of_time = self.t >= self.N
        obs = np.array([self.x, 0.0], np.float32)
        return obs, -abs(self.x), (False if self.fixed else out_of_time), (out_of_time if self.fixed else False), {}


class GlobalRandomReset(gym.Env):
    """reset() draws its start from Python's ``random``, not from the seeded ``np_random``."""

    observation_space = spaces.Discrete(5)
    action_space = spaces.Discrete(5)

    def __init__(self, fixed=False):
        self.fixed = fixed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (int(self.np_random.integers(5)) if self.fixed else random.randrange(5)), {}

    def step(self, a):
        return 0, 0.0, True, False, {}


class ReseedFromNone(gym.Env):
    """reset() builds a new generator from the seed it is given: reset(seed=s) is reproducible,
    but the unseeded resets after it start from the OS's entropy."""

    observation_space = spaces.Box(0, 1, (4,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed = fixed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = self.np_random if self.fixed else np.random.default_rng(seed)
        self.grid = rng.random(4)
        return self.grid.copy(), {}

    def step(self, a):
        return self.grid.copy(), 0.0, True, False, {}


class CrashOnBusyMachine(gym.Env):
    """A job shop: action a pops the next job of machine a, and an empty machine raises."""

    observation_space = spaces.Box(0, 10, (3,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self, fixed=False):
        self.fixed = fixed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.queues = [[1, 2], [3], []]
        return self._obs(), {}

    def _obs(self):
        return np.array([len(q) for q in self.queues], np.float32)

    def step(self, a):
        if self.fixed and not self.queues[a]:
            return self._obs(), -1.0, False, False, {"invalid_action": True}
        self.queues[a].pop(0)
        return self._obs(), 1.0, not any(self.queues), False, {}


class StepCounterNotReset(gym.Env):
    """The step counter is set in __init__ and never in reset(): every episode after the first
    is truncated after one step."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(2)
    MAX = 50

    def __init__(self, fixed=False):
        self.fixed, self.steps = fixed, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fixed:
            self.steps = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, a):
        self.steps += 1
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, self.steps >= self.MAX, {}


class TerminalFlagNotReset(gym.Env):
    """A corridor whose terminal flag stays set after reset(): every episode after the first
    terminates at its first step."""

    observation_space = spaces.Discrete(8)
    action_space = spaces.Discrete(2)

    def __init__(self, fixed=False):
        self.fixed, self.terminated, self.pos = fixed, False, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        if self.fixed:
            self.terminated = False
        return self.pos, {}

    def step(self, a):
        self.pos = max(0, min(7, self.pos + (1 if a == 1 else -1)))
        self.terminated = self.terminated or self.pos == 7
        return self.pos, float(self.pos == 7), self.terminated, False, {}


class MaskAllFalse(gym.Env):
    """An action mask (RLlib's ``action_mask`` key) that allows nothing once both resources are
    used, while the episode goes on."""

    action_space = spaces.Discrete(3)
    observation_space = spaces.Dict({"obs": spaces.Box(0, 2, (1,), np.float32),
                                     "action_mask": spaces.Box(0, 1, (3,), np.int8)})

    def __init__(self, fixed=False):
        self.fixed = fixed

    def _obs(self):
        m = np.array([self.s > 0, self.s > 1, False], np.int8)
        if self.fixed and not m[:2].any():
            m[2] = 1   # "wait" when nothing else is allowed
        return {"obs": np.array([max(self.s, 0)], np.float32), "action_mask": m}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s, self.t = 2, 0
        return self._obs(), {}

    def step(self, a):
        self.t += 1
        self.s -= 1
        return self._obs(), 0.0, False, self.t >= 6, {}


def _pair(cls):
    return (lambda: cls()), (lambda: cls(fixed=True))


CASES = [
    case("dict_leaf_dtype", "contract", "https://github.com/ray-project/ray/issues/12681",
         "a Dict space's float64 'time' leaf given float32 values (sven1977: \"it's simply the dtype of the time "
         "child-space\")", *_pair(DictLeafDtype), {"OBS_DTYPE_MISMATCH"}),
    case("obs_float64", "contract", "https://github.com/learnsyslab/gym-pybullet-drones/issues/87",
         "observations promoted to float64 by NumPy against a float32 space (fixed with .astype('float32'))",
         *_pair(ObsFloat64), {"OBS_DTYPE_MISMATCH"}),
    case("obs_out_of_bounds", "contract", "https://github.com/Farama-Foundation/Gymnasium/issues/752",
         "LunarLander's y-position leaves its declared bound when the lander flies up (bounds widened in PR 980)",
         *_pair(ObsOutOfBounds), {"OBS_OUT_OF_BOUNDS"}),
    case("obs_shape_in_step", "contract", "https://github.com/hill-a/stable-baselines/issues/875",
         "the space declares 6 features, step() returns 14 (reporter: \"my OBS was returning (14,)\")",
         *_pair(ObsShapeInStep), {"OBS_SHAPE_MISMATCH"}),
    case("old_step_api", "contract", "https://github.com/Farama-Foundation/HighwayEnv/issues/382",
         "an env on the old 4-tuple step API inside a 5-tuple gymnasium rollout (maintainer: match the API "
         "versions)", *_pair(OldStepApi), {"GYM_ALIASED"}),
    case("info_list", "contract", "https://github.com/NickGeramanis/gym-navigation/pull/6",
         "info returned as a list; algorithms call .get() on it (merged fix: return a dict)", *_pair(InfoList),
         {"INFO_NOT_DICT"}),
    case("discrete_start", "contract", "https://github.com/DLR-RM/stable-baselines3/issues/1841",
         "Discrete(n, start=1) actions: the learner emits 0..n-1, the env looks up 1..n (maintainer: shift in a "
         "wrapper)", *_pair(DiscreteStart), {"SPACE_INVALID"}),
    case("reward_array", "reward", "https://github.com/openai/gym/issues/3129",
         "a reward returned as an array of terms; the API expects one scalar (maintainer: sum it, the terms in "
         "info)", *_pair(RewardArray), {"REWARD_NOT_SCALAR"}),
    case("episode_never_ends", "termination", "https://github.com/ray-project/ray/issues/10416",
         "done never True under the policy, so no episode completes and the return is NaN (ericl: episodes_total "
         "0; fixed by ending episodes)", *_pair(NeverDone), {"EPISODE_NEVER_ENDS"}),
    case("time_limit_as_terminated", "termination", "https://github.com/MaximilianB2/pc-gym/issues/45",
         "the horizon signalled as terminated with truncated hard-coded False: the value function treats the "
         "cut-off as a true end (maintainer)", *_pair(TimeLimitAsTerminated), {"TIME_LIMIT_AS_TERMINATED"}),
    case("reset_ignores_seed", "seeding", "https://github.com/Farama-Foundation/Gymnasium/issues/1084",
         "the start drawn from Python's random, not the seeded np_random: reset(seed) is not reproducible "
         "(check added in PR 1086)", *_pair(GlobalRandomReset), {"NONDETERMINISTIC_RESET"}),
    case("reseed_from_none", "seeding", "https://github.com/Farama-Foundation/Gymnasium/issues/1207",
         "a generator built from reset's seed: with seed=None each unseeded reset after a seeded one starts "
         "from fresh entropy (gymnasium's checker: reset(seed=123) then reset() non-deterministic)",
         *_pair(ReseedFromNone), {"NONDETERMINISTIC_RESET"}),
    case("crash_on_invalid_action", "crash", "https://github.com/prosysscience/JSSEnv/issues/9",
         "step() raises IndexError on an action the state does not allow, killing the workers (maintainer: "
         "illegal actions depend on the state)", *_pair(CrashOnBusyMachine), {"ENV_CRASHED"}),
    case("step_counter_not_reset", "state", "https://github.com/Farama-Foundation/Gymnasium/issues/885",
         "reset() does not reset the step counter: every episode after the first is truncated at once (fixed "
         "in PR 886)", *_pair(StepCounterNotReset), {"RESET_KEEPS_STATE"}),
    case("terminal_flag_not_reset", "state",
         "https://github.com/JuliaReinforcementLearning/ReinforcementLearningEnvironments.jl/issues/135",
         "the terminal flag is not cleared in reset (maintainer: \"you seem to forget to reset the is_terminated\")",
         *_pair(TerminalFlagNotReset), {"RESET_KEEPS_STATE"}),
    case("mask_allows_nothing", "masking", "https://github.com/entity-neural-network/incubator/issues/186",
         "an action mask that prevents every action mid-episode: the masked softmax is NaN and sampling crashes "
         "(the project's author)", *_pair(MaskAllFalse), {"ACTION_MASK_INVALID"}),
]
