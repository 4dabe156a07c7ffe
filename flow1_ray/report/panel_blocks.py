"""The contents of the live panel's quadrants (``flow1 serve``), as Dash components: the
result (the verdict with its gaps, the numbers, the heatmap, the flagged clusters), the
cause (the findings), the hypothesis (knobs, frames, snapshots, what-if verdicts) and the
risk table. Every run string is a React text node. Used by panel_callbacks.py, which
redraws each one when its sources changed.
"""

from __future__ import annotations

import base64
from typing import Any

from ..common import codes as C
from ..common import schema as S
from ..rundir.reading import read_file
from ..rundir.store import HEATMAPS_DIR
from .diagnosis_view import symptom_text, where_text
from .follow import RunFollower
from .model import Report, life_line, verdict_kind
from .panel_figures import GRAPH_CONFIG, cluster_map_figure, whatif_figure
from .views import code_entries, current_findings, hypotheses, risk


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


def clusters_block(f: RunFollower) -> list:
    """Per module, what the flagged clusters of the last snapshot hold (their descriptions,
    a thumbnail of a real state for an image env) and the cluster map: the heatmap's rows
    in the env's terms."""
    from dash import dcc, html

    from ..clustering.describe import HOW_TO_READ
    from .clusters import flagged, has_map, views, warned

    out: list = []
    for i, (module, rows) in enumerate(sorted(f.clusters.items())):
        vs, _ = views(rows)   # a thumbnail that is not a PNG was named when the rows were read
        shown = flagged(vs, warned(f.findings, module, rows))
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
            if body else html.P("No cluster verdict was raised as a WARN: any other verdict is informational (a "
                                "policy still undecided, or decided clusters too few to judge).", className="muted")]
            + ([dcc.Graph(id=f"cluster-map-{i}", figure=cluster_map_figure(module, vs), config=GRAPH_CONFIG)]
               if has_map(vs) else [])))
    return out


def diagnosis_card(d: dict) -> list:
    """The diagnosis first: the primary symptom, its most likely cause and standing, the change
    (before and after), its expected effect, and what follows from it."""
    from dash import html

    if d.get("state") != "sick" or not d.get("primary"):
        return [html.Div(id="diagnosis", className="diagnosis muted", children=[html.B("Diagnosis: "), d.get("line")])]
    p, top = d["primary"], (d.get("causes") or [None])[0]
    body = [html.Div([html.B("Diagnosis: "), html.Span(p["status"], className=f"verdict {p['status']}"), " ",
                      html.B(p["code"]), where_text(p)], className="head"),
            html.Div(symptom_text(p), className="msg")]
    if top is not None and top["standing"] != "observed":
        body.append(html.Div([html.B("Most likely cause: "), top["text"], html.Span(f" ({top['standing']})",
                                                                                    className="muted")]))
    if top is not None and top.get("change"):
        ch = top["change"]
        body.append(html.Div([html.B("Change: "), html.Code(ch["before"]), " -> ", html.Code(ch["after"])]))
        body.append(html.Div([html.B("Expected effect: "), top.get("expected") or ""], className="muted"))
    if d.get("chain"):
        body.append(html.Div([html.B("Follows from it: "), ", ".join(dict.fromkeys(c["code"] for c in d["chain"]))]))
    return [html.Article(id="diagnosis", className=f"diagnosis finding f-{p['status']}", children=body)]


def cause_block(f: RunFollower) -> list:
    from dash import html

    rows = current_findings(f.findings)
    diagnosis = f.diagnosis()
    if not rows:
        return diagnosis_card(diagnosis) + [
            html.P("No WARN or FAIL: nothing flow1 checks is wrong so far.", className="muted")]
    out = diagnosis_card(diagnosis)
    follows = {c["code"]: diagnosis["primary"]["code"] for c in diagnosis.get("chain") or []}
    meaning = {c["code"]: c for c in code_entries(r["code"] for r in rows)}
    for r in rows:
        m = meaning[r["code"]]
        head = [html.Span(r["status"], className=f"verdict {r['status']}"), " ", html.B(r["code"], title=m["trigger"]),
                f"  {r['module']}" + (f" · {r['where']}" if r["where"] else "") + f" · {r['ts']} UTC"
                + (f" · x{r['count']}" if r["count"] > 1 else "")]
        out.append(html.Article(className=f"finding f-{r['status']}", children=[
            html.Div(head, className="head"), html.Div(r["message"], className="msg"),
            *[html.Div(f"led to: {c}", className="led-to") for c in r.get("led_to", [])],
            *([html.Div(f"follows from {follows[r['code']]}: see the diagnosis", className="follows")]
              if r["code"] in follows else []),
            html.Details([html.Summary("evidence"), html.Pre(r["evidence"]),
                          html.P([f"What {r['code']} means" + (f" (raised when {m['trigger']})" if m["trigger"] else "")
                                  + ": flow1's docs, ", html.Code(r["reference"])], className="muted reference")])]))
    return out


def hypothesis_block(f: RunFollower) -> list:
    from dash import html

    hs = hypotheses(f.findings, f.snapshots)
    if not hs and not f.whatifs:
        return [html.P("Nothing to test yet: no finding points at a knob, a frame or a batch.", className="muted")]
    out: list = []
    # the diagnosis's change first; the advice of a finding that follows from the primary symptom last, said so
    d = f.diagnosis()
    change = ((d.get("causes") or [{}])[0]).get("change") or {}
    chain = {c["code"] for c in d.get("chain") or []}
    primary = (d.get("primary") or {}).get("code")
    knobs = sorted((h for h in hs if h["kind"] == "knob"),
                   key=lambda h: (not (h["code"] == change.get("from") and h["knob"] == change.get("knob")),
                                  h["code"] in chain))
    if knobs:
        out.append(html.Table([html.Tr([html.Th(t) for t in ("finding", "knob", "now -> try", "why", "config")])] + [
            html.Tr(className=h["status"].lower(), children=[
                html.Td(h["code"]), html.Td(h["knob"]), html.Td(f"{h['current']} -> {h['value']}"),
                html.Td([h["why"]] + ([html.Div(f"waits for {primary}: it may follow from it", className="muted")]
                                      if h["code"] in chain else [])),
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


def risk_block(f: RunFollower) -> list:
    from dash import html

    return [html.Table([html.Tr(className=r["level"], children=[html.Td(r["label"]), html.Td(r["value"])])
                        for r in risk(f.last_metrics(), f.code_counts, f.findings)])]
