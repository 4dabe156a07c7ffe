"""The healthy-run corpus: clean runs recorded with Flow1Callbacks (scripts/record_healthy.py)
must raise no WARN and no FAIL -- as recorded, and when today's rules are run again on the
raw numbers they judged (the run's returns, each snapshot's action counts and policy
statistics). A rule made noisier fails here before it cries wolf on a user's run; the one
recorded run whose learning truly fell and stayed down must say so, once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flow1_ray.common import codes as C
from flow1_ray.checks.curves import result_number
from flow1_ray.checks.learner.reward_drop import RunReturnDrop
from flow1_ray.checks.states.state_action import (Snapshot, StateActionThresholds, decided_share, trend_findings,
    verdicts, warn_codes)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "healthy"
RUNS = sorted(p.name for p in CORPUS.iterdir() if (p / "results.jsonl").exists()) if CORPUS.is_dir() else []

#: What a clean-env run may rightly say. RLlib's default APPO on CartPole held a return of
#: ~232 (iterations 10-14), fell to 123-172 for twenty iterations (~450 episodes) and only
#: then recovered to 338: its learning was unstable, a true and sustained drop of the run's
#: return that the user can act on (the learner curves say why). REWARD_DROP says so once.
EXPECTED = {"appo": {C.REWARD_DROP}}


def _results(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name / "results.jsonl").read_text().splitlines()]


def test_the_corpus_holds_the_runs_it_promises():
    assert {"ppo-default", "dqn", "sac", "appo", "multi-agent-ppo"} <= set(RUNS)
    ppo = _results("ppo-default")
    assert len(ppo) == 20 and result_number(ppo[-1], "env_runners", "episode_return_mean") >= 450, \
        "the default PPO CartPole run learns (return ~500 by iteration 20)"


@pytest.mark.parametrize("name", RUNS)
def test_recorded_events_hold_no_warn_or_fail(name):
    events = [json.loads(line) for line in (CORPUS / name / "events.jsonl").read_text().splitlines()]
    assert events, "a run records at least its state snapshots"
    loud = [(e["status"], e["code"], e["message"][:160]) for e in events if e["status"] != C.PASS]
    assert [code for _, code, _ in loud] == sorted(EXPECTED.get(name, set())), loud


@pytest.mark.parametrize("name", RUNS)
def test_the_run_return_rule_replayed_is_silent(name):
    rule = RunReturnDrop(window=100)
    found = []
    results = _results(name)
    assert results, f"{name}: results.jsonl holds no iteration to replay"
    for r in results:
        f = rule.add(int(r["training_iteration"]), result_number(r, "env_runners", "episode_return_mean"),
                     result_number(r, "env_runners", "num_episodes_lifetime"))
        if f is not None:
            found.append(f.code)
    assert found == sorted(EXPECTED.get(name, set()) & {C.REWARD_DROP})


def _snapshots(name: str) -> dict[str, list[dict]]:
    """Per module, per snapshot (in order): counts, failures and policy statistics."""
    import pyarrow.parquet as pq

    path = CORPUS / name / "clusters.parquet"
    assert path.is_file(), f"{name}: no clusters.parquet, nothing to replay (record it: scripts/record_healthy.py)"
    by: dict[tuple, list[dict]] = {}
    for r in pq.read_table(path).to_pylist():
        by.setdefault((r.get("module") or "default_policy", r["iteration"], r["snapshot"]), []).append(r)
    out: dict[str, list[dict]] = {}
    for (module, it, snap), rows in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        rows.sort(key=lambda r: r["cluster"])
        policy = np.array([[np.nan if r["policy_entropy"] is None else r["policy_entropy"],
                            np.nan if r["policy_top_p"] is None else r["policy_top_p"]] for r in rows])
        out.setdefault(module, []).append({"iteration": it, "counts": np.array([r["action_counts"] for r in rows]),
                                           "failures": np.array([r["failures"] for r in rows]), "policy": policy})
    return out


@pytest.mark.parametrize("name", RUNS)
def test_the_state_action_rules_replayed_are_silent(name):
    th = StateActionThresholds()
    modules = _snapshots(name)
    assert modules and all(modules.values()), f"{name}: clusters.parquet holds no snapshot to replay"
    for module, snaps in modules.items():
        history: list[Snapshot] = []
        for i, s in enumerate(snaps):
            v = verdicts(s["counts"], s["failures"], th, policy=s["policy"])
            history.append(Snapshot(i, s["iteration"], np.zeros((len(v), 1)), s["counts"].sum(1), v, None,
                                    decided_share(s["counts"], s["policy"], th)))
            assert warn_codes(history, th) == set(), (module, s["iteration"], v)
            lost = [f for f in trend_findings(history, th) if f.code == C.LOST_STATES_GROWING]
            assert lost == [], (module, lost[0].message if lost else "")
