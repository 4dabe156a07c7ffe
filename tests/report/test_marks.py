"""The diagnosis marked on the curves: where the primary symptom began and lasted (a band), where
its most likely cause's signs began (dashed lines), on the report's matplotlib curves and the
panel's Plotly figures; a healthy run's curves carry no mark."""

from __future__ import annotations

from flow1_ray.common import codes as C
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.report.diagnosis_view import anomaly_marks, mark_legend
from flow1_ray.report.follow import RunFollower
from flow1_ray.report.model import Report

from browser import needs_browser
from sick_findings import JUDGED, PPO, finding, lr_knob, sick_ppo


def _sick_events():
    """The sick PPO run's findings, its KL spike raised again at iteration 3."""
    return sick_ppo() + [finding(C.KL_SPIKE, 3, knobs=[lr_knob()], kl=900.0)]


def test_the_marks_are_the_symptoms_interval_and_where_its_causes_signs_began():
    d = Report(target="s", events=_sick_events(), learning=JUDGED, settings=PPO).diagnosis()
    assert d["primary"]["iteration"] == 1 and d["primary"]["last_iteration"] == 3
    marks = anomaly_marks(d)
    assert marks[0] == {"kind": "symptom", "code": C.KL_SPIKE, "start": 1, "end": 3}
    causes = {m["code"]: m["start"] for m in marks if m["kind"] == "cause"}
    assert causes == {C.CLIP_FRACTION: 3, C.ENTROPY_COLLAPSE: 2}   # the step cause's signs on the run's curves
    assert mark_legend(marks) == {"symptom": "KL_SPIKE, the primary symptom (iteration 1-3)",
                                  "cause": "its cause's signs began: CLIP_FRACTION (3), ENTROPY_COLLAPSE (2)"}
    # nothing to mark: a healthy run, a short one, a symptom without an iteration (an env check's)
    assert anomaly_marks(Report(target="ok", learning=JUDGED).diagnosis()) == []
    crash = [finding(C.ENV_CRASHED, None, status=C.FAIL)]
    assert anomaly_marks(Report(target="c", events=crash, learning=JUDGED).diagnosis()) == []


def test_the_reports_curves_shade_the_interval_and_draw_the_signs():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flow1_ray.report.html import _mark, _mark_legend

    marks = anomaly_marks(Report(target="s", events=_sick_events(), learning=JUDGED, settings=PPO).diagnosis())
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3, 4], [1.0, 0.5, 0.1, 0.1])
    _mark(ax, marks)
    _mark_legend(fig, marks)
    (band,) = ax.patches
    assert (band.get_x(), band.get_x() + band.get_width()) == (0.5, 3.5)
    lines = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
    assert lines == [2, 3]
    (legend,) = fig.legends   # below the plots, each kind once
    assert [t.get_text() for t in legend.get_texts()] == list(mark_legend(marks).values())
    plt.close(fig)


def _run(run_dir, events) -> None:
    rec = RecorderCore(str(run_dir), "run-1", flush_interval_s=3600)
    rec.add_events(events)
    for i in range(1, 5):
        rec.add_metrics({"iteration": i, "env_steps": 1000 * i, "episode_return_mean": 20.0 + i})
    rec.add_learner_rows([{"iteration": i, "module_id": "default_policy", "kind": "module",
                           "entropy_ratio": 0.9 - 0.2 * i, "mean_kl_loss": 0.5} for i in range(1, 5)])
    rec.flush()
    rec.close()


def test_the_panels_figures_mark_every_subplot_and_name_each_kind_once(tmp_path):
    from flow1_ray.report.panel_figures import policy_figure, return_figure

    _run(tmp_path / "run", _sick_events())
    f = RunFollower(tmp_path / "run")
    f.poll(force=True)
    marks = anomaly_marks(f.diagnosis())
    assert [m["kind"] for m in marks] == ["symptom", "cause", "cause"], marks
    for fig, plots in ((return_figure(f, marks), 1), (policy_figure(f, marks), 2)):
        shapes = fig.layout.shapes
        bands = [s for s in shapes if s.type == "rect"]
        assert len(bands) == plots and {(s.x0, s.x1) for s in bands} == {(0.5, 3.5)}
        assert len([s for s in shapes if s.type == "line"]) == 2 * plots
        named = [s.name for s in shapes if s.showlegend]
        assert named == ["KL_SPIKE, the primary symptom (iteration 1-3)",
                         "its cause's signs began: CLIP_FRACTION (3), ENTROPY_COLLAPSE (2)"], named
    # the follower's diagnosis is made again only when what it reads changed
    assert f.diagnosis() is f.diagnosis()


def test_a_healthy_runs_panel_curves_carry_no_mark(tmp_path):
    from flow1_ray.report.panel_figures import return_figure

    _run(tmp_path / "run", [])
    f = RunFollower(tmp_path / "run")
    f.poll(force=True)
    assert anomaly_marks(f.diagnosis()) == [] and not return_figure(f, []).layout.shapes


@needs_browser
def test_the_panel_in_chromium_shades_the_symptoms_interval_and_names_the_marks_once(tmp_path, cli_env):
    """Served by ``flow1 serve`` and drawn by a real browser: the return graph and the policy
    graph carry the band (one per plot) and the legend names the symptom and the cause's signs."""
    from browser import Served, chrome, screenshot, wait_for

    _run(tmp_path / "run", _sick_events())
    with Served(tmp_path / "run", env=cli_env) as served:
        d = chrome(width=1500, height=1800)
        try:
            d.get(served.url)
            js = ("const g = document.getElementById(arguments[0]); if (!g) return null;"
                  "return {bands: g.querySelectorAll('.shapelayer path').length,"
                  "legend: Array.from(g.querySelectorAll('.legendtext')).map(t => t.textContent)};")
            for graph, plots in (("return-graph", 1), ("policy-graph", 2)):
                got = wait_for(lambda: (b := d.execute_script(js, graph)) and b["bands"] and b, 20)
                assert got, f"{graph}: no mark drawn"
                assert got["bands"] >= 3 * plots, got   # a band and two lines on each plot
                assert got["legend"].count("KL_SPIKE, the primary symptom (iteration 1-3)") == 1, got
                assert sum(t.startswith("its cause's signs began") for t in got["legend"]) == 1, got
            screenshot(d, "panel-marks", tmp_path)
        finally:
            d.quit()
