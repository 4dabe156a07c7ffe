"""The corpus's live half: learning pathologies users reported in public threads whose cause
the thread established, reproduced as real RLlib training runs on a tiny budget (PPO, DQN, SAC
on CartPole and Pendulum), each beside its fixed twin (the same run with the fix). flow1 names
a fault when a WARN or FAIL of the run carries a code of its cause; a twin is silent when the
run raises no WARN or FAIL at all.

Marked ``live`` (the field below), these run only through ``python scripts/corpus.py --live``
(a local Ray of 2 CPUs; each case prints its time), not in the suite, whose own live tests hold
the rules they exercise.

Tried and left out, with what was measured (a case is kept only where the reported fault shows
on a tiny budget): PPO's vf_clip_param on Pendulum (ray PR 2921) -- with flow1's defaults over
14 iterations the clipped critic's explained variance sat at +-0.001, but the return still rose
(-1420 to -1100: not stalled) and only ~2 gradient traces were taken, so neither
VALUE_NOT_LEARNING nor GRADIENT_ZERO is due yet (the suite's test names it with grad_every=10);
discrete SAC's target entropy (discuss.ray.io 12182) -- RLlib 2.60's "auto" target is -|A|, not
the reported 0.98 ln|A|; set to 0.68 explicitly, alpha hovered at 0.4-0.8 over 12 iterations
instead of growing. An on_episode_step callback keeping every step's 100 info values
(ray#21041) -- the thread closed without an established cause, and reproduced on RLlib 2.60 the
callback kept ~0.7 KB a step (flow1 named it, the callback's line, in one of two runs) while the
runner's RSS swung by ~35 MB per 1,000 steps with RLlib's own handling of the 100-key infos,
rising then flat: not a case with a known answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class LiveCase:
    """One reported learning pathology: its thread and established cause, a config builder for
    the faulty run and one for its fixed twin (each given flow1's callbacks class), how many
    iterations each trains, and the codes that name the cause."""

    id: str
    category: str
    address: str
    cause: str
    fault: Callable[[Any], Any]
    twin: Callable[[Any], Any]
    names: frozenset
    iterations: int = 4
    gap: str = ""
    live: bool = True
    options: tuple = ()   # flow1 options of both runs, as (name, value) pairs


def train(config_of: Callable[[Any], Any], iterations: int, out_dir: Path,
          options: tuple = ()) -> tuple[list[dict], float]:
    """One real training of ``iterations`` with flow1's callbacks writing under ``out_dir``
    (``options``: more flow1 options): the run's events (every row) and the wall seconds it took."""
    import time

    from flow1_ray import Flow1Callbacks, load_events

    t0 = time.perf_counter()
    cb = Flow1Callbacks.with_options(output_dir=str(out_dir), print_events=False, state_actions=False,
                                     **dict(options))
    algo = config_of(cb).build_algo()
    try:
        result = {}
        for _ in range(iterations):
            result = algo.train()
    finally:
        algo.stop()
    return load_events(Path(result["flow1"]["run_dir"])).to_pylist(), time.perf_counter() - t0


def loud_codes(events: list[dict]) -> set[str]:
    return {e["code"] for e in events if e["status"] in ("WARN", "FAIL")}


# -- the runs ------------------------------------------------------------------------------
def _distorted_pendulum(config=None):
    """Pendulum whose torque is asked in [300, 500] (RLlib's own "distorted pendulum" of PR 16531)."""
    import gymnasium as gym

    return gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), 300.0, 500.0)


def _ppo_distorted(cb, normalize: bool):
    from ray.rllib.algorithms.ppo import PPOConfig

    from ray.tune.registry import register_env

    register_env("corpus-distorted-pendulum", _distorted_pendulum)
    return (PPOConfig().environment("corpus-distorted-pendulum", normalize_actions=normalize).callbacks(cb)
            .debugging(seed=0).env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=2, vf_clip_param=1e5))


def _dqn_cartpole(cb, epsilon):
    from ray.rllib.algorithms.dqn import DQNConfig

    return (DQNConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
            .env_runners(num_env_runners=0, rollout_fragment_length=16)
            .training(train_batch_size_per_learner=32, num_steps_sampled_before_learning_starts=1000,
                      epsilon=epsilon)
            .reporting(min_sample_timesteps_per_iteration=500))


class LoggerReadingEnv(gym.Env):
    """A spacecraft-tasking env in the manner of bsk_rl's: each step reads its simulator's
    state logger, which allocates a new vector per read; ``keep``: every read stays in the
    env's log for the process's life (the reported leak), else the log is the episode's only."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config=None):
        self.keep = bool((config or {}).get("keep", False))
        self.log, self.t = [], 0

    def read_logger(self):
        return np.random.default_rng(self.t).uniform(-1, 1, 1024)   # a new vector per read

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        if not self.keep:
            self.log = []
        return np.zeros(8, np.float32), {}

    def step(self, action):
        self.t += 1
        self.log.append(self.read_logger())
        return self.log[-1][:8].astype(np.float32), float(action == 1), False, self.t >= 200, {}


def _ppo_remote(cb, env, env_config=None, **callbacks):
    from ray.rllib.algorithms.ppo import PPOConfig

    return (PPOConfig().environment(env, env_config=env_config or {}).callbacks(cb, **callbacks)
            .debugging(seed=0).env_runners(num_env_runners=1, sample_timeout_s=60)
            .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=1))


#: the memory cases run past the leak rule's first minute shortened to 5 s (the one threshold
#: changed), on a remote runner (its own process, whose RSS is judged)
_MEMORY = (("thresholds", {"leak_min_seconds": 5.0}),)

LIVE_CASES = [
    LiveCase("actions_not_normalized", "learning (PPO)", "https://github.com/ray-project/ray/issues/1862",
             "a Box(300, 500) action space sampled around [-2, 2]: the policy's actions never reach the "
             "space (ericl's squashing fix, confirmed by the reporter; PR 16531 made normalize_actions the "
             "default)",
             lambda cb: _ppo_distorted(cb, False), lambda cb: _ppo_distorted(cb, True),
             frozenset({"ACTION_OUT_OF_BOUNDS"}), iterations=2),
    LiveCase("epsilon_spent_before_learning", "learning (DQN)",
             "https://github.com/DLR-RM/stable-baselines3/issues/529",
             "epsilon reaches its final value before learning starts: the untrained Q-network picks the same "
             "action in every state (Miffyli: \"Yes, this is somewhat expected\")",
             lambda cb: _dqn_cartpole(cb, [[0, 1.0], [500, 0.05]]),
             lambda cb: _dqn_cartpole(cb, [[0, 1.0], [10000, 0.05]]),
             frozenset({"EPSILON_SCHEDULE"}), iterations=3),
    LiveCase("env_keeps_every_logger_read", "crashes and hangs (memory)", "https://github.com/AVSLab/bsk_rl/issues/31",
             "the env slowly leaks memory under RLlib (30 % -> 100 % of 3.8 GB a core over ~5 M steps on 30 "
             "cores, ~7 KB a step): objgraph showed each read of the simulator's loggers allocating a new "
             "vector that is never freed (the reporter); here each read is kept in the env's log",
             lambda cb: _ppo_remote(cb, LoggerReadingEnv, {"keep": True}),
             lambda cb: _ppo_remote(cb, LoggerReadingEnv, {"keep": False}),
             frozenset({"MEMORY_LEAK_SUSPECTED"}), iterations=40, options=_MEMORY),
]
