"""Record the healthy-run corpus: clean RLlib runs long enough to learn, with Flow1Callbacks.

For each set-up it writes, under ``--out/<name>/``:

- ``results.jsonl``: one line per iteration with the numbers flow1's driver-side rules read
  (the ``env_runners`` and ``learners`` sections of RLlib's result, numbers only, and the
  iteration), so that today's and tomorrow's rules can be replayed on it;
- ``events.jsonl``: the run's events as flow1 recorded them;
- ``clusters.parquet``: the state-cluster rows of every snapshot (counts, policy statistics,
  verdicts), for the state-action rules to be replayed.

``tests/checks/test_healthy_runs.py`` reads the corpus; it must stay small (a few hundred KB).

    .venv/bin/python scripts/record_healthy.py [--out tests/data/healthy] [--only ppo-default,...]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _ppo_default():
    from ray.rllib.algorithms.ppo import PPOConfig

    return PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2), 20


def _dqn():
    from ray.rllib.algorithms.dqn import DQNConfig

    return (DQNConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
            .reporting(min_sample_timesteps_per_iteration=1000)), 30


def _sac():
    from ray.rllib.algorithms.sac import SACConfig

    # one update per 10 env steps: SAC's default of one per step costs ~120 s per 1,000-step
    # iteration on 2 cores (RLlib's per-update overhead, whatever the batch size)
    return (SACConfig().environment("Pendulum-v1").env_runners(num_env_runners=1, rollout_fragment_length=10)
            .reporting(min_sample_timesteps_per_iteration=1000)), 15


def _appo():
    from ray.rllib.algorithms.appo import APPOConfig

    return (APPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
            .learners(num_learners=1)), 40


def _multi_agent():
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
            .env_runners(num_env_runners=2)
            .training(train_batch_size_per_learner=2000)), 20


SETUPS = {"ppo-default": _ppo_default, "dqn": _dqn, "sac": _sac, "appo": _appo, "multi-agent-ppo": _multi_agent}


def numbers(d: dict) -> dict:
    """The finite numbers of a (nested) result section, nesting kept."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            sub = numbers(v)
            if sub:
                out[str(k)] = sub
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[str(k)] = float(v)
        elif hasattr(v, "item") and getattr(v, "size", 1) == 1:
            try:
                x = float(v.item())
            except (TypeError, ValueError):
                continue
            if math.isfinite(x):
                out[str(k)] = x
    return out


def record(name: str, out: Path, heatmap_every: int) -> None:
    from flow1_ray import Flow1Callbacks, load_clusters, load_events

    config, iterations = SETUPS[name]()
    tmp = tempfile.mkdtemp()
    config = config.callbacks(Flow1Callbacks.with_options(output_dir=tmp, print_events=False,
                                                          heatmap_every=heatmap_every)).debugging(seed=0)
    algo = config.build_algo()
    rows = []
    t0 = time.time()
    try:
        for _ in range(iterations):
            r = algo.train()
            rows.append({"training_iteration": r["training_iteration"], "env_runners": numbers(r["env_runners"]),
                         "learners": numbers(r.get("learners", {})), "flow1": r.get("flow1", {})})
            print(f"{name} {r['training_iteration']:3d} return {r['env_runners'].get('episode_return_mean')}",
                  flush=True)
    finally:
        algo.stop()
    run_dir = Path(rows[-1]["flow1"]["run_dir"])
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    with open(d / "results.jsonl", "w") as f:
        for row in rows:
            row["flow1"] = {k: v for k, v in row["flow1"].items() if k != "run_dir"}
            f.write(json.dumps(row) + "\n")
    with open(d / "events.jsonl", "w") as f:
        for e in load_events(run_dir).to_pylist():
            e["ts"] = e["ts"].isoformat()
            f.write(json.dumps(e) + "\n")
    if (run_dir / "clusters").is_dir():
        import pyarrow.parquet as pq

        pq.write_table(load_clusters(run_dir), d / "clusters.parquet", compression="zstd")
    loud = [(e["status"], e["code"]) for e in load_events(run_dir).to_pylist() if e["status"] != "PASS"]
    print(f"{name}: {len(rows)} iterations in {time.time() - t0:.0f} s, last return "
          f"{rows[-1]['env_runners'].get('episode_return_mean')}, WARN/FAIL events: {loud or 'none'}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "healthy"))
    ap.add_argument("--only", default=",".join(SETUPS))
    ap.add_argument("--heatmap-every", type=int, default=5)
    a = ap.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False,
             logging_level=logging.ERROR)
    for name in a.only.split(","):
        record(name, Path(a.out), a.heatmap_every)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
