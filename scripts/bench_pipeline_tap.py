"""What the pipeline tap costs an EnvRunner's sample(): one SingleAgentEnvRunner built from a
config samples the same number of steps without the tap, with it recording (flow1 check
--config, a live window) and with it in place but not recording (a live runner between
windows; flow1_ray.pipeline.tap), arms alternating, round after round; prints the process CPU
per env step of each arm and the ratios (median and range over rounds), then the wall time of
the whole `flow1 check --config`.

    python scripts/bench_pipeline_tap.py [--config rllib_setups:ppo_cartpole] [--steps 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "envs")]


def _cpu_per_step(runner, steps: int) -> float:
    t0 = time.process_time()
    runner.sample(num_timesteps=steps, random_actions=False)
    return (time.process_time() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="rllib_setups:ppo_cartpole")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from flow1_ray.pipeline.config import load_config
    from flow1_ray.pipeline.tap import Tap

    config = load_config(args.config)
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1)
    runner = SingleAgentEnvRunner(config=config)
    runner.sample(num_timesteps=200)   # warm: the first forward passes, the env's first episodes
    plain, tapped, idle, ratios, idle_ratios = [], [], [], [], []
    for _ in range(args.rounds):
        a = _cpu_per_step(runner, args.steps)
        tap = Tap(runner)
        b = _cpu_per_step(runner, args.steps)
        tap.recording = False   # a live runner between windows: the tap in place, passing calls through
        c = _cpu_per_step(runner, args.steps)
        tap.remove()
        plain.append(a)
        tapped.append(b)
        idle.append(c)
        ratios.append(b / a)
        idle_ratios.append(c / a)
    med = statistics.median
    print(f"{args.config}: sample() CPU per env step, {args.rounds} rounds of {args.steps} steps")
    print(f"  plain  {med(plain) * 1e6:8.1f} us  tapped {med(tapped) * 1e6:8.1f} us  "
          f"(+{(med(tapped) - med(plain)) * 1e6:.1f} us a step)  idle tap {med(idle) * 1e6:8.1f} us")
    print(f"  ratio tapped/plain: median {med(ratios):.3f}, range {min(ratios):.3f} .. {max(ratios):.3f}")
    print(f"  ratio idle tap/plain: median {med(idle_ratios):.3f}, range {min(idle_ratios):.3f} .. "
          f"{max(idle_ratios):.3f}")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "flow1_ray", "check", "--config", args.config, "--steps", "1000"],
                       capture_output=True, text=True, env={**__import__("os").environ,
                                                            "PYTHONPATH": str(ROOT / "tests" / "envs")})
    print(f"flow1 check --config {args.config} --steps 1000: {time.perf_counter() - t0:.1f} s wall, exit {r.returncode}")


if __name__ == "__main__":
    main()
