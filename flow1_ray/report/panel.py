"""``flow1 serve``: a live panel of a run, in four quadrants (result, cause, hypothesis, risk).

A person reads a run in a fixed order: the result (top left: the return and its EMA, the
policy's entropy and KL, the latest state x action heatmap), the cause (top right: what
flow1 found, with its evidence), the hypothesis to test (bottom left: the knob values
computed from the run's config, the frame an env raised in, the batches snapshotted), and
the risk (bottom right: workers alive / stalled / dead, restarts, contention, memory,
dropped samples, the worker timeline).

Built on Dash (Flask, React, Plotly): its JavaScript comes from the installed package, so
the page loads nothing from the network; every string of the run is a React text node,
never parsed as HTML -- except inside Plotly figures, whose legends, titles, axis titles,
hover text and annotations take a subset of HTML (``<a href>``, ``<b>``, ``<br>``): every
run string handed to Plotly goes through :func:`esc` first. The page polls once a second;
each poll reads only the Parquet parts the Recorder wrote since the last one
(:class:`~.follow.RunFollower`), and a callback never raises: what cannot be read is named
on the page. Nothing here writes.

Size (~490 lines): one Dash app, its figures and its callbacks; the data it shows is
computed in views.py and follow.py, so what is left here is layout.
"""

from __future__ import annotations

import base64
import datetime as dt
import errno
import hashlib
import html as _html
import ipaddress
import logging
import os
import socket
import threading
import time
from typing import Any, Callable

from ..common import codes as C
from ..common import schema as S
from ..common.errors import Flow1InputError
from ..common.events import one_line
from ..rundir.reading import read_file
from ..rundir.store import CLUSTERS_DIR, EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, METRICS_DIR, SNAPSHOTS_DIR, Location
from .follow import RunFollower, find_runs, is_run_dir
from .model import Report, life_line, verdict_kind
from .views import STATE_COLOURS, current_findings, ema_label, hypotheses, risk, rule_signals, timeline_marks

log = logging.getLogger(__name__)

DEFAULT_PORT = 8050
POLL_MS = 1000
RUNS_REFRESH_S = 5.0

CSS = """
*{box-sizing:border-box} body{margin:0;font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#222;
background:#f4f5f7} header{display:flex;align-items:center;gap:1rem;padding:.6rem 1rem;background:#1f2933;color:#fff}
header h1{font-size:1.1rem;margin:0} #run-name{font-family:monospace} #updated{margin-left:auto;font-size:.8rem;
color:#cbd2d9} #run-picker{min-width:22rem;color:#222} .verdict{font-weight:700;padding:.15rem .6rem;border-radius:3px}
.PASS{background:#e8f6ec;color:#1e7b34} .WARN{background:#fff4e0;color:#9a5b00} .FAIL{background:#fde8e6;color:#a61b0f}
main{display:grid;grid-template-columns:1fr 1fr;grid-template-rows:auto auto;gap:.8rem;padding:.8rem}
section.q{background:#fff;border-radius:6px;padding:.6rem .9rem;box-shadow:0 1px 2px rgba(0,0,0,.12);min-width:0;
overflow:auto;max-height:46rem} section.q h2{font-size:1rem;margin:.1rem 0 .5rem;color:#52606d;text-transform:uppercase;
letter-spacing:.05em} .nums{display:flex;flex-wrap:wrap;gap:.4rem 1.4rem;margin-bottom:.4rem} .num span{display:block;
font-size:.72rem;color:#7b8794} .num b{font-size:1.25rem} article{border-left:4px solid #ccc;padding:.2rem .6rem;
margin:.4rem 0} article.f-FAIL{border-color:#c0392b} article.f-WARN{border-color:#e67e22} article.f-PASS{border-color:#2e86c1}
article .head{font-size:.85rem} article .msg{margin:.2rem 0;white-space:pre-wrap;word-break:break-word}
pre{white-space:pre-wrap;word-break:break-word;font-size:.75rem;max-height:14rem;overflow:auto;background:#f7f7f7;
padding:.4rem;margin:.2rem 0} table{border-collapse:collapse;width:100%;font-size:.85rem} td,th{border-bottom:1px solid
#e4e7eb;padding:.25rem .4rem;text-align:left;vertical-align:top} code{font-size:.8rem;background:#f0f4f8;padding:0 .2rem}
tr.fail td:first-child{color:#a61b0f;font-weight:600} tr.warn td:first-child{color:#9a5b00;font-weight:600}
.NOT_JUDGED{background:#eceff1;color:#37474f} .GAPS{background:#fff8e1;color:#7a5c00}
#gaps{font-size:.85rem;margin:.2rem 0 .5rem} #gaps li{margin:.1rem 0}
.muted{color:#7b8794} img.heatmap{max-width:100%;margin-top:.4rem}
img.thumb{width:80px;height:auto;image-rendering:pixelated;border:1px solid #ccc} @media(max-width:1000px){main{grid-template-columns:1fr}}
"""

INDEX = """<!DOCTYPE html>
<html lang="en"><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


class Runs:
    """The runs the panel can show (one run directory, or those under an output directory),
    each with its follower; the list is refreshed every few seconds for new runs."""

    def __init__(self, path: "str | os.PathLike | Location") -> None:
        self.path = Location(path)
        self._lock = threading.Lock()
        self._followers: dict[str, RunFollower] = {}
        self._listed_at = 0.0
        self.names: list[str] = []
        self.refresh(force=True)   # raises Flow1InputError when the path holds no run
        self.single = is_run_dir(self.path)

    def refresh(self, force: bool = False) -> list[str]:
        with self._lock:
            if force or time.monotonic() - self._listed_at >= RUNS_REFRESH_S:
                try:
                    runs = find_runs(self.path)
                except Flow1InputError:
                    if force:
                        raise
                    runs = [self._followers[n].dir for n in self.names]
                for r in runs:
                    self._followers.setdefault(r.name, RunFollower(r))
                self.names = [r.name for r in runs]
                self._listed_at = time.monotonic()
            return list(self.names)

    def get(self, name: str | None) -> RunFollower | None:
        """The follower of a listed run (anything else the browser sends is ignored)."""
        with self._lock:
            return self._followers.get(name) if name in self.names else None


# -- figures ---------------------------------------------------------------------------------
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


def return_figure(f: RunFollower) -> Any:
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
    fig.update_layout(title={"text": "episode return", "font": {"size": 13}})
    return _layout(fig, 250)


def policy_figure(f: RunFollower) -> Any:
    """Entropy ratio and KL per module, then every learner rule's signal that has data
    (:func:`~flow1_ray.report.views.rule_signals`: a new rule's View is drawn here too)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = [(S.ENTROPY_RATIO, "entropy / max entropy"), (S.MEAN_KL, "KL (old -> new policy)")]
    panels += [(col, f"{title} ({', '.join(codes)})") for col, title, codes in rule_signals()
               if any(isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool) for r in f.learner)]
    cols = 2 if len(panels) == 2 else 3
    nrows = -(-len(panels) // cols)
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=[esc(t) for _, t in panels])
    for mid in sorted({r["module_id"] for r in f.learner}):
        mine = sorted((r for r in f.learner if r["module_id"] == mid), key=lambda r: r["iteration"])
        x = [r["iteration"] for r in mine]
        for i, (col, _) in enumerate(panels):
            fig.add_trace(go.Scatter(x=x, y=[r.get(col) for r in mine], name=esc(mid), legendgroup=esc(mid),
                                     showlegend=i == 0, mode=_mode(len(x))), row=i // cols + 1, col=i % cols + 1)
    _iterations_axis(fig, [r["iteration"] for r in f.learner])
    fig.update_annotations(font_size=12)
    return _layout(fig, 230 * nrows)


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


# -- quadrants --------------------------------------------------------------------------------
def _num(label: str, value: Any, ident: str) -> Any:
    from dash import html

    text = "-" if value is None else f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" \
        if isinstance(value, int) else str(value)
    return html.Div(className="num", children=[html.Span(label), html.B(text, id=ident)])


def _number(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def verdict_block(report: Report) -> list:
    """The verdict with what flow1 did not see (the gaps: watchers off, the run's life, hub
    restarts, skipped parts), as ``flow1 report`` gives them."""
    from dash import html

    gaps = report.gaps()
    life = life_line(report.completeness)
    out: list = [html.Div([html.Span(report.verdict, id="result-verdict", className=f"verdict "
                                     f"{verdict_kind(report.verdict)}")]
                          + ([" ", html.Span(report.not_judged, className="muted")] if report.not_judged else []))]
    if life:
        out.append(html.Div(life, id="life", className="muted"))
    if gaps:
        out.append(html.Ul([html.Li(g) for g in gaps[:50]] + ([html.Li(f"... and {len(gaps) - 50} more")]
                                                              if len(gaps) > 50 else []), id="gaps"))
    return out


def result_numbers(f: RunFollower) -> list:
    last = f.last_metrics()
    ret = _number(last.get("episode_return_mean"))
    return [_num("iteration", last.get("iteration"), "n-iteration"),
            _num("env steps", last.get("env_steps"), "n-env-steps"),
            _num("return (mean)", float(ret) if ret is not None else None, "n-return"),
            _num("return EMA", _number(last.get(S.RETURN_EMA)), "n-return-ema"),
            _num("FAIL · WARN", f"{f.counts.get(C.FAIL, 0)} · {f.counts.get(C.WARN, 0)}", "n-findings"),
            _num("events read", sum(f.counts.values()), "n-events")]


def heatmap_block(f: RunFollower) -> list:
    from dash import html

    if not f.heatmaps:
        return [html.P("No state x action heatmap yet.", className="muted")]
    name = f.heatmaps[-1]
    png, why = read_file(f.dir, f"{HEATMAPS_DIR}/{name}", png=True)   # checked again: it may have changed
    if png is None:
        return [html.P(f"heatmap not shown: {why}", className="muted")]
    return [html.Details(open=True, children=[
        html.Summary(f"P(action | state cluster), {name} ({len(f.heatmaps)} snapshot(s) in heatmaps/)"),
        html.Img(className="heatmap", src="data:image/png;base64," + base64.b64encode(png).decode("ascii"),
                 alt=f"state x action heatmap {name}")])]


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


def clusters_block(f: RunFollower) -> list:
    """Per module, what the flagged clusters of the last snapshot hold (their descriptions,
    a thumbnail of a real state for an image env) and the cluster map: the heatmap's rows
    in the env's terms."""
    from dash import dcc, html

    from ..clustering.describe import HOW_TO_READ
    from .clusters import flagged, has_map, views

    out: list = []
    for i, (module, rows) in enumerate(sorted(f.clusters.items())):
        vs, _ = views(rows)   # a thumbnail that is not a PNG was named when the rows were read
        shown = flagged(vs)
        thumbs = any(v["thumbnail"] for v in vs)
        head = [html.Th(t) for t in ("cluster", "verdict", "states", "top action", "what sets its states apart")]
        body = []
        for v in shown:
            cells = [html.Td(str(v["cluster"])), html.Td(v["verdict"]), html.Td(f"{v['size']} ({v['share']:.1%})", style={"whiteSpace": "nowrap"}),
                     html.Td("" if v["top_action"] is None else v["top_action"]
                             + ("" if v["p_top"] is None else f" at {v['p_top']:.2f}")),
                     html.Td(v["description"] or "(not recorded: a run written before cluster descriptions)",
                             className="description")]
            if thumbs:
                cells.append(html.Td(html.Img(className="thumb", alt=f"a state of cluster {v['cluster']}",
                                              src="data:image/png;base64," + base64.b64encode(v["thumbnail"])
                                              .decode("ascii")) if v["thumbnail"] else
                                     html.Span("no frame kept", className="muted")))
            body.append(html.Tr(cells, className="cluster"))
        out.append(html.Details(open=True, id=f"clusters-{i}", children=[
            html.Summary(f"what the flagged clusters of {module} hold ({len(shown)} of {len(vs)} clusters)"),
            html.P(HOW_TO_READ, className="muted", style={"fontSize": ".8rem"}),
            html.Table([html.Tr(head + ([html.Th("a state of it")] if thumbs else []))] + body)
            if body else html.P("Every cluster is OK.", className="muted")]
            + ([dcc.Graph(id=f"cluster-map-{i}", figure=cluster_map_figure(module, vs), config=GRAPH_CONFIG)]
               if has_map(vs) else [])))
    return out


def cause_block(f: RunFollower) -> list:
    from dash import html

    rows = current_findings(f.findings)
    if not rows:
        return [html.P("No WARN or FAIL: nothing flow1 checks is wrong so far.", className="muted")]
    out = []
    for r in rows:
        head = [html.Span(r["status"], className=f"verdict {r['status']}"), " ", html.B(r["code"]),
                f"  {r['module']}" + (f" · {r['where']}" if r["where"] else "") + f" · {r['ts']} UTC"
                + (f" · x{r['count']}" if r["count"] > 1 else "")]
        out.append(html.Article(className=f"finding f-{r['status']}", children=[
            html.Div(head, className="head"), html.Div(r["message"], className="msg"),
            html.Details([html.Summary("evidence"), html.Pre(r["evidence"])])]))
    return out


def hypothesis_block(f: RunFollower) -> list:
    from dash import html

    hs = hypotheses(f.findings, f.snapshots)
    if not hs and not f.whatifs:
        return [html.P("Nothing to test yet: no finding points at a knob, a frame or a batch.", className="muted")]
    out: list = []
    knobs = [h for h in hs if h["kind"] == "knob"]
    if knobs:
        out.append(html.Table([html.Tr([html.Th(t) for t in ("finding", "knob", "now -> try", "why", "config")])] + [
            html.Tr(className=h["status"].lower(), children=[
                html.Td(h["code"]), html.Td(h["knob"]), html.Td(f"{h['current']} -> {h['value']}"), html.Td(h["why"]),
                html.Td(html.Code(h["line"]))]) for h in knobs]))
    frames = [h for h in hs if h["kind"] == "frame"]
    if frames:
        out.append(html.H3("Where it raised or hung", style={"fontSize": ".9rem"}))
        out.append(html.Ul([html.Li([html.B(h["code"]), f" ({h['where']}): ", html.Code(h["frame"]),
                                     html.Div(h["error"], className="muted")]) for h in frames]))
    snaps = [h for h in hs if h["kind"] == "snapshot"]
    if snaps:
        out.append(html.H3("Snapshots to replay", style={"fontSize": ".9rem"}))
        out.append(html.Ul([html.Li([html.Code(f"snapshots/{h['name']}"), f": {h['what']}"]) for h in snaps]))
    return out + whatif_blocks(f)


def whatif_blocks(f: RunFollower) -> list:
    """flow1 whatif's verdicts (each advice tested by branches from a checkpoint), newest
    first, each with its branches' curves against the baseline's."""
    from dash import dcc, html

    out: list = []
    for i, w in enumerate(f.whatifs):
        out.append(html.H3(f"What-if {w['id']}: the advice tested", style={"fontSize": ".9rem"}))
        out.append(html.Table(id=f"whatif-{i}", className="whatif", children=[
            html.Tr([html.Th(t) for t in ("branch", "finding", "verdict", "why")])] + [
            html.Tr([html.Td(html.Code(v["branch"])), html.Td(v.get("finding") or "(the return)"), html.Td(v["verdict"]),
                     html.Td([v.get("why") or ""] + [html.Div(f"read back: {r}", className="muted")
                                                     for r in v.get("readback", [])])])
            for v in w["verdicts"]] + [html.Tr(html.Td(f"failed: {x}", colSpan=4)) for x in w.get("failed", [])]))
        fig = whatif_figure(f.dir, w["id"])
        if fig is not None:
            out.append(dcc.Graph(id=f"whatif-graph-{i}", figure=fig, config=GRAPH_CONFIG))
    return out


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


def risk_block(f: RunFollower) -> list:
    from dash import html

    return [html.Table([html.Tr(className=r["level"], children=[html.Td(r["label"]), html.Td(r["value"])])
                        for r in risk(f.last_metrics(), f.code_counts, f.findings)])]


# -- the callbacks ------------------------------------------------------------------------------
#: what the refresh callback returns, in order: name -> (component id, property) it sets
REFRESH_TARGETS: dict[str, tuple[str, str]] = {
    "run-name": ("run-name", "children"), "verdict": ("verdict", "children"),
    "verdict-class": ("verdict", "className"), "updated": ("updated", "children"),
    "result-numbers": ("result-numbers", "children"), "return-graph": ("return-graph", "figure"),
    "policy-graph": ("policy-graph", "figure"), "policy-wrap": ("policy-wrap", "style"),
    "heatmap": ("heatmap", "children"), "clusters": ("clusters", "children"), "cause": ("cause", "children"), "hypothesis": ("hypothesis", "children"),
    "risk": ("risk", "children"), "timeline-graph": ("timeline-graph", "figure"),
    "timeline-wrap": ("timeline-wrap", "style"), "seen": ("seen", "data"), "result-head": ("result-head", "children")}
#: the names of the refresh callback's values, in order (make_app's Outputs)
REFRESH_OUTPUTS = tuple(REFRESH_TARGETS)


def _quadrants(f: RunFollower, changed: Callable[..., bool]) -> dict[str, Any]:
    """What the sources that changed (``changed(*subs)``) redraw; the rest stays as shown."""
    from dash import no_update as keep

    ev, mt, ln, hm = changed(EVENTS_DIR), changed(METRICS_DIR), changed(LEARNER_DIR), changed(HEATMAPS_DIR)
    return {"result-numbers": result_numbers(f) if ev or mt else keep,
            "return-graph": return_figure(f) if mt else keep,
            "policy-graph": (policy_figure(f) if f.learner else keep) if ln else keep,
            "policy-wrap": ({} if f.learner else {"display": "none"}) if ln else keep,
            "heatmap": heatmap_block(f) if hm else keep,
            "clusters": clusters_block(f) if changed(CLUSTERS_DIR) else keep,
            "cause": cause_block(f) if ev else keep,
            "hypothesis": hypothesis_block(f) if ev or changed(SNAPSHOTS_DIR, S.WHATIF_DIR) else keep,
            "risk": risk_block(f) if ev or mt else keep,
            "timeline-graph": (timeline_figure(f) if f.timeline else keep) if ev else keep,
            "timeline-wrap": ({} if f.timeline else {"display": "none"}) if ev else keep}


def _draw(runs: Runs, name: str | None, seen: dict | None) -> tuple:
    """One tick: poll the run, then each output by :data:`REFRESH_OUTPUTS` (redrawn only
    where its sources changed since this page last drew them: ``seen``)."""
    from dash import no_update

    f = runs.get(name)
    if f is None:
        return (no_update,) * len(REFRESH_OUTPUTS)
    f.poll()
    report = f.report()
    ago = f"last new data {time.time() - f.last_change:.0f} s ago" if f.last_change else "no data yet"
    updated = f"live · {ago} · read {dt.datetime.now():%H:%M:%S}"
    if f.skipped:
        updated += f" · {len(f.skipped)} item(s) skipped"
    stamps = {"run": name, **f.stamps}
    seen = seen if isinstance(seen, dict) and seen.get("run") == name else {}

    def changed(*subs: str) -> bool:
        return any(stamps.get(k) != seen.get(k) for k in subs) or not seen

    verdict = report.verdict   # with the run's life and what was skipped: judged at each tick
    # ... and redrawn only when its text changed (a redraw replaces the elements a reader holds)
    head = repr((verdict, report.not_judged, life_line(report.completeness), report.gaps()))
    stamps["head"] = hashlib.blake2b(head.encode(), digest_size=8).hexdigest()
    out = {"run-name": name if not seen else no_update, "verdict": verdict,
           "verdict-class": f"verdict {verdict_kind(verdict)}", "updated": updated,
           **_quadrants(f, changed), "seen": stamps,
           "result-head": verdict_block(report) if changed("head") else no_update}
    return tuple(out[k] for k in REFRESH_OUTPUTS)


def panel_callbacks(runs: Runs) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The panel's two callbacks, as plain functions (make_app registers them; tests call
    them): ``list_runs(n, shown)`` -> the picker's options, ``refresh(n, name, seen)`` ->
    one value per :data:`REFRESH_OUTPUTS`. Neither raises."""
    from dash import no_update

    def _list_runs(_n: int | None, shown: list | None) -> Any:
        try:
            listed = runs.refresh()
        except Exception:   # a callback never raises: the page keeps what it shows
            log.exception("flow1 serve: listing the runs failed")
            return no_update
        return listed if listed != shown else no_update

    def _refresh(_n: int | None, name: str | None, seen: dict | None) -> tuple:
        """Never raises: a figure that cannot be drawn from what the run holds leaves the
        page as it was and says so."""
        try:
            return _draw(runs, name, seen)
        except Exception as e:
            log.exception("flow1 serve: drawing %s failed", name)
            out = [no_update] * len(REFRESH_OUTPUTS)
            out[REFRESH_OUTPUTS.index("updated")] = f"not redrawn: {type(e).__name__}: {one_line(e)[:200]}"
            return tuple(out)

    return _list_runs, _refresh


# -- the app --------------------------------------------------------------------------------------
GRAPH_CONFIG = {"displaylogo": False, "displayModeBar": False}   # drag to zoom, double-click to reset


def _page(runs: Runs) -> Any:
    """The page, built per load: a reload opens the newest run of an output directory."""
    from dash import dcc, html

    names = runs.refresh()
    shown = {} if runs.single else {"display": "none"}
    return html.Div(id="panel", children=[
        dcc.Interval(id="tick", interval=POLL_MS),
        dcc.Store(id="seen"),
        html.Header([html.H1("flow1"), html.Span(names[0], id="run-name", style=shown),
                     html.Div(dcc.Dropdown(id="run-picker", options=names, value=names[0], clearable=False),
                              style={"display": "none"} if runs.single else {}),   # an output dir: pick a run
                     html.Span("", id="verdict", className="verdict"), html.Span("", id="updated")]),
        html.Main([
            html.Section(id="q-result", className="q", children=[
                html.H2("Result"), html.Div(id="result-head"), html.Div(id="result-numbers", className="nums"),
                dcc.Graph(id="return-graph", config=GRAPH_CONFIG, style={"height": f"{250 + LEGEND_PX}px"}),
                html.Div(id="policy-wrap", children=dcc.Graph(id="policy-graph", config=GRAPH_CONFIG)),
                html.Div(id="heatmap"), html.Div(id="clusters")]),
            html.Section(id="q-cause", className="q", children=[html.H2("Cause"), html.Div(id="cause")]),
            html.Section(id="q-hypothesis", className="q", children=[html.H2("Hypothesis to test"),
                                                                      html.Div(id="hypothesis")]),
            html.Section(id="q-risk", className="q", children=[
                html.H2("Risk"), html.Div(id="risk"),
                html.Div(id="timeline-wrap", children=dcc.Graph(id="timeline-graph", config=GRAPH_CONFIG))]),
        ])])


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


def make_app(path: "str | os.PathLike | Location") -> Any:
    """The Dash app of a run directory or an output directory of runs (Flow1InputError when
    ``path`` holds no run)."""
    from dash import Dash, Input, Output, State

    runs = Runs(path)
    warm_up()
    app = Dash(__name__, title=esc(f"flow1: {runs.path.name}"), update_title=None, serve_locally=True,
               assets_folder=os.path.join(os.path.dirname(__file__), "no-assets"), assets_ignore=".*",
               index_string=INDEX)
    app.layout = lambda: _page(runs)
    list_runs, refresh = panel_callbacks(runs)
    app.callback(Output("run-picker", "options"), Input("tick", "n_intervals"),
                 State("run-picker", "options"))(list_runs)
    app.callback(*[Output(i, prop) for i, prop in REFRESH_TARGETS.values()],
                 Input("tick", "n_intervals"), Input("run-picker", "value"), State("seen", "data"))(refresh)
    return app


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, or one clear Flow1InputError (port in use, unknown host)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise Flow1InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        why = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise Flow1InputError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False


def serve(path: "str | os.PathLike | Location", host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the panel until interrupted. ``on_ready(url)`` is called once it listens."""
    from werkzeug.serving import make_server

    app = make_app(path)                # Flow1InputError: not a run
    sock = _listen(host, port)          # Flow1InputError: port in use
    logging.getLogger("werkzeug").setLevel(logging.WARNING)   # no line per poll
    server = make_server(host, sock.getsockname()[1], app.server, threaded=True, fd=sock.fileno())
    shown = f"[{host}]" if ":" in host else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{server.socket.getsockname()[1]}/")
    try:
        server.serve_forever()
    finally:
        server.server_close()
        sock.close()
