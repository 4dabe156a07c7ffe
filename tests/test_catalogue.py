"""A finding is declared once: the rule files' RULES make the catalogue, and everything that
lists codes or thresholds (common/codes.py, Thresholds, configs/thresholds.json, the docs' table of codes)
is generated from them and checked here."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from flow1_ray import Event
from flow1_ray.common import codes as C
from flow1_ray.checks import catalogue as cat
from flow1_ray.checks.findings import Finding
from flow1_ray.checks.rule import Rule
from flow1_ray.checks.thresholds import DEFAULT, Thresholds

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_files_are_current():
    assert cat.stale() == {}, "run python -m flow1_ray.checks.catalogue --write"


def test_codes_py_declares_no_code_by_hand():
    """Outside its generated block, common/codes.py holds statuses and modules only."""
    text = (ROOT / "flow1_ray/common/codes.py").read_text()
    outside = re.sub(r"# --- codes: begin.*?# --- codes: end", "", text, flags=re.S)
    names = {t.id for node in ast.parse(outside).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    assert names & set(cat.rules()) == set()
    for code in cat.rules():
        assert getattr(C, code) == code


def test_every_rule_has_a_module_a_status_and_a_trigger_that_renders():
    for code, r in cat.rules().items():
        assert r.status in C.STATUSES and (r.module in C.MODULES or code == C.CHECKS_PASSED), code
        text = r.text()
        assert text and "{" not in text and "}" not in text, (code, text)
        if r.thresholds is None:
            assert not re.search(r"\{[a-z_]+[:}]", r.trigger), f"{code}: a placeholder without a thresholds family"
        else:
            names = {f.name for f in dataclasses.fields(r.thresholds)}
            used = set(re.findall(r"\{([a-z_0-9]+)", r.trigger))
            assert used and used <= names | {p for p in dir(r.thresholds) if not p.startswith("_")}, (code, used)


def test_a_trigger_says_the_thresholds_it_is_judged_with():
    """The docs' text and a run's own text come from the same numbers."""
    kl = cat.rule(C.KL_TOO_LOW)
    assert "median KL < 0.005 over 5 iterations" in kl.text()
    th = DEFAULT.with_overrides({"kl_low": 0.002, "kl_window": 7})
    assert "median KL < 0.002 over 7 iterations" in kl.text(th)
    assert "KL < 0.0002 for 5 iterations" in cat.rule(C.POLICY_LOSS_STUCK).text(th)   # a derived value


def test_thresholds_are_the_families_fields_with_the_families_defaults():
    fams = cat.families()
    want = {f.name: f.default for fam in fams for f in dataclasses.fields(fam)}
    assert {f.name: f.default for f in dataclasses.fields(Thresholds)} == want
    assert sum(len(dataclasses.fields(f)) for f in fams) == len(want), "a threshold in two families"
    data = json.loads((ROOT / "configs/thresholds.json").read_text())
    assert {k: v for k, v in data.items() if not k.startswith("_")} == want
    for fam in fams:   # a whole Thresholds gives each family its values
        assert DEFAULT.family(fam) == fam()


def test_a_retired_threshold_still_loads_with_a_warning():
    with pytest.warns(UserWarning, match="squash_grad_min.*GRADIENT_VANISHING_RISK was retired"):
        th = Thresholds().with_overrides({"squash_grad_min": 1e-3, "kl_low": 0.001})
    assert th.kl_low == 0.001


def test_the_reference_table_lists_every_code_once_with_its_rendered_trigger():
    page = (ROOT / "docs/reference/codes.md").read_text()
    block = page.split("<!-- codes: begin -->")[1].split("<!-- codes: end -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| code")]
    assert [row.split(" | ")[0][2:] for row in rows] == list(cat.rules())
    assert "entropy / max entropy < 20% on 2 iterations (FAIL < 5%)" in block


def test_a_code_no_rule_declares_is_refused_by_findings_and_events():
    with pytest.raises(ValueError, match="declare it in a rule file"):
        Finding("NOT_A_CODE", "x", {})
    with pytest.raises(ValueError, match="declare it in a rule file"):
        Event("NOT_A_CODE", "x")
    f = Finding(C.KL_SPIKE, "x", {})
    assert (f.status, f.module) == (C.FAIL, C.TRAIN_CURVES)


def test_a_code_declared_twice_is_an_error(monkeypatch):
    import sys
    import types

    mod = types.ModuleType("flow1_ray_dup_rules")
    mod.RULES = (Rule(C.KL_SPIKE, C.TRAIN_CURVES, C.FAIL, "again"),)
    monkeypatch.setitem(sys.modules, "flow1_ray_dup_rules", mod)
    monkeypatch.setattr(cat, "RULE_MODULES", cat.RULE_MODULES + ("flow1_ray_dup_rules",))
    cat._load.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="KL_SPIKE is declared twice"):
            cat.rules()
    finally:
        monkeypatch.undo()
        cat._load.cache_clear()
    assert C.KL_SPIKE in cat.rules()


def test_the_rule_files_import_without_ray():
    import subprocess
    import sys

    code = ("import sys; from flow1_ray.checks import catalogue as c; c.rules(); "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
