"""The live panel's page (``flow1 serve``): its stylesheet (:data:`CSS`), the HTML shell Dash
fills (:data:`INDEX`: nothing loaded from the network) and :func:`page`, the four quadrants'
empty frame built per load, which the callbacks of panel_callbacks.py fill. Used by panel.py
(make_app).
"""

from __future__ import annotations

from typing import Any

from .panel_callbacks import Runs
from .panel_figures import GRAPH_CONFIG, LEGEND_PX

POLL_MS = 1000

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


def page(runs: Runs) -> Any:
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
