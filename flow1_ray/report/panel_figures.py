"""The live panel's Plotly figures (``flow1 serve``): the return, the policy's signals, the
worker timeline, a module's cluster map and a what-if's branches, with :func:`esc` (every
run string handed to Plotly goes through it first: Plotly renders a subset of HTML in
legends, titles and hover text) and :func:`warm_up` (a process's first figure paid before a
browser asks). Used by panel_blocks.py (the quadrants), panel_callbacks.py (the refresh),
panel_layout.py (the page) and panel.py (the app); tests/report draws them directly.
"""

from __future__ import annotations

import html as _html
from typing import Any

from ..common import schema as S
from ..common.events import one_line
from ..rundir.store import Location
from .diagnosis_view import CAUSE_COLOUR, SYMPTOM_COLOUR, mark_legend
from .follow import RunFollower
from .views import STATE_COLOURS, ema_label, rule_signals, timeline_marks

GRAPH_CONFIG = {"displaylogo": False, "displayModeBar": False}   # drag to zoom, double-click to reset


def esc(text: object) -> str:
    """A run string for Plotly: HTML-escaped (Plotly renders ``<a href>``, ``<b>``,
    ``<br>`` in legends, titles and hover text) and on one line. Quotes stay: with ``<``
    escaped no tag can open, and Plotly decodes ``&lt;`` ``&gt;`` ``&amp;`` but shows
    ``&quot;`` as it is."""
    return _html.escape(one_line(text), quote=False)


def _iterations_axis(fig: Any, iterations: list) -> None:
    """Whole iterations only (plotly would label 1.5 as "2" with an integer format)."""
    span = (max(iterations) - min(iterations)) if iterations else 0
    fig.update_xaxes(title_text="iteration", tick0=0, dtick=max(1, -(-span // 8)))


def _mode(n: int) -> str:
    """Markers while they can be told apart; a long run's thousands of SVG markers would cost
    the browser most of a core at each redraw (measured: scripts/bench_panel.py)."""
    return "lines+markers" if n <= 120 else "lines"


#: pixels the legend row takes below the x-axis title (added to each figure's height)
LEGEND_PX = 30


def _layout(fig: Any, height: int) -> Any:
    """The panel's look. The legend is anchored to the figure's bottom edge (container
    coordinates): Plotly then grows the bottom margin for it and keeps the x-axis title
    above it, also when the legend wraps. Placed in plot fractions (y=-0.25) it sat a
    fixed share of the plot's height below the axis, which on a short figure (the worker
    timeline) is where the axis title is."""
    fig.update_layout(height=height + LEGEND_PX, margin={"l": 45, "r": 10, "t": 28, "b": 30},
                      template="plotly_white", uirevision="keep",
                      legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom",
                              "font": {"size": 10}})
    return fig


def _mark(fig: Any, marks: list[dict], subplots: bool = False) -> None:
    """The diagnosis's marks (:func:`~flow1_ray.report.diagnosis_view.anomaly_marks`) on every
    plot of ``fig``: the primary symptom's iterations shaded, each sign of its cause a dashed
    line; each kind named once in the legend."""
    where = {"row": "all", "col": "all"} if subplots else {}
    names = mark_legend(marks)
    for m in marks:
        first, name = len(fig.layout.shapes), names.pop(m["kind"], None)
        if m["kind"] == "symptom":
            fig.add_vrect(x0=m["start"] - 0.5, x1=m["end"] + 0.5, fillcolor=SYMPTOM_COLOUR, opacity=0.12,
                          line_width=0, layer="below", showlegend=False, **where)
        else:
            fig.add_vline(x=m["start"], line_dash="dash", line_color=CAUSE_COLOUR, line_width=1, showlegend=False,
                          **where)
        if name and len(fig.layout.shapes) > first:
            fig.layout.shapes[first].update(name=esc(name), showlegend=True)


def return_figure(f: RunFollower, marks: list[dict] = ()) -> Any:
    import plotly.graph_objects as go

    rows = f.metric_rows()
    it = [r["iteration"] for r in rows]
    fig = go.Figure()
    fig.add_scatter(x=it, y=[r.get("episode_return_mean") for r in rows], mode=_mode(len(it)),
                    name="return (mean of the last episodes)")
    if any(S.RETURN_EMA in r for r in rows):
        fig.add_scatter(x=it, y=[r.get(S.RETURN_EMA) for r in rows], mode="lines",
                        name=esc(ema_label(f.dir)))
    evaluated = [r for r in rows if r.get(S.EVAL_RETURN) is not None]
    if evaluated:   # the evaluation runners' return beside the training runners' (TRAIN_EVAL_GAP)
        fig.add_scatter(x=[r["iteration"] for r in evaluated], y=[r[S.EVAL_RETURN] for r in evaluated],
                        mode="lines+markers", name="evaluation return")
    _iterations_axis(fig, it)
    _mark(fig, list(marks))
    fig.update_layout(title={"text": "episode return", "font": {"size": 13}})
    return _layout(fig, 250)


def policy_figure(f: RunFollower, marks: list[dict] = ()) -> Any:
    """Entropy ratio and KL per module, then every learner rule's signal that has data
    (:func:`~flow1_ray.report.views.rule_signals`: a new rule's View is drawn here too); the
    diagnosis's ``marks`` on each."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = [(S.ENTROPY_RATIO, "entropy / max entropy"), (S.MEAN_KL, "KL (old -> new policy)")]
    panels += [(col, f"{title} ({', '.join(codes)})") for col, title, codes in rule_signals()
               if any(isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool) for r in f.learner)]
    cols = 2
    nrows = -(-len(panels) // cols)
    # a rule's title is long ("clip fraction (ratios outside 1 +- clip_param) (CLIP_FRACTION)"):
    # two columns (three ran titles into each other in a quadrant half a 1100-px page wide), each
    # title wrapped to the width of a column, each line escaped on its own; the rows spaced for
    # two-line titles
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=[title_lines(t) for _, t in panels],
                        vertical_spacing=min(0.3, 0.6 / max(nrows, 1)) if nrows > 1 else 0.2)
    for mid in sorted({r["module_id"] for r in f.learner}):
        mine = sorted((r for r in f.learner if r["module_id"] == mid), key=lambda r: r["iteration"])
        x = [r["iteration"] for r in mine]
        for i, (col, _) in enumerate(panels):
            fig.add_trace(go.Scatter(x=x, y=[r.get(col) for r in mine], name=esc(mid), legendgroup=esc(mid),
                                     showlegend=i == 0, mode=_mode(len(x))), row=i // cols + 1, col=i % cols + 1)
    _iterations_axis(fig, [r["iteration"] for r in f.learner])
    _mark(fig, list(marks), subplots=True)
    fig.update_annotations(font_size=11)
    fig = _layout(fig, 260 * nrows)
    fig.update_layout(margin={"t": 44})
    return fig


#: characters of a subplot title's line in the policy figure (two columns in a quadrant)
TITLE_CHARS = 34


def title_lines(text: str, width: int = TITLE_CHARS) -> str:
    """A subplot title wrapped at ``width`` characters: each line escaped (:func:`esc`), joined
    by Plotly's ``<br>``."""
    import textwrap

    return "<br>".join(esc(line) for line in textwrap.wrap(one_line(text), width) or [""])


def timeline_figure(f: RunFollower) -> Any:
    import plotly.graph_objects as go

    marks = timeline_marks(f.timeline)
    fig = go.Figure()
    t0 = f.first_ts
    for state, colour in STATE_COLOURS.items():
        mine = [m for m in marks if m["state"] == state]
        if mine:
            fig.add_scatter(x=[(m["ts"] - t0).total_seconds() for m in mine], y=[esc(m["who"]) for m in mine],
                            mode="markers", name=esc(state), marker={"size": 12, "color": colour},
                            text=[esc(f"{m['code']} pid {m['pid']}") for m in mine], hoverinfo="text+x")
    xs = [(m["ts"] - t0).total_seconds() for m in marks]
    pad = max(max(xs, default=0.0) * 0.04, 0.5)   # marks at either end stay whole
    fig.update_xaxes(title_text="seconds since the run's first event", range=[-pad, max(xs, default=0.0) + pad])
    fig.update_yaxes(type="category", categoryorder="category ascending")
    fig.update_layout(title={"text": "worker timeline", "font": {"size": 13}})
    return _layout(fig, 140 + 28 * len({m["who"] for m in marks}))


def cluster_map_figure(module: str, vs: list[dict]) -> Any:
    """The clusters on their 2-D map (first two principal components of the centroids):
    size the states, colour the verdict, the id written on each; hover: its description."""
    import plotly.graph_objects as go

    from ..clustering.heatmap import verdict_colour

    fig = go.Figure()
    biggest = max(v["size"] for v in vs) or 1
    for verdict in sorted({v["verdict"] for v in vs}):
        mine = [v for v in vs if v["verdict"] == verdict]
        fig.add_scatter(x=[v["map_x"] for v in mine], y=[v["map_y"] for v in mine], mode="markers+text",
                        name=esc(verdict), text=[str(v["cluster"]) for v in mine], textposition="top center",
                        hovertext=[esc(f"cluster {v['cluster']}, {v['size']} states: {v['description'] or ''}")
                                   for v in mine], hoverinfo="text",
                        marker={"size": [8 + 30 * (v["size"] / biggest) ** 0.5 for v in mine],
                                "color": verdict_colour(verdict), "opacity": 0.65,
                                "line": {"width": 0.5, "color": "black"}})
    fig.update_xaxes(title_text="first principal component of the centroids")
    fig.update_yaxes(title_text="second")
    fig.update_layout(title={"text": esc(f"state clusters of {module}: similar states lie close"),
                             "font": {"size": 13}})
    return _layout(fig, 300)


def whatif_figure(d: Location, whatif_id: str) -> Any:
    """Each branch's mean over seeds against the baseline's (black), per signal with data."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .whatif import PLOTTED, branch_rows, branch_series, label, nonfinite

    rows = branch_rows(d, whatif_id)
    shown = [(c, t) for c, t in PLOTTED if any(isinstance(r.get(c), (int, float)) for r in rows)]
    if not shown:
        return None
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[t for _, t in shown])
    for j, (col, _) in enumerate(shown):
        series, bad = branch_series(rows, col), nonfinite(rows, col)
        for b in sorted(series, key=lambda b: (b != "baseline", b)):
            xs, mean, _, _ = series[b]
            fig.add_trace(go.Scatter(x=xs, y=mean, name=esc(label(b, bad.get(b, 0))), legendgroup=esc(b),
                                     showlegend=j == 0 or bool(bad.get(b)),
                                     mode=_mode(len(xs)), line={"color": "black"} if b == "baseline" else None),
                          row=1, col=j + 1)
    fig.update_annotations(font_size=12)
    return _layout(fig, 220)


def warm_up() -> None:
    """Pay what the first figure and the first table read of a process cost (plotly builds
    its validators, the rule catalogue imports its modules: ~2 s here, several on a machine busy with the
    training it watches) before a browser asks -- not on the draw that shows the run's first
    metrics or learner rows, which would hold back the events shown with them."""
    import plotly.graph_objects as go
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    from plotly.subplots import make_subplots

    from ..checks.catalogue import rules

    rules()   # every rule module (an event row names its rule; scipy.stats alone is ~1.4 s cold)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["a", "b"])
    fig.add_trace(go.Scatter(x=[0], y=[0], name="a", legendgroup="a", mode="lines+markers"), row=1, col=1)
    _iterations_axis(fig, [0])
    fig.update_annotations(font_size=12)
    timeline = go.Figure()
    timeline.add_scatter(x=[0.0], y=["a"], mode="markers", name="a", marker={"size": 12, "color": "red"},
                         text=["a"], hoverinfo="text+x")
    timeline.update_yaxes(type="category", categoryorder="category ascending")
    for f in (fig, timeline):
        _layout(f, 100).to_plotly_json()
