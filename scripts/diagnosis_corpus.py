"""The diagnosis's calibration corpus: real RLlib runs with a known cause, recorded with flow1,
diagnosed from their run directories, and scored against their labels.

    .venv/bin/python scripts/diagnosis_corpus.py [--out DIR] [--only NAME ...] [--json FILE]

Each case is a fault planted in a real run (or none: a healthy run) with its label: the primary
symptoms that are right for it and the cause that is. The script trains every case on a local
Ray (2 CPUs), reads each run directory back as ``flow1 report`` does, and prints, per label,
how many runs had a right primary symptom and a right top cause; healthy runs must be diagnosed
healthy. The run directories stay under ``--out`` (a few MB each), so the corpus can be read
again without training (``--rescore DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "envs"), str(ROOT / "tests" / "fixtures")]

HEALTHY = "healthy"


@dataclass(frozen=True)
class Case:
    name: str
    label: str                      # the cause (a cause id, a finding code in lower case, or "healthy")
    make: Callable[[Any, int], Any]  # (callbacks, seed) -> AlgorithmConfig
    iterations: int
    primary: tuple[str, ...] = ()   # the primary symptoms that are right (empty: healthy)
    seeds: tuple[int, ...] = (0,)


def _ppo(cb, seed, env="CartPole-v1", runners=1, **training):
    from ray.rllib.algorithms.ppo import PPOConfig

    return (PPOConfig().environment(env).callbacks(cb).debugging(seed=seed)
            .env_runners(num_env_runners=runners, sample_timeout_s=30)
            .training(**{"train_batch_size_per_learner": 1000, **training}))


def _appo(cb, seed, **training):
    from ray.rllib.algorithms.appo import APPOConfig

    return (APPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=seed)
            .env_runners(num_env_runners=1, sample_timeout_s=30)
            .training(**{"train_batch_size_per_learner": 500, **training}).reporting(min_time_s_per_iteration=2))


def _dqn(cb, seed, **training):
    from ray.rllib.algorithms.dqn import DQNConfig

    return (DQNConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=seed)
            .env_runners(num_env_runners=0, rollout_fragment_length=16)
            .training(**{"train_batch_size_per_learner": 32, "num_steps_sampled_before_learning_starts": 200,
                         **training})
            .reporting(min_sample_timesteps_per_iteration=500))


def _sac(cb, seed, **training):
    from ray.rllib.algorithms.sac import SACConfig

    return (SACConfig().environment("Pendulum-v1").callbacks(cb).debugging(seed=seed)
            .env_runners(num_env_runners=0, rollout_fragment_length=4)
            .rl_module(model_config={"fcnet_hiddens": [64, 64]})
            .training(**{"train_batch_size_per_learner": 64, "num_steps_sampled_before_learning_starts": 100,
                         **training})
            .reporting(min_sample_timesteps_per_iteration=200))


def _multi_agent(cb, seed, lr=5e-5, **training):
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return (_ppo(cb, seed, env=MultiAgentCartPole, lr=lr, **training)
            .environment(MultiAgentCartPole, env_config={"num_agents": 2})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}"))


def _shared_trunk(cb, seed):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return _ppo(cb, seed, vf_loss_coeff=1000.0, num_epochs=2).rl_module(
        model_config=DefaultModelConfig(vf_share_layers=True))


def _zeroed_head(cb, seed):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from sick_modules import ZeroedPolicyHead

    return _ppo(cb, seed, num_epochs=2).rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroedPolicyHead))


def _moving_goal(cb, seed):
    import traps

    return _ppo(cb, seed, env=traps.MovingGoal, minibatch_size=250, num_epochs=1).env_runners(
        num_envs_per_env_runner=2)


def _nan_obs(cb, seed):
    from ray.tune.registry import register_env

    register_env("corpus-nan-obs", _nan_env)   # zoo's envs take no config: made by a creator
    return _ppo(cb, seed, env="corpus-nan-obs", train_batch_size_per_learner=500)


def _nan_env(config):
    import zoo

    return zoo.NanObsAtStep40()


def _crash(cb, seed):
    from flow1_ray.cli.train import INJECT
    from flow1_ray.envcheck.demo import FaultyCartPole

    return (_ppo(cb, seed, env=FaultyCartPole, train_batch_size_per_learner=500)
            .environment(FaultyCartPole, env_config=dict(INJECT["crash"][0]))
            .fault_tolerance(restart_failed_env_runners=True))


_SCHEDULE_TO_ZERO = [[0, 3e-4], [2000, 1e-9]]

CASES: tuple[Case, ...] = (
    # healthy runs: diagnosed healthy (no symptom), whatever else they are
    Case("ppo-healthy", HEALTHY, lambda cb, s: _ppo(cb, s), 10, seeds=(0, 1)),
    Case("appo-healthy", HEALTHY, lambda cb, s: _appo(cb, s), 8, seeds=(0, 1)),
    # DQN: 12 iterations, so that REWARD_DROP has its data (at 8 the runs were "not enough data")
    Case("dqn-healthy", HEALTHY, lambda cb, s: _dqn(cb, s), 12, seeds=(0, 1)),
    Case("sac-healthy", HEALTHY, lambda cb, s: _sac(cb, s), 5, seeds=(0, 1)),
    Case("multi-agent-healthy", HEALTHY, lambda cb, s: _multi_agent(cb, s), 8),
    # the policy's step far too large
    Case("ppo-lr-0.05", "step_too_large", lambda cb, s: _ppo(cb, s, lr=0.05, num_epochs=10), 6,
         ("KL_SPIKE", "KL_TOO_HIGH", "CLIP_FRACTION", "ENTROPY_COLLAPSE"), seeds=(0, 1, 2)),
    Case("ppo-pendulum-lr-0.05", "step_too_large",
         lambda cb, s: _ppo(cb, s, env="Pendulum-v1", lr=0.05, num_epochs=10, minibatch_size=250, vf_clip_param=1e6),
         5, ("KL_SPIKE", "KL_TOO_HIGH", "CLIP_FRACTION", "ENTROPY_COLLAPSE")),
    Case("appo-lr-0.05", "step_too_large", lambda cb, s: _appo(cb, s, lr=0.05), 8,
         ("KL_SPIKE", "KL_TOO_HIGH", "CLIP_FRACTION", "ENTROPY_COLLAPSE"), seeds=(0, 1)),
    Case("multi-agent-lr-0.05", "step_too_large", lambda cb, s: _multi_agent(cb, s, lr=0.05, num_epochs=10), 6,
         ("KL_SPIKE", "KL_TOO_HIGH", "CLIP_FRACTION", "ENTROPY_COLLAPSE")),
    # the step decayed away: an lr schedule to ~0
    Case("ppo-lr-schedule-to-zero", "step_too_small", lambda cb, s: _ppo(cb, s, lr=_SCHEDULE_TO_ZERO), 14,
         ("LR_DECAYED", "KL_TOO_LOW", "POLICY_LOSS_STUCK"), seeds=(0, 1, 2)),
    # the critic: its loss clipped away (Pendulum's returns, RLlib's vf_clip_param 10)
    Case("ppo-pendulum-vf-clip", "value_loss_clipped",
         lambda cb, s: _ppo(cb, s, env="Pendulum-v1", runners=0, minibatch_size=250, num_epochs=2), 6,
         ("GRADIENT_ZERO", "VALUE_NOT_LEARNING"), seeds=(0, 1, 2)),
    # the value head swamps a shared trunk
    Case("ppo-shared-trunk-vf-1000", "value_swamps_trunk", _shared_trunk, 6, ("VALUE_DOMINATES",), seeds=(0, 1, 2)),
    # a module whose forward cuts its policy head's gradient
    Case("ppo-zeroed-policy-head", "forward_cuts_gradient", _zeroed_head, 3, ("GRADIENT_ZERO",), seeds=(0, 1, 2)),
    # Q-learning's step far too large
    Case("dqn-lr-1.0", "q_step_too_large", lambda cb, s: _dqn(cb, s, lr=1.0), 6, ("Q_DIVERGENCE",), seeds=(0, 1, 2)),
    # SAC's temperature frozen near 0
    Case("sac-alpha-frozen", "temperature",
         lambda cb, s: _sac(cb, s, initial_alpha=1e-4, alpha_lr=0.0, actor_lr=3e-3), 4, ("ALPHA_COLLAPSE",),
         seeds=(0, 1, 2)),
    # sampling: exploration off
    Case("ppo-explore-off", "exploration_off",
         lambda cb, s: _ppo(cb, s, runners=0, train_batch_size_per_learner=500).env_runners(explore=False), 2,
         ("EXPLORATION_OFF",)),
    # the env: a goal it moves itself, NaN observations, a crash
    Case("moving-goal", "reward_unearned", _moving_goal, 4, ("REWARD_UNEARNED",)),
    Case("nan-observation", "obs_nan_inf", _nan_obs, 2, ("OBS_NAN_INF",)),
    Case("env-crash", "env_crashed", _crash, 3, ("ENV_CRASHED",)),
)


def run_case(case: Case, seed: int, out: Path) -> Path | None:
    """Train one case; its run directory (None when the run could not be built)."""
    from flow1_ray import Flow1Callbacks

    opts = {"audit_reward": True} if case.label == "reward_unearned" else {}
    # the Learner traced every 10th update (the default 50 leaves a 4-iteration run a trace or two:
    # the gradient rules need a few in a row); no state maps (no cause reads them here)
    cb = Flow1Callbacks.with_options(output_dir=str(out / f"{case.name}-s{seed}"), print_events=False,
                                     state_actions=False, grad_every=10, **opts)
    algo = case.make(cb, seed).build_algo()
    result = None
    try:
        for _ in range(case.iterations):
            result = algo.train()
    finally:
        algo.stop()
    return Path(result["flow1"]["run_dir"]) if result else None


def score(case: Case, run_dir: Path) -> dict:
    from flow1_ray.report.rundir import load_run_report

    d = load_run_report(run_dir).diagnosis()
    primary = (d.get("primary") or {}).get("code")
    top = (d.get("causes") or [{}])[0]
    if case.label == HEALTHY:
        right_primary = right_cause = d["state"] == "healthy"   # "not enough data" is no verdict: a miss here
    else:
        right_primary = primary in case.primary
        right_cause = top.get("id") == case.label
    return {"case": case.name, "label": case.label, "run_dir": str(run_dir), "state": d["state"],
            "primary": primary, "top_cause": top.get("id"), "standing": top.get("standing"),
            "right_primary": right_primary, "right_cause": right_cause, "line": d["line"]}


def table(rows: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["label"], []).append(r)
    lines = ["| cause (label) | runs | primary symptom right | top cause right |", "|---|---|---|---|"]
    for label, rs in sorted(by.items()):
        lines.append(f"| {label} | {len(rs)} | {sum(r['right_primary'] for r in rs)} | {sum(r['right_cause'] for r in rs)} |")
    sick = [r for r in rows if r["label"] != HEALTHY]
    healthy = [r for r in rows if r["label"] == HEALTHY]
    lines.append(f"| **all sick runs** | {len(sick)} | {sum(r['right_primary'] for r in sick)} "
                 f"({_pct(sick, 'right_primary')}) | {sum(r['right_cause'] for r in sick)} ({_pct(sick, 'right_cause')}) |")
    lines.append(f"| **healthy, diagnosed healthy** | {len(healthy)} | {sum(r['right_cause'] for r in healthy)} "
                 f"({_pct(healthy, 'right_cause')}) | |")
    return "\n".join(lines)


def _pct(rows: list[dict], key: str) -> str:
    return f"{100 * sum(r[key] for r in rows) / len(rows):.0f} %" if rows else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/flow1-diagnosis-corpus", help="where the run directories go")
    p.add_argument("--only", nargs="*", default=None, help="case names to run (default: all)")
    p.add_argument("--json", default=None, help="write the scored rows here")
    p.add_argument("--rescore", action="store_true", help="score the run directories under --out, no training")
    a = p.parse_args(argv)
    out = Path(a.out)
    cases = [c for c in CASES if a.only is None or c.name in a.only]
    rows = []
    if not a.rescore:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray

        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                     [str(ROOT / "tests" / "envs"), str(ROOT / "tests" / "fixtures")])}})
    for case in cases:
        for seed in case.seeds:
            t0 = time.monotonic()
            if a.rescore:
                found = sorted((out / f"{case.name}-s{seed}").glob("*/run.json"))
                run_dir = found[-1].parent if found else None
            else:
                try:
                    run_dir = run_case(case, seed, out)
                except Exception as e:   # noqa: BLE001 -- a case that cannot run is said, the rest go on
                    print(f"{case.name} seed {seed}: could not run: {type(e).__name__}: {e}"[:400], flush=True)
                    continue
            if run_dir is None:
                continue
            r = score(case, run_dir)
            r["seed"], r["seconds"] = seed, round(time.monotonic() - t0, 1)
            rows.append(r)
            mark = "ok " if r["right_primary"] and r["right_cause"] else "MISS"
            print(f"{mark} {case.name} s{seed} ({r['seconds']} s): {r['line'][:220]}", flush=True)
    print()
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
