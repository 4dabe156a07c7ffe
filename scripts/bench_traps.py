"""What the trap checks cost on 1,000 steps: the reward-logic audit and the leakage test.

Two measures per env, one arm alive at a time, arms alternated over ``--rounds``, same seed:

* ``flow1 check`` in this process (``check_env``, 1,000 random-action steps) without and
  with ``audit_reward=True``: the audit's whole cost is the difference (a snapshot of the
  env's attributes a step, copies of the env while a suspect waits for its counterfactuals,
  the judgement);
* the leakage test (on in every check) apart: a recorded 1,000-step rollout fed to a
  :class:`~flow1_ray.checks.env.temporal_leak.LeakageWatch` (per step) and judged (once).

    python scripts/bench_traps.py [--rounds 5] [--env CartPole-v1 --env HalfCheetah-v5 ...]
    PYTHONPATH=tests:tests/envs python scripts/bench_traps.py --env audit_envs:ManyAttributes
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
import warnings

import gymnasium as gym

from flow1_ray import check_env
from flow1_ray.checks.env.temporal_leak import LeakageWatch

DEFAULT_ENVS = ["CartPole-v1", "HalfCheetah-v5", "MiniGrid-DoorKey-5x5-v0", "ALE/Pong-v5"]
PACKAGES = {"HalfCheetah": "mujoco", "MiniGrid": "minigrid", "ALE/": "ale_py", "highway": "highway_env"}
STEPS = 1000


def _register(env_id: str) -> bool:
    for prefix, module in PACKAGES.items():
        if env_id.startswith(prefix):
            try:
                mod = importlib.import_module(module)
            except ImportError:
                return False
            if module == "ale_py":
                gym.register_envs(mod)
    return True


def _check_s(env_id: str, audit: bool, seed: int) -> float:
    t0 = time.perf_counter()
    check_env(env_id, steps=STEPS, seed=seed, audit_reward=audit)
    return time.perf_counter() - t0


def _leak_s(env_id: str, seed: int) -> tuple[float, float, str]:
    """(seconds fed, seconds judged, what the test said) on one recorded rollout."""
    env = gym.make(env_id)
    rollout = []
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    first = obs
    for _ in range(STEPS):
        a = env.action_space.sample()
        obs, r, te, tr, _ = env.step(a)
        rollout.append((a, obs, r, te or tr))
        if te or tr:
            obs, _ = env.reset()
            rollout.append(("reset", obs, None, None))
    env.close()
    w = LeakageWatch(env.observation_space, env.action_space)
    t0 = time.perf_counter()
    w.on_reset(first)
    for a, o, r, _ in rollout:
        if isinstance(a, str):
            w.on_reset(o)
        else:
            w.on_step(a, o, r)
    t1 = time.perf_counter()
    _, said = w.findings()
    return t1 - t0, time.perf_counter() - t1, said["leakage"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--env", action="append")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print(f"| env | check, plain (s) | check, --audit-reward (s) | audit / plain | leakage test: fed + judged (ms) |")
    print("|---|---|---|---|---|")
    for env_id in args.env or DEFAULT_ENVS:
        if not _register(env_id):
            print(f"| {env_id} | (package not installed) | | | |")
            continue
        _check_s(env_id, False, args.seed)   # warm-up: imports, first make
        plain, audit = [], []
        for i in range(args.rounds):
            for arm in ((False, True) if i % 2 == 0 else (True, False)):
                (audit if arm else plain).append(_check_s(env_id, arm, args.seed))
        fed, judged, said = (_leak_s(env_id, args.seed) if ":" not in env_id
                             else (0.0, 0.0, "not measured: a module:attr, not a registered id"))
        mp, ma = statistics.median(plain), statistics.median(audit)
        ratios = sorted(a / p for a, p in zip(audit, plain))
        print(f"| {env_id} | {mp:.2f} | {ma:.2f} | {ma / mp:.2f} (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}) | "
              f"{fed * 1e3:.0f} + {judged * 1e3:.0f} ({said}) |", flush=True)


if __name__ == "__main__":
    main()
