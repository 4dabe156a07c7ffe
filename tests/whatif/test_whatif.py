"""``flow1 whatif``: the statistic, the plan, bad input, and the real thing on the sick run
of the learner tests (PPO CartPole, lr 0.05, 10 epochs: KL_SPIKE and ENTROPY_COLLAPSE)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from flow1_ray.common.errors import Flow1InputError
from flow1_ray.whatif.branch import change, change_from_knob
from flow1_ray.whatif.plan import Advice, Source, parse_set, plan
from flow1_ray.whatif.verdict import (ALPHA, HARMFUL, HELD, INCONCLUSIVE, NOT_HELD, RETURN, SIGNALS, compare, judge,
    permutation_p, reduce_series)


# -- the statistic -----------------------------------------------------------------------
@pytest.mark.parametrize("base, branch, better, p", [
    ([1, 2, 3], [4, 5, 6], +1, 1 / 20),       # 3 v 3, complete separation: the smallest p there is
    ([1, 2, 3], [4, 5, 6], -1, 1.0),
    ([1, 1, 1], [1, 1, 1], +1, 1.0),          # no difference: never significant
    ([1, 2, 3, 4], [5, 6, 7, 8], +1, 1 / 70),
    ([1, 2, 4], [3, 5, 6], +1, 2 / 20),
])
def test_the_rank_test_is_exact(base, branch, better, p):
    assert permutation_p(base, branch, better) == pytest.approx(p)


def test_a_knob_that_changes_nothing_is_held_or_harmful_at_most_alpha_of_the_time():
    """The stated error rate, over 4,000 draws of 3 seeds a side from one distribution."""
    rng = np.random.default_rng(0)
    n, said = 4000, {HELD: 0, HARMFUL: 0}
    for _ in range(n):
        a, b = rng.normal(20, 5, 3), rng.normal(20, 5, 3)
        c = compare(RETURN, a, b)
        v = judge(RETURN, c, [c]).verdict
        said[v] = said.get(v, 0) + 1
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / n)
    assert said[HELD] / n <= bound and said[HARMFUL] / n <= bound, said
    assert said[HELD] > 0 and said[HARMFUL] > 0   # the test can say either at all


def test_a_signal_gone_nan_counts_as_the_worst_not_as_missing():
    kl = SIGNALS["KL_SPIKE"]
    assert reduce_series([0.3, float("nan"), 0.0], kl.reduce, kl.worst()) == math.inf
    assert reduce_series([None, 0.02], kl.reduce, kl.worst()) == 0.02          # None: not measured
    assert reduce_series([float("nan"), 12.0], RETURN.reduce, RETURN.worst()) == 12.0   # no episode: not measured
    c = compare(kl, [0.3, 0.1, 0.2], [math.inf] * 3)
    v = judge(kl, c, [])
    assert v.verdict == HARMFUL and "counted as the worst" in v.why


def test_held_needs_the_band_and_no_harm_elsewhere():
    kl = SIGNALS["KL_SPIKE"]   # lower is better, ending <= 0.05
    base = [0.5, 0.6, 0.7]
    assert judge(kl, compare(kl, base, [0.01, 0.02, 0.03]), []).verdict == HELD
    out_of_band = judge(kl, compare(kl, base, [0.1, 0.2, 0.3]), [])
    assert out_of_band.verdict == NOT_HELD and "outside its band" in out_of_band.why
    assert judge(kl, compare(kl, base, [0.8, 0.6, 0.9]), []).verdict == NOT_HELD   # no move the advised way
    assert judge(kl, compare(kl, base, [0.01, 0.8, 0.02]), []).verdict == INCONCLUSIVE
    fell = compare(RETURN, [20, 21, 22], [9, 9.5, 10])
    harmed = judge(kl, compare(kl, base, [0.01, 0.02, 0.03]), [fell])
    assert harmed.verdict == HARMFUL and harmed.why.startswith("the return fell")


# -- the plan ----------------------------------------------------------------------------
def test_set_groups_parse_into_config_calls():
    assert parse_set("lr=0.001 entropy_coeff=0.01") == (change("lr", 0.001), change("entropy_coeff", 0.01))
    (c,) = parse_set("rl_module.model_config={'fcnet_hiddens':[64,64]}")
    assert (c.method, c.name, c.value) == ("rl_module", "model_config", {"fcnet_hiddens": [64, 64]})
    for bad in ("lr", "=1", "1x=2", "a-b.lr=1", "debugging.seed=3"):
        with pytest.raises(Flow1InputError):
            parse_set(bad)


def test_an_advised_knob_becomes_a_change():
    assert change_from_knob({"knob": "lr", "value": 0.0097, "line": "config.training(lr=0.0097)"}) == \
        change("lr", 0.0097, "training")
    c = change_from_knob({"knob": "model_config", "value": "DefaultModelConfig(fcnet_hiddens=[512, 512])",
                          "line": "config.rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[512, 512]))"})
    assert c == change("model_config", {"fcnet_hiddens": [512, 512]}, "rl_module")
    assert change_from_knob({"knob": "model_config", "value": "DefaultModelConfig(__import__('os'))",
                             "line": "config.rl_module(...)"}) is None


def test_one_branch_per_distinct_first_knob_judged_for_every_finding_that_names_it():
    lr = {"knob": "lr", "value": 0.0097, "line": "config.training(lr=0.0097)"}
    ent = {"knob": "entropy_coeff", "value": 0.01, "line": "config.training(entropy_coeff=0.01)"}
    advice = [Advice("KL_SPIKE", "p", "FAIL", (lr,)),
              Advice("ENTROPY_COLLAPSE", "p", "FAIL", (ent, {**lr, "value": 0.005})),
              Advice("CLIP_FRACTION", "p", "WARN", (lr,))]
    branches = plan(Source(Path("ck"), None, 1, advice), ["lr=0.5"], True)
    by = {b.name: b for b in branches}
    assert list(by) == ["baseline", "lr=0.5", "lr=0.0097", "entropy_coeff=0.01"]
    assert [a.code for a in by["lr=0.0097"].advice] == ["KL_SPIKE", "ENTROPY_COLLAPSE", "CLIP_FRACTION"]
    assert [a.code for a in by["lr=0.5"].advice] == ["KL_SPIKE", "ENTROPY_COLLAPSE", "CLIP_FRACTION"]
    assert [a.code for a in by["entropy_coeff=0.01"].advice] == ["ENTROPY_COLLAPSE"]
    with pytest.raises(Flow1InputError, match="no finding with advised knobs"):
        plan(Source(Path("ck"), None, 1, []), [], True)
    with pytest.raises(Flow1InputError, match="nothing to branch"):
        plan(Source(Path("ck"), None, 1, advice), [], False)


def test_finding_picks_the_advice_branched_on_and_each_branch_is_still_judged_on_all():
    lr = {"knob": "lr", "value": 0.0097, "line": "config.training(lr=0.0097)"}
    ent = {"knob": "entropy_coeff", "value": 0.01, "line": "config.training(entropy_coeff=0.01)"}
    advice = [Advice("KL_SPIKE", "p", "FAIL", (lr,)),
              Advice("ENTROPY_COLLAPSE", "p", "FAIL", (ent, {**lr, "value": 0.005}))]
    by = {b.name: b for b in plan(Source(Path("ck"), None, 1, advice), [], True, findings=["KL_SPIKE"])}
    assert list(by) == ["baseline", "lr=0.0097"]
    assert [a.code for a in by["lr=0.0097"].advice] == ["KL_SPIKE", "ENTROPY_COLLAPSE"]
    by = {b.name: b for b in plan(Source(Path("ck"), None, 1, advice), [], True, findings=["ENTROPY_COLLAPSE"])}
    assert list(by) == ["baseline", "entropy_coeff=0.01"]
    with pytest.raises(Flow1InputError, match=r"--finding VALUE_LOSS_EXPLODES: expected a finding that advised "
                                              r"knobs in this run \(ENTROPY_COLLAPSE, KL_SPIKE\)"):
        plan(Source(Path("ck"), None, 1, advice), [], True, findings=["VALUE_LOSS_EXPLODES"])
    with pytest.raises(Flow1InputError, match="give --from-advice with it"):
        plan(Source(Path("ck"), None, 1, advice), ["lr=0.5"], False, findings=["KL_SPIKE"])


# -- bad input: one line, exit 2 ---------------------------------------------------------
def _whatif(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flow1_ray", "whatif", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("make, args, says", [
    (lambda d: d / "nope", [], "not found"),
    (lambda d: d, [], "neither a checkpoint"),
    (lambda d: (d / "events").mkdir() or d, ["--from-advice"], "has no checkpoint to branch from"),
    (lambda d: d, ["--seeds", "0"], "--seeds must be in 1..100, got 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, cli_env, make, args, says):
    p = _whatif([str(make(tmp_path)), *args], cli_env)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


# -- the real thing ----------------------------------------------------------------------


def test_the_report_shows_a_whatifs_verdicts_and_curves_and_names_a_damaged_one(tmp_path):
    """A run directory's whatif/ read back as untrusted input: a good one's table and picture
    in the HTML page and the Markdown, a verdicts.json that is not JSON named among the
    skipped items, nothing raised."""
    import pyarrow as pa

    from flow1_ray.report.html import render_html
    from flow1_ray.report.rundir import load_run_report

    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    good = run / "whatif" / "20261202T000001Z"
    good.mkdir(parents=True)
    verdicts = [{"branch": "lr=0.0097", "finding": "KL_SPIKE", "module_id": "default_policy", "verdict": HELD,
                 "why": "KL 0.362 -> 0.026 <script>", "readback": [
                     {"knob": "lr", "asked": 0.0097, "after_restore": 0.05,
                      "status": "overwritten by the restore, re-applied"}]}]
    (good / "verdicts.json").write_text(json.dumps({"checkpoint": "ck", "iteration": 1, "seeds": 2, "iterations": 2,
                                                    "verdicts": verdicts, "runs": []}))
    rows = [{"branch": b, "seed": s, "iteration": i, "module_id": "default_policy", "episode_return_mean": 10.0 + i,
             "mean_kl_loss": kl, "entropy_ratio": 0.5} for b, kl in (("baseline", 0.4), ("lr=0.0097", 0.02))
            for s in range(2) for i in (1, 2)]
    pq.write_table(pa.Table.from_pylist(rows), good / "curves.parquet")
    bad = run / "whatif" / "20261202T000002Z"
    bad.mkdir()
    (bad / "verdicts.json").write_text("{not json")
    report = load_run_report(run)
    (w,) = report.summary["whatif"]
    assert w["id"] == good.name and w["verdicts"][0]["readback"] == [
        "lr: asked 0.0097, after the restore 0.05 (overwritten by the restore, re-applied)"]
    assert any("20261202T000002Z/verdicts.json: not JSON" in s for s in report.skipped)
    page = render_html(report, run)
    assert 'id="whatif-1"' in page and "KL 0.362 -&gt; 0.026 &lt;script&gt;" in page and "<script>" not in page
    assert 'alt="what-if 20261202T000001Z curves" src="data:image/png;base64,' in page
    assert "## What-if 20261202T000001Z" in report.to_markdown()


