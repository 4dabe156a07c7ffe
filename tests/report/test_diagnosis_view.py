"""The diagnosis shown first: the console's lines, report.md's section, the HTML page's section
and diagnosis.json beside report.json, from the sick PPO run's findings (tests/diagnosis)."""

from __future__ import annotations

import json
import re

from flow1_ray.common import codes as C
from flow1_ray.report.diagnosis_view import console_lines
from flow1_ray.report.html import render_html
from flow1_ray.report.model import Report

from sick_findings import JUDGED, PPO, sick_ppo


def _report() -> Report:
    return Report(target="sick", events=sick_ppo(), learning=JUDGED, settings=PPO, summary={"run_dir": "runs/sick"})


def test_the_console_shows_the_diagnosis_in_three_to_six_lines():
    lines = console_lines(_report().diagnosis())
    assert 3 <= len(lines) <= 6, lines
    assert lines[0].startswith("diagnosis: KL_SPIKE (FAIL) at iteration 1, module default_policy: ")
    assert re.search(r"most likely cause: the policy's update step is too large .* -- supported by 2 or more "
                     r"independent signals \(KL, clip fraction, entropy, lr, num_epochs\)", lines[1]), lines[1]
    assert re.fullmatch(r"  change: config\.training\(lr=0\.05\)  ->  config\.training\(lr=0\.00\d+\)", lines[2])
    assert "untested: run `flow1 whatif runs/sick --from-advice`" in lines[3]
    assert lines[4] == ("  follows from it: ENTROPY_COLLAPSE, GRADIENT_ZERO, CLIP_FRACTION, KL_TOO_HIGH, "
                        "VALUE_NOT_LEARNING")


def test_report_md_puts_the_diagnosis_above_the_findings_and_marks_what_follows(tmp_path):
    rep = _report()
    text = rep.to_markdown()
    assert text.index("## Diagnosis") < text.index("## Findings")
    assert "**Primary symptom: KL\\_SPIKE (FAIL) at iteration 1, module default\\_policy**" in text \
        or "**Primary symptom: KL_SPIKE (FAIL) at iteration 1, module default_policy**" in text
    assert "```python\n# before: config.training(lr=0.05)\nconfig.training(lr=0.00" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "| VALUE_NOT_LEARNING |" in ln]
    assert rows and rows[0].endswith("(follows from KL_SPIKE: see the diagnosis) |"), rows
    rep.write_summary(tmp_path)
    doc = json.loads((tmp_path / "diagnosis.json").read_text())
    assert doc == json.loads((tmp_path / "report.json").read_text())["diagnosis"]
    assert doc["primary"]["code"] == C.KL_SPIKE and doc["causes"][0]["change"]["knob"] == "lr"


def test_the_html_page_shows_the_diagnosis_first():
    page = render_html(_report())
    assert page.index('id="diagnosis"') < page.index("<h2>Findings</h2>")
    assert re.search(r'<pre id="change"># before: config.training\(lr=0.05\)\nconfig.training\(lr=0.00\d+\)</pre>',
                     page)
    assert '<ul id="chain">' in page and 'id="causes"' in page


def test_a_healthy_run_says_so_in_one_line_and_a_short_one_once():
    assert console_lines(Report(target="ok", learning=JUDGED).diagnosis()) == [
        "diagnosis: no symptom: every check that had its data passed"]
    short = {"enough": False, "judged": [], "short": {}, "line": "not enough data to judge learning: 2 iterations"}
    rep = Report(target="s", learning=short)
    assert rep.diagnosis()["line"] == "not enough data to judge learning: 2 iterations"
    assert console_lines(rep.diagnosis()) == [] and rep.gaps() == [rep.short]   # said once, as a gap
