"""`flow1 report --format html|md|json`: one self-contained page from the run directory
alone -- verdict, findings with evidence and advice, worker timeline, curves, heatmaps --
that loads nothing from the network and shows every string from the run as text."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np

from browser import assert_no_alert, assert_not_blank, chrome, needs_browser, requested_urls, screenshot
from flow1_ray.common import codes as C
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.common.events import Event
from flow1_ray.report.html import render_html
from flow1_ray.report.model import NOT_JUDGED
from flow1_ray.report.rundir import load_run_report
from flow1_ray.rundir.store import HEATMAPS_DIR

EVIL = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _run_dir(tmp_path, stop: bool = True):
    """A run as the Recorder writes it (run.json at once, stop.json at a clean close)."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    events = [
        Event(C.ENV_CRASHED, f"env.step raised ValueError: {EVIL}", {"frame": EVIL}, worker_index=1, pid=11,
              ts=t0 + timedelta(seconds=3)),
        Event(C.WORKER_DIED, "train worker 1 (pid 11) died", {"exit_signal": "SIGKILL"}, worker_index=1, pid=11,
              ts=t0 + timedelta(seconds=4)),
        Event(C.WORKER_RESTARTED, "took over", {}, worker_index=1, pid=12, ts=t0 + timedelta(seconds=9)),
        Event(C.ENTROPY_COLLAPSE, "entropy collapsed", {"knobs": [
            {"knob": "entropy_coeff", "current": 0.0, "value": 0.01, "why": "bonus",
             "line": "config.training(entropy_coeff=0.01)"}]}, iteration=3, ts=t0 + timedelta(seconds=10)),
    ]
    rec = RecorderCore(str(tmp_path), "run-1", flush_interval_s=3600)
    rec.add_events(events)
    for i in range(1, 9):   # 8 iterations with a return: long enough to judge learning (REWARD_DROP)
        rec.add_metrics({"iteration": i, "env_steps": 1000 * i, "episode_return_mean": 20.0 + i,
                         "flow1/learner/return_ema": 20.0 + i / 2, "flow1/worker/alive": 2})
    rec.flush()
    if stop:
        rec.close()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (tmp_path / HEATMAPS_DIR).mkdir()
    plt.imsave(tmp_path / HEATMAPS_DIR / "iter_000008.png", np.random.default_rng(0).random((8, 8)))
    return tmp_path


def test_the_page_is_self_contained_and_shows_run_strings_as_text(tmp_path):
    d = _run_dir(tmp_path)
    page = render_html(load_run_report(d), d)
    assert "<script" not in page.lower() and "onerror=\"alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=" in page
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page), "nothing from the network"
    assert page.count("data:image/png;base64,") == 3   # timeline, curves, the heatmap
    assert 'class="verdict FAIL" id="verdict">FAIL<' in page and "config.training(entropy_coeff=0.01)" in page
    assert 'id="timeline"' in page and 'id="curves"' in page
    assert "stopped cleanly after iteration 8" in page and 'id="gaps"' not in page


def test_the_page_says_what_flow1_did_not_see(tmp_path):
    """No clean stop and a stale heartbeat: the run ended early, and the page says so; no
    start record: NOT JUDGED, never a PASS."""
    d = _run_dir(tmp_path, stop=False)
    page = render_html(load_run_report(d, now=time.time() + 86400), d)
    assert 'class="verdict FAIL" id="verdict">FAIL<' in page
    (gap,) = re.findall(r'<ul id="gaps"><li>(.*?)</li></ul>', page)
    assert gap.startswith("ended without a clean stop after iteration 8, last data at ")
    clean = tmp_path / "clean"
    rec = RecorderCore(str(clean), "run-2", flush_interval_s=3600)
    rec.add_metrics({"iteration": 1, "env_steps": 10, "episode_return_mean": 1.0})
    rec.close()
    report = load_run_report(clean, now=time.time())   # one iteration: learning cannot be judged
    assert report.verdict == "PASS, but learning not judged: not enough data (1 iteration)", report.verdict
    assert report.exit_code() == 2 and report.exit_code(allow_short=True) == 0
    assert report.gaps()[0].startswith("not enough data to judge learning: 1 iteration, episodes not counted")
    (clean / "run.json").unlink()
    report = load_run_report(clean)
    assert report.verdict == NOT_JUDGED and report.exit_code() == 2
    page = render_html(report, clean)
    assert 'class="verdict NOT_JUDGED" id="verdict">NOT JUDGED<' in page
    assert "no start record (run.json missing)" in page


def test_each_code_links_to_what_it_means_on_the_page_and_names_its_docs_entry(tmp_path):
    """A finding's code is a link to the page's own entry for it (a relative link: the page
    opens from disk), which holds the rule's trigger and names the code's entry in the docs;
    no in-page link dangles, and every entry named exists on the docs page."""
    from pathlib import Path

    from flow1_ray.checks.catalogue import rules

    d = _run_dir(tmp_path)
    page = render_html(load_run_report(d), d)
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    links = re.findall(r'href="#([^"]+)"', page)
    assert links and not [x for x in links if x not in ids], "every in-page link has its target"
    docs = (Path(__file__).resolve().parents[2] / "docs" / C.REFERENCE_PAGE).read_text()
    assert page.count("<dt id=") == 4, "one entry per code, however often it was raised"
    for code in (C.ENV_CRASHED, C.WORKER_DIED, C.WORKER_RESTARTED, C.ENTROPY_COLLAPSE):
        assert f'<a href="#code-{code.lower()}">{code}</a>' in page
        (entry,) = re.findall(rf'<dt id="code-{code.lower()}">(.*?)</dd>', page, re.S)
        trigger = re.sub(r"\s+", " ", str(rules()[code].text()))
        assert trigger.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;") in entry
        assert f"<code>reference/codes.md#{code.lower()}</code>" in entry
        assert f"{{ #{code.lower()} }}" in docs
    md = load_run_report(d).to_markdown()
    assert "`reference/codes.md#env_crashed`" in md and "`reference/codes.md#entropy_collapse`" in md


def test_flow1_report_writes_each_format_and_gates_on_its_fail_on(tmp_path, cli_env):
    d = _run_dir(tmp_path / "run")

    def report(*args):
        return subprocess.run([sys.executable, "-m", "flow1_ray", "report", str(d), *args], capture_output=True,
                              text=True, env=cli_env, timeout=120)

    html = report("--format", "html")
    assert html.returncode == 1 and (d / "report.html").read_text().startswith("<!doctype html>")
    assert report("--format", "md", "--out", str(tmp_path / "r.md")).returncode == 1
    assert (tmp_path / "r.md").read_text().startswith("# flow1 report")
    js = report("--format", "json", "--out", "-")
    assert js.returncode == 1 and '"status": "FAIL"' in js.stdout and '"verdict": "FAIL"' in js.stdout
    bad = subprocess.run([sys.executable, "-m", "flow1_ray", "report", str(tmp_path / "nope"), "--format", "html"],
                         capture_output=True, text=True, env=cli_env, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_sample_ci_job_runs_the_commands_that_exist():
    import yaml
    from pathlib import Path

    job = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "github-actions-flow1.yml").read_text())
    runs = [s["run"] for j in job["jobs"].values() for s in j["steps"] if "run" in s]
    assert any(r.startswith("flow1 check --env") for r in runs)
    assert any(r.startswith("flow1 report") and "--fail-on WARN" in r and "--format html" in r for r in runs)
    from flow1_ray.cli.parser import parser

    for r in runs:   # every flow1 command line of the job parses with today's CLI
        if r.startswith("flow1 "):
            import re

            parser().parse_args(re.sub(r"\S*\$\([^)]*\)\S*", "runs/x", r).split()[1:])


@needs_browser
def test_the_page_in_chromium_shows_the_run_strings_and_runs_nothing(tmp_path):
    d = _run_dir(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(render_html(load_run_report(d), d))
    driver = chrome()
    try:
        driver.get(page.as_uri())
        assert_no_alert(driver)
        body = driver.find_element("tag name", "body").text
        assert f"env.step raised ValueError: {EVIL}" in body
        assert not driver.find_elements("css selector", "img[src='x'], script")
        images = driver.find_elements("tag name", "img")
        assert images and all(driver.execute_script("return arguments[0].naturalWidth", i) > 0
                              for i in images), "every embedded image decodes"
        assert all(u.startswith(("file:", "data:")) for u in requested_urls(driver))
        assert_not_blank(screenshot(driver, "report-escaping", tmp_path))
    finally:
        driver.quit()


def _gradient_table(page: str) -> list[tuple[str, ...]]:
    """The rows of the page's "Gradients (last trace)" table: (module, layer, RMS, iteration)."""
    (table,) = re.findall(r"<h2>Gradients \(last trace\)</h2>\s*<table>(.*?)</table>", page, re.S)
    return [tuple(re.findall(r"<td>(.*?)</td>", row)) for row in re.findall(r"<tr>(<td>.*?)</tr>", table, re.S)]


def test_the_gradient_table_shows_the_last_trace_in_network_order(tmp_path):
    """Iteration 3 traced, 4 not (the Learner traces one update in grad_every: its rows hold
    no number): the table shows iteration 3, not 4's empty rows. The rows are written in the
    order RLlib's result gave (not the network's); layer_index puts them back. A run
    directory written before layer_index existed: layers by name, numbers as numbers."""
    network = ["encoder.net.mlp.0", "encoder.net.mlp.2", "encoder.net.mlp.10", "vf.0", "pi.0"]
    written = ["pi.0", "encoder.net.mlp.10", "vf.0", "encoder.net.mlp.0", "encoder.net.mlp.2"]

    def rows(it: int, traced: bool, indexed: bool) -> list[dict]:
        return [{"iteration": it, "module_id": mid, "kind": "grad", "layer": layer,
                 "grad_rms": (0.001 * (1 + network.index(layer)) + it * 1e-5) if traced else None,
                 **({"layer_index": network.index(layer)} if indexed else {})}
                for mid in ("p1", "p0") for layer in written]

    for name, indexed in (("new", True), ("old", False)):
        d = _run_dir(tmp_path / name)
        rec = RecorderCore(str(d), "run-1", flush_interval_s=3600)
        for it, traced in ((1, True), (2, False), (3, True), (4, False)):
            rec.add_learner_rows(rows(it, traced, indexed))
            rec.flush()
        rec.close()
        table = _gradient_table(render_html(load_run_report(d), d))
        assert {(m, i) for m, _, _, i in table} == {("p0", "3"), ("p1", "3")}, table
        assert [m for m, *_ in table] == ["p0"] * 5 + ["p1"] * 5 and all(rms != "None" for _, _, rms, _ in table)
        want = network if indexed else sorted(network[:3], key=network.index) + ["pi.0", "vf.0"]
        assert [layer for _, layer, _, _ in table[:5]] == want, (name, table)
        assert table[0][2] == "0.00103"   # 3 significant digits


def test_a_learner_rules_signal_is_drawn_by_the_report_and_the_panel_from_its_view(tmp_path):
    """VALUE_NOT_LEARNING declares View("learner", ("vf_explained_var",), ...): the HTML report
    and the panel draw that column (titled with the rule's code) with no edit of theirs, and
    the EMA's legend says the alpha the run used."""
    from flow1_ray.report.follow import RunFollower
    from flow1_ray.report.panel_figures import policy_figure, return_figure
    from flow1_ray.report.views import ema_label, rule_signals

    assert ("vf_explained_var", "value function explained variance", [C.VALUE_NOT_LEARNING]) in rule_signals()
    d = tmp_path / "run"
    rec = RecorderCore(str(d), "run-1", 3600, {"flush_interval_s": 3600, "thresholds": {"return_ema_alpha": 0.95}})
    rec.add_metrics({"iteration": 1, "episode_return_mean": 20.0, "flow1/learner/return_ema": 20.0})
    rec.add_learner_rows([{"iteration": it, "module_id": "default_policy", "kind": "module", "entropy_ratio": 0.9,
                           "mean_kl_loss": 0.01, "vf_explained_var": -0.5 + 0.1 * it} for it in (1, 2, 3)])
    rec.flush()
    rec.close()
    page = render_html(load_run_report(d), d)
    assert 'id="signals"' in page and "the learner rules' signals" in page
    assert ema_label(d) == "EMA (alpha 0.95 per episode)"
    f = RunFollower(d)
    f.poll(force=True)
    titles = [a.text.replace("<br>", " ") for a in policy_figure(f).layout.annotations]
    assert any("value function explained variance (VALUE_NOT_LEARNING)" in t for t in titles), titles
    assert [t.name for t in return_figure(f).data][-1] == "EMA (alpha 0.95 per episode)"


def test_an_off_policy_runs_q_values_and_temperature_are_drawn_and_a_ppo_run_gets_no_empty_q_chart(tmp_path):
    """Q_DIVERGENCE's View names three columns: one chart each, titled with the column; SAC's
    alpha gets its own; a run without them (PPO) shows none of those charts."""
    from flow1_ray.report.follow import RunFollower
    from flow1_ray.report.panel_figures import policy_figure

    def titles(rows, name):
        d = tmp_path / name
        rec = RecorderCore(str(d), name, 3600, {"flush_interval_s": 3600})
        rec.add_metrics({"iteration": 1, "episode_return_mean": -900.0})
        rec.add_learner_rows([{"iteration": it, "module_id": "default_policy", "kind": "module", **row(it)}
                              for it in (1, 2, 3) for row in [rows]])
        rec.flush()
        rec.close()
        assert 'id="signals"' in render_html(load_run_report(d), d) or name == "ppo"
        f = RunFollower(d)
        f.poll(force=True)
        return [a.text.replace("<br>", " ") for a in policy_figure(f).layout.annotations]

    sac = titles(lambda it: {"qf_mean": -5.0 * it, "qf_max": -1.0, "qf_min": -6.0 * it, "alpha_value": 0.9 ** it},
                 "sac")
    for col in ("qf_mean", "qf_max", "qf_min"):
        assert f"Q values: {col} (Q_DIVERGENCE)" in sac, sac
    assert "SAC temperature alpha (ALPHA_COLLAPSE, ALPHA_EXPLODING)" in sac
    ppo = titles(lambda it: {"entropy_ratio": 0.9, "mean_kl_loss": 0.01}, "ppo")
    assert not [t for t in ppo if "Q values" in t or "alpha" in t], ppo


def test_the_evaluation_return_is_drawn_beside_the_training_return_where_a_run_evaluated(tmp_path):
    """RLlib's evaluation runners' return (metrics column evaluation_return_mean, TRAIN_EVAL_GAP's
    signal) is a second curve of the return chart in the panel and the page; a run that never
    evaluated has none."""
    from flow1_ray.report.follow import RunFollower
    from flow1_ray.report.panel_figures import return_figure
    from flow1_ray.common.schema import EVAL_RETURN

    def names(rows, name):
        d = tmp_path / name
        rec = RecorderCore(str(d), name, 3600, {"flush_interval_s": 3600})
        for row in rows:
            rec.add_metrics(row)
        rec.flush()
        rec.close()
        assert 'id="curves"' in render_html(load_run_report(d), d)
        f = RunFollower(d)
        f.poll(force=True)
        return {t.name: list(t.y) for t in return_figure(f).data}

    got = names([{"iteration": it, "episode_return_mean": 100.0 + it, **({EVAL_RETURN: 20.0} if it % 2 else {})}
                 for it in (1, 2, 3, 4)], "evaluated")
    assert got["evaluation return"] == [20.0, 20.0]
    assert "evaluation return" not in names([{"iteration": 1, "episode_return_mean": 5.0}], "not-evaluated")


def test_a_finding_that_led_to_a_death_says_so_in_the_page_and_the_markdown(tmp_path):
    """A death that names a finding of its process as its likely origin is listed under that
    finding (the report reads the death's ``likely_origin``: the same process, code and time)."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    nan = Event(C.OBS_NAN_INF, "train worker 1: obs has NaN/inf", {}, worker_index=1, pid=11,
                ts=t0 + timedelta(seconds=2))
    other = Event(C.OBS_NAN_INF, "train worker 2: obs has NaN/inf", {}, worker_index=2, pid=12,
                  ts=t0 + timedelta(seconds=2))
    died = Event(C.WORKER_DIED, "train worker 1 (pid 11) died: interpreter exit; the action sampling raised", {
        "likely_origin": {"code": C.OBS_NAN_INF, "status": C.FAIL, "ts": nan.ts.timestamp(), "age_s": 3.0}},
        worker_index=1, pid=11, ts=t0 + timedelta(seconds=5))
    rec = RecorderCore(str(tmp_path), "run-1", flush_interval_s=3600)
    rec.add_events([nan.to_dict(), other.to_dict(), died.to_dict()])
    rec.flush()
    rec.close()
    report = load_run_report(tmp_path)
    page = render_html(report, tmp_path)
    assert page.count('class="led-to"') == 1, "under the origin only, not the same code of another process"
    assert "led to: WORKER_DIED 3.0 s later: train worker 1 (pid 11) died: interpreter exit</p>" in page
    assert "obs has NaN/inf (led to: WORKER_DIED 3.0 s later: train worker 1 (pid 11) died" in report.to_markdown()
