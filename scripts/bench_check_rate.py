"""The hidden-fault zoo's recall on the live path at each contract-check rate.

Every fault env of ``tests/envcheck/test_zoo.py`` runs in a real SingleAgentEnvRunner (this process,
Flow1Callbacks, ``check_budget=0`` so that the rate is the one asked for) for ``--steps``
random-action env steps, at each ``--rates`` share of checked episodes, ``--seeds`` times
(each its own runner, so its own draw of episodes). A fault counts as found when the runner's
findings hold its code. The baseline is rate 1.0 (every episode checked): recall at a rate is
the share of the faults found at 1.0 that are found at that rate. Rate 0 leaves what runs on
every step whatever the rate: liveness, crashes, the scan of every sampled step.

    .venv/bin/python scripts/bench_check_rate.py [--rates 1,0.1,0.03,0.01,0] [--steps 2000] [--seeds 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "envs"))


def run_one(env: type, rate: float, steps: int, index: int) -> set[str] | str:
    """The codes one runner found, or why it could not run the env."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from flow1_ray import Flow1Callbacks

    cb = Flow1Callbacks.with_options(output_dir=tempfile.mkdtemp(), print_events=False, state_actions=False,
                                     sample_rate=rate, check_budget=0.0)
    from ray import tune

    tune.register_env(f"zoo-{env.__name__}", lambda cfg, e=env: e())   # the zoo's envs take no config
    try:
        runner = SingleAgentEnvRunner(config=PPOConfig().environment(f"zoo-{env.__name__}").callbacks(cb),
                                      worker_index=index)
    except Exception as e:  # RLlib refuses the env itself (a bad space, the old gym API)
        return f"runner not built: {type(e).__name__}"
    agents = [a for c in runner._callbacks for a in getattr(c, "_agents", {}).values()]
    sent: set[str] = set()
    for a in agents:   # what a runner sends at once (a crash, before the process may exit) is found too
        a._send = lambda findings, send=a._send: (sent.update(f.code for f in findings), send(findings))
    try:
        done = 0
        while done < steps:
            try:
                done += sum(len(e) for e in runner.sample(num_timesteps=min(500, steps - done), random_actions=True))
            except Exception:   # the env raised: flow1 recorded it; RLlib would restart the runner
                break
        for a in agents:
            for rc in a.checkers:
                rc.judge()
        return sent | {f.code for a in agents for f in a.log._items.values()}
    finally:
        try:
            runner.stop()
        except Exception:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1,0.1,0.03,0.01,0")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=2)
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    import ray

    from test_zoo import FAULTS

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    logging.disable(logging.WARNING)
    found: dict[tuple[str, float], int] = {}
    skipped: dict[str, str] = {}
    index = 0
    for env, code, _, _ in FAULTS:
        name = env.__name__
        for rate in rates:
            hits = 0
            for _ in range(a.seeds):
                index += 1
                got = run_one(env, rate, a.steps, index)
                if isinstance(got, str):
                    skipped[name] = got
                    break
                hits += code in got
            if name in skipped:
                break
            found[(name, rate)] = hits
        row = " ".join(f"{r:g}:{found.get((name, r), '-')}/{a.seeds}" for r in rates)
        print(f"{name:28s} {code:24s} {skipped.get(name, row)}", flush=True)
    ray.shutdown()
    base = [n for n in {k[0] for k in found} if found.get((n, 1.0), 0) > 0]
    print(f"\n{len(FAULTS)} zoo faults; {len(skipped)} not runnable in an EnvRunner; {len(base)} found on the live "
          f"path at rate 1; {a.steps} random-action steps per runner, {a.seeds} runners per rate")
    for rate in rates:
        hit = sum(found.get((n, rate), 0) for n in base)
        total = len(base) * a.seeds
        print(f"rate {rate:<5g} recall {hit / max(total, 1):.3f} ({hit} of {total} runner-faults)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
