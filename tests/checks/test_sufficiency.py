"""Enough data to judge learning: a run too short for every rule that says whether it learns is
"not enough data to judge learning" (never PASS, exit 2 unless --allow-short); a rule whose
signal the run never recorded does not apply; the recorded healthy runs of every algorithm are
long enough; the need of each trend rule is in its reference entry."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from flow1_ray.checks.catalogue import rules
from flow1_ray.checks.learner.curve_diagnosis import diagnose_run
from flow1_ray.checks.learner.sufficiency import DataCount, count_from_tables, sufficiency
from flow1_ray.common import codes as C
from flow1_ray.report.model import Report

CORPUS = Path(__file__).resolve().parents[1] / "data" / "healthy"
LOG2 = math.log(2)


def _results(n: int, episodes_per_iteration: int = 20, stats: dict | None = None) -> list[dict]:
    stats = stats if stats is not None else {"entropy": LOG2 * 0.9, "mean_kl_loss": 0.01, "policy_loss": 0.05, "vf_loss": 9.5,
                      "vf_explained_var": 0.3, "default_optimizer_learning_rate": 5e-5}
    return [{"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 1000 * (i + 1),
             "env_runners": {"episode_return_mean": 20.0 + 10 * i, "num_episodes": episodes_per_iteration,
                             "num_episodes_lifetime": episodes_per_iteration * (i + 1)},
             "learners": {"default_policy": dict(stats), "__all_modules__": {}}} for i in range(n)]


def test_a_two_iteration_run_is_not_enough_to_judge_learning():
    _, enough = diagnose_run(_results(2), action_space=gym.spaces.Discrete(2))
    learns = {c for c, r in rules().items() if r.needs is not None and r.needs.learns}
    assert not enough.enough and not learns & set(enough.judged), enough.judged   # (LR_DECAYED needs 2)
    assert enough.line.startswith("not enough data to judge learning: 2 iterations, 40 episodes"), enough.line
    # the nearest need is named: the PPO rules that judge on 5 iterations of their signal
    assert "KL_TOO_HIGH" in enough.line and "each need 5 iterations with its signal" in enough.line, enough.line
    assert "ALPHA_COLLAPSE" not in enough.short, "SAC's alpha was never recorded: the rule does not apply"
    report = Report(target="r", learning=enough.to_dict())
    assert report.status == C.PASS and report.verdict.startswith("PASS, but learning not judged"), report.verdict
    assert report.exit_code() == 2 and report.exit_code(allow_short=True) == 0
    assert report.exit_code(C.WARN) == 2 and any(g.startswith("not enough data") for g in report.gaps())


def test_a_fail_still_fails_a_short_run():
    from flow1_ray.common.events import Event

    _, enough = diagnose_run(_results(2), action_space=gym.spaces.Discrete(2))
    report = Report(target="r", learning=enough.to_dict(), events=[Event(code=C.WORKER_DIED, status=C.FAIL,
                                                                         module=C.WORKER, message="died")])
    assert report.exit_code() == 1 and report.verdict == C.FAIL


def test_five_iterations_judge_the_policy_and_name_what_the_return_still_needs():
    _, enough = diagnose_run(_results(5), action_space=gym.spaces.Discrete(2))
    assert enough.enough and {"KL_TOO_HIGH", "KL_TOO_LOW", "VALUE_NOT_LEARNING"} <= set(enough.judged)
    assert "REWARD_DROP" in enough.short and "needs 8 iterations" in enough.short["REWARD_DROP"], enough.short
    report = Report(target="r", learning=enough.to_dict())
    assert report.verdict == C.PASS or report.verdict.startswith("PASS, but"), report.verdict
    assert "learning not judged" not in report.verdict and report.exit_code() == 0
    assert report.gaps() == [], "a rule still short once learning is judged is in report.json's learning key only"
    assert report.to_dict()["learning"]["short"]["REWARD_DROP"].startswith("needs 8 iterations")


def test_the_return_needs_two_smoothing_windows_of_episodes():
    """Ten iterations but 5 episodes each (50 < 2 x 100): the return's drop cannot be judged yet;
    the window is the run's own (20: 40 episodes suffice)."""
    no_learner = _results(10, episodes_per_iteration=5, stats={})
    _, enough = diagnose_run(no_learner)
    assert not enough.enough and "REWARD_DROP" in enough.short and "200 at metrics_num_episodes_for_smoothing=100" \
        in enough.line, enough.line
    _, enough = diagnose_run(no_learner, config={"metrics_num_episodes_for_smoothing": 20})
    assert enough.enough and enough.judged == ("REWARD_DROP",)


def test_a_run_with_no_learning_signal_says_so():
    enough = sufficiency(DataCount())
    assert not enough.enough and "no learning signal was recorded" in enough.line


@pytest.mark.parametrize("name, space", [("ppo-default", gym.spaces.Discrete(2)), ("appo", gym.spaces.Discrete(2)),
                                         ("dqn", gym.spaces.Discrete(2)), ("sac", gym.spaces.Box(-2, 2, (1,))),
                                         ("multi-agent-ppo", gym.spaces.Discrete(2))])
def test_the_recorded_healthy_runs_are_long_enough_to_judge(name, space):
    results = [json.loads(line) for line in (CORPUS / name / "results.jsonl").read_text().splitlines()]
    _, enough = diagnose_run(results, action_space=space)
    assert enough.enough, (name, enough.line, enough.counts)


def test_the_tables_count_as_the_results_do():
    """A run directory's metrics and learner rows give the same count as the result dicts."""
    results = _results(6)
    _, from_results = diagnose_run(results, action_space=gym.spaces.Discrete(2))
    metrics = [{"iteration": r["training_iteration"], "episode_return_mean": r["env_runners"]["episode_return_mean"],
                "episodes": r["env_runners"]["num_episodes_lifetime"]} for r in results]
    learner = [{"iteration": r["training_iteration"], "module_id": "default_policy", "kind": "module",
                "layer": None, **r["learners"]["default_policy"], "entropy_ratio": 0.9} for r in results]
    learner += [{"iteration": 1, "module_id": "default_policy", "kind": "grad", "layer": "pi", "grad_rms": 1.0}]
    from_tables = sufficiency(count_from_tables(metrics, learner))
    assert from_tables.judged == from_results.judged and from_tables.short == from_results.short


def test_every_trend_rules_need_is_in_its_reference_entry():
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "codes.md").read_text()
    for code, rule in rules().items():
        if rule.needs is not None:
            entry = page.split(f"## {code} ")[1].split("\n## ")[0]
            assert f"**data it needs**: {rule.needs.text()}" in entry, code


def test_flow1_diagnose_exits_2_on_a_short_run_and_0_with_allow_short(tmp_path, cli_env):
    f = tmp_path / "result.json"
    f.write_text("\n".join(json.dumps(r) for r in _results(2)) + "\n")
    cmd = [sys.executable, "-m", "flow1_ray", "diagnose", str(f)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=cli_env, timeout=120)
    assert p.returncode == 2 and "not enough data to judge learning: 2 iterations" in p.stderr, p.stderr[-2000:]
    p = subprocess.run(cmd + ["--allow-short"], capture_output=True, text=True, env=cli_env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
