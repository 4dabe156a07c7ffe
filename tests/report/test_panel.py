"""`flow1 serve`: the live four-quadrant panel (result, cause, hypothesis, risk), in a real
headless Chromium, following a run directory as the Recorder writes it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from browser import Served, assert_no_alert, assert_not_blank, chrome, needs_browser, requested_urls, screenshot, \
    text, wait_for
from flow1_ray.common import codes as C
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.common.events import Event
from flow1_ray.report.follow import RunFollower, find_runs
from flow1_ray.common.errors import Flow1InputError

EVIL = '<script>alert("run")</script><img src=x onerror="alert(2)">'


def _recorder(run_dir, iterations: int = 3) -> RecorderCore:
    """A run as the Recorder writes it: a crash, a curve finding with its knobs, metrics rows."""
    rec = RecorderCore(str(run_dir), "run-1", flush_interval_s=3600)
    rec.add_events([Event(C.ENV_CRASHED, "train worker 1 (pid 11): step() raised ValueError: boom",
                          {"frame": "step (my_env.py:42)", "error": "ValueError: boom"}, worker_index=1, pid=11),
                    Event(C.KL_SPIKE, "KL 0.40 at iteration 1, 40x kl_target", {"knobs": [
                        {"knob": "lr", "current": 0.05, "value": 0.0097, "why": "KL 40x its target",
                         "line": "config.training(lr=0.0097)"}]}, iteration=1)])
    for i in range(1, iterations + 1):
        rec.add_metrics({"iteration": i, "env_steps": 1000 * i, "episode_return_mean": 20.0 + 0.75 * i,
                         "flow1/learner/return_ema": 20.0 + 0.5 * i, "flow1/worker/alive": 2,
                         "flow1/worker/dead": 0, "flow1/worker/stalled": 0, "flow1/worker/restarts": 1,
                         "flow1/samples_dropped": 0, "flow1/memory/node_percent": 41.0,
                         "flow1/memory/runners_rss_mb": 612.5})
    rec.flush()
    return rec


def test_the_follower_reads_only_new_parts_and_finds_runs(tmp_path):
    rec = _recorder(tmp_path / "runs" / "20260101-000000-aaaaaa")
    f = RunFollower(tmp_path / "runs" / "20260101-000000-aaaaaa")
    assert f.poll() and f.stamps == {"events": 1, "metrics": 1}
    assert f.counts[C.FAIL] == 2 and f.last_metrics()["iteration"] == 3
    assert not f.poll() and f.stamps == {"events": 1, "metrics": 1}   # at once: throttled, nothing read
    assert not f.poll(force=True) and f.stamps == {"events": 1, "metrics": 1}   # nothing new: nothing reread
    rec.add_events([Event(C.WORKER_STALLED, "stalled", {}, worker_index=2)])
    rec.flush()
    assert f.poll(force=True) and f.code_counts[C.WORKER_STALLED] == 1 and f.counts[C.FAIL] == 3
    assert f.stamps == {"events": 2, "metrics": 1} and len(f.timeline) == 2
    # as flow1 report reads it: 3 iterations are too few to judge learning, and the run still runs
    gaps = f.report().gaps()
    assert f.report().verdict == C.FAIL and gaps[0].startswith("not enough data to judge learning: 3 iterations")
    assert gaps[1].startswith("still running (iteration 3")
    rec.close()
    f.poll(force=True)   # now, not after the throttle
    assert f.report().gaps() == gaps[:1] and f.report().completeness["state"] == "stopped"
    RecorderCore(str(tmp_path / "runs" / "20260102-000000-bbbbbb"), "run-2")   # a run that just started
    assert [r.name for r in find_runs(tmp_path / "runs")] == ["20260102-000000-bbbbbb", "20260101-000000-aaaaaa"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(Flow1InputError, match="not a flow1 run directory"):
        find_runs(tmp_path / "other")


def _serve_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "flow1_ray", "serve", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_serve_gives_one_line_and_exit_2_for_a_path_that_is_not_a_run_or_a_port_in_use(tmp_path):
    for path in (tmp_path / "missing", tmp_path):
        r = _serve_cli(path, "--port", "0")
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("flow1: error: ") and "Traceback" not in r.stderr
    _recorder(tmp_path / "run")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        r = _serve_cli(tmp_path / "run", "--port", busy.getsockname()[1])
    assert r.returncode == 2 and "the port is in use" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@needs_browser
def _whatif(run, branch: str) -> None:
    """A finished what-if as flow1 whatif writes it: verdicts.json, curves.parquet."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    d = run / "whatif" / "20260101T000001Z"
    d.mkdir(parents=True)
    rows = [{"branch": b, "seed": s, "iteration": i, "module_id": "default_policy", "episode_return_mean": 10.0 + i,
             "mean_kl_loss": kl} for b, kl in (("baseline", 0.4), (branch, 0.02)) for s in range(2) for i in (1, 2)]
    pq.write_table(pa.Table.from_pylist(rows), d / "curves.parquet")
    (d / "verdicts.json").write_text(json.dumps({"checkpoint": "ck", "seeds": 2, "iterations": 2, "verdicts": [
        {"branch": branch, "finding": "KL_SPIKE", "verdict": "held", "why": "KL 0.4 -> 0.02", "readback": [
            {"knob": "lr", "asked": 0.0097, "after_restore": 0.05, "status": "overwritten by the restore, re-applied"}]}]}))


def test_the_panel_shows_four_quadrants_and_a_new_event_within_3_s(tmp_path, cli_env):
    run = tmp_path / "20260101-000000-aaaaaa"
    rec = _recorder(run)
    with Served(run, env=cli_env) as served:
        d = chrome()
        try:
            d.get(served.url)
            shown = wait_for(lambda: text(d, "n-iteration") == "3", 20)
            assert shown, "the panel shows the run's last iteration"
            quadrants = {q: d.find_element("id", q) for q in ("q-result", "q-cause", "q-hypothesis", "q-risk")}
            boxes = {q: el.rect for q, el in quadrants.items()}
            # the order a person reasons in: result | cause over hypothesis | risk
            assert boxes["q-result"]["x"] < boxes["q-cause"]["x"] and boxes["q-result"]["y"] < boxes["q-hypothesis"]["y"]
            assert boxes["q-hypothesis"]["x"] < boxes["q-risk"]["x"] and boxes["q-cause"]["y"] < boxes["q-risk"]["y"]
            assert text(d, "n-return") == "22.25" and text(d, "n-env-steps") == "3,000"
            assert text(d, "verdict") == "FAIL"
            # the run is being written (a fresh heartbeat, no stop record): the result quadrant says so
            assert "still running (iteration 3" in text(d, "gaps")
            assert text(d, "result-verdict") == "FAIL"
            assert "ENV_CRASHED" in text(d, "q-cause") and "KL_SPIKE" in text(d, "q-cause")
            # each code says what it means on hover, and names its entry in the docs under its evidence
            from flow1_ray.checks.catalogue import rules

            kl = d.find_element("xpath", "//*[@id='q-cause']//b[text()='KL_SPIKE']")
            assert kl.get_attribute("title") == rules()[C.KL_SPIKE].text()
            cause = d.find_element("id", "q-cause").get_attribute("textContent")
            assert "reference/codes.md#kl_spike" in cause and "reference/codes.md#env_crashed" in cause
            hyp = text(d, "q-hypothesis")
            assert "config.training(lr=0.0097)" in hyp and "0.05 -> 0.0097" in hyp and "step (my_env.py:42)" in hyp
            risk = text(d, "q-risk")
            assert "2 alive" in risk and "node 41 % used" in risk and "EnvRunners 612 MB RSS" in risk
            assert d.find_elements("css selector", "#return-graph .main-svg"), "the return curve is drawn"
            assert all(u.startswith((served.url, "data:")) for u in requested_urls(d)), "nothing from the network"

            # the Recorder writes a new event; the panel shows it, as text, within 3 s
            rec.add_events([Event(C.WORKER_STALLED, f"train worker 2 hung in env.step {EVIL}",
                                  {"stack": EVIL}, worker_index=2, pid=12)])
            rec.flush()
            written = time.monotonic()
            seen = wait_for(lambda: "hung in env.step" in text(d, "q-cause"), 10)
            latency = time.monotonic() - written
            assert seen and latency < 3.0, f"shown after {latency:.2f} s"
            assert_no_alert(d)
            assert EVIL in text(d, "q-cause")
            assert not d.find_elements("css selector", "img[src='x']"), "the run's <img> became an element"

            # flow1 whatif finishes beside the run: its verdicts and curves join the hypothesis quadrant
            _whatif(run, f"lr=0.0097 {EVIL}")
            assert wait_for(lambda: "What-if 20260101T000001Z" in text(d, "q-hypothesis"), 10)
            assert "held" in text(d, "whatif-0") and f"lr=0.0097 {EVIL}" in text(d, "whatif-0")
            assert "read back: lr: asked 0.0097, after the restore 0.05" in text(d, "whatif-0")
            assert wait_for(lambda: d.find_elements("css selector", "#whatif-graph-0 .main-svg"), 10)
            assert_no_alert(d)
            assert_not_blank(screenshot(d, "panel", tmp_path))
        finally:
            d.quit()


@needs_browser
def test_the_panel_of_an_output_dir_lists_its_runs_newest_first(tmp_path, cli_env):
    _recorder(tmp_path / "20260101-000000-aaaaaa", iterations=2)
    _recorder(tmp_path / "20260102-000000-bbbbbb", iterations=5)
    with Served(tmp_path, env=cli_env) as served:
        d = chrome()
        try:
            d.get(served.url)
            assert wait_for(lambda: text(d, "n-iteration") == "5", 20), "the newest run first"
            d.find_element("css selector", "#run-picker").click()
            options = wait_for(lambda: [o.text for o in d.find_elements("css selector", "[role=option]")], 5)
            assert options == ["20260102-000000-bbbbbb", "20260101-000000-aaaaaa"]
            next(o for o in d.find_elements("css selector", "[role=option]") if o.text.endswith("aaaaaa")).click()
            assert wait_for(lambda: text(d, "n-iteration") == "2", 10), "the picked run is shown"
            assert_no_alert(d)
        finally:
            d.quit()


def test_the_panel_never_writes_into_the_run(tmp_path, cli_env):
    """Read-only: serving and polling a run leaves its files as they were."""
    run = tmp_path / "run"
    _recorder(run)
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    with Served(run, env=cli_env) as served:
        import urllib.request

        page = urllib.request.urlopen(served.url, timeout=5).read().decode()
        assert "flow1" in page and "//cdn" not in page and "https://" not in page
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before


#: the boxes of a Plotly graph's legend, its plot area and each x-axis title, in page pixels
_BOXES_JS = """
const g = document.getElementById(arguments[0]);
if (!g || !g.querySelector('.main-svg')) return {legend: null};
const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const legend = g.querySelector('g.legend');
return {legend: legend ? box(legend) : null, svg: box(g.querySelector('.main-svg')),
        plot: [...g.querySelectorAll('.cartesianlayer .bg, .nsewdrag')].map(box),
        titles: [...g.querySelectorAll('g.g-xtitle text, g[class^="g-x"][class$="title"] text')]
                .filter(t => t.textContent).map(t => [t.textContent, box(t)]),
        subtitles: [...g.querySelectorAll('g.annotation')].filter(a => a.textContent)
                   .map(a => [a.textContent, box(a)])};
"""


def _overlap(a: list, b: list) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _timeline_run(run) -> None:
    """A run with every state of the worker timeline (4 legend entries) over 5 workers and
    a policy curve (the policy graph's legend): each graph with a legend and an axis title."""
    rec = _recorder(run)
    rec.add_events([Event(code, "w", {}, worker_index=w, pid=20 + w) for w, code in (
        (2, C.WORKER_DIED), (3, C.WORKER_STALLED), (4, C.WORKER_RESTARTED), (5, C.ENV_CRASHED))])
    from flow1_ray.report.views import rule_signals

    signals = {col: 0.5 for col, _, _ in rule_signals()}   # every rule's subplot, with its long title
    rec.add_learner_rows([{"iteration": i, "module_id": mid, "kind": "module", **signals,
                           "entropy_ratio": 0.9 - 0.1 * i, "mean_kl_loss": 0.01}
                          for i in (1, 2, 3) for mid in ("default_policy", "other")])
    rec.flush()


@needs_browser
def test_no_legend_of_the_panel_covers_an_axis_title_or_the_plot(tmp_path, cli_env):
    """The legends sit below the x-axis titles, inside the figure, and no two subplot titles of
    the learner rules run into each other: on a wide page (two quadrants a row), a narrower one
    (legends wrap) and one column (one panel, one browser, the window resized and the page
    loaded again at each width)."""
    run = tmp_path / "20260101-000000-aaaaaa"
    _timeline_run(run)
    with Served(run, env=cli_env) as served:
        d = chrome(width=1500, height=1700)
        try:
            for width in (1500, 1100, 900):
                d.set_window_size(width, 1700)
                d.get(served.url)
                for graph in ("timeline-graph", "return-graph", "policy-graph"):
                    got = wait_for(lambda: (b := d.execute_script(_BOXES_JS, graph))["legend"] and b["titles"] and b,
                                   20)
                    assert got, f"{graph} at {width}px: no legend or axis title drawn"
                    legend = got["legend"]
                    for label, title in got["titles"]:
                        assert not _overlap(legend, title), f"{graph} at {width}px: the legend {legend} covers " \
                                                            f"the axis title {label!r} {title}"
                    for plot in got["plot"]:
                        assert not _overlap(legend, plot), f"{graph} at {width}px: the legend covers the plot"
                    subs = got["subtitles"]   # the learner rules' subplot titles, side by side
                    for i, (a, box_a) in enumerate(subs):
                        for b, box_b in subs[i + 1:]:
                            assert not _overlap(box_a, box_b), f"{graph} at {width}px: {a!r} runs into {b!r}"
                    svg = got["svg"]
                    assert svg[0] <= legend[0] and legend[2] <= svg[2] and legend[3] <= svg[3] + 0.5, \
                        f"{graph} at {width}px: the legend {legend} leaves the figure {svg}"
                screenshot(d, f"panel-legends-{width}", tmp_path)
        finally:
            d.quit()
