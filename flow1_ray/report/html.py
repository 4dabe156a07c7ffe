"""The run as one self-contained HTML page: verdict, findings with their evidence and advice,
a worker timeline, the curves, the heatmaps, the learner tables and the what-ifs (each
branch's verdicts and curves against the baseline's).

Everything the page shows is inside the file (plots as embedded PNGs, no script, no font,
no stylesheet from the network), so it opens from disk anywhere. Every string that came
from the run -- env messages, exception text, stack frames, env ids -- goes through Jinja2's
autoescaping: an event whose message holds ``<script>`` shows that text and runs nothing.
A heatmap is embedded only when it is a PNG inside the run directory (a link to a file
elsewhere is named among the skipped items, never carried into the page).
"""

from __future__ import annotations

import base64
import io
import math
import re
from typing import Any

import logging

from ..common import schema as S
from ..common.events import one_line
from ..rundir.reading import read_file, read_table
from ..rundir.store import CLUSTERS_DIR, LEARNER_DIR, METRICS_DIR, Location
from ..clustering.describe import HOW_TO_READ
from ..rundir.cost_record import cost_table
from .diagnosis_view import CAUSE_COLOUR, SYMPTOM_COLOUR, anomaly_marks, html_context, mark_legend
from .html_template import TEMPLATE
from .model import Report, life_line, verdict_kind
from .views import STATE_COLOURS, code_entries, ema_label, findings_by_module, rule_signals, timeline_marks

log = logging.getLogger(__name__)



def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _timeline(report: Report) -> str | None:
    """One row per worker (EnvRunner or Learner), a mark per state change over time."""
    marks = timeline_marks(report.events)
    if not marks:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(e.ts for e in report.events)
    t1 = max(e.ts for e in report.events)
    rows: dict[str, list] = {}
    for m in marks:
        rows.setdefault(m["who"], []).append(m)
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(rows)))
    span = max((t1 - t0).total_seconds(), 1.0)
    for y, (who, ms) in enumerate(sorted(rows.items())):
        ax.hlines(y, 0, span, color="#bbb", lw=6)
        for m in ms:
            ax.plot([(m["ts"] - t0).total_seconds()], [y], "o", ms=10, color=STATE_COLOURS[m["state"]],
                    label=m["state"] if m["state"] not in ax.get_legend_handles_labels()[1] else None)
    ax.set_yticks(range(len(rows)), sorted(rows))
    ax.set_xlabel("seconds since the run's first event")
    # outside the axes: inside, it hid the marks at the end of the run (seen on a crash run)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def _num(v: Any) -> float:
    """A plotted value: a number, else NaN (a gap in the line, never an error)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")


def _mark(ax: Any, marks: list[dict]) -> None:
    """The diagnosis's marks on one axis (:func:`~.diagnosis_view.anomaly_marks`): the primary
    symptom's iterations shaded, each sign of its cause a dashed line."""
    for m in marks:
        if m["kind"] == "symptom":
            ax.axvspan(m["start"] - 0.5, m["end"] + 0.5, color=SYMPTOM_COLOUR, alpha=0.12, zorder=0)
        else:
            ax.axvline(m["start"], color=CAUSE_COLOUR, linestyle="--", linewidth=1, zorder=0)


def _mark_legend(fig: Any, marks: list[dict]) -> None:
    """What the marks are, once below the figure's plots (a plot's own legend is too narrow)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = mark_legend(marks)
    handles = {"symptom": Patch(color=SYMPTOM_COLOUR, alpha=0.12),
               "cause": Line2D([], [], color=CAUSE_COLOUR, linestyle="--", linewidth=1)}
    if names:
        fig.legend([handles[k] for k in names], list(names.values()), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=len(names), fontsize=8, frameon=False)


def _curves(d: Location, marks: list[dict] = ()) -> str | None:
    """The return and its EMA per iteration; the learner's entropy ratio and KL per module
    (parts that cannot be read are already named by the report: left out here); the
    diagnosis's ``marks`` on each."""
    rows = [r for r in read_table(d, METRICS_DIR).table.to_pylist() if isinstance(r.get("iteration"), int)]
    learner = [r for r in read_table(d, LEARNER_DIR).table.to_pylist() if r.get("kind") == "module"
               and isinstance(r.get("module_id"), str) and isinstance(r.get("iteration"), int)]
    if not rows and not learner:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    rows.sort(key=lambda r: r["iteration"])
    it = [r["iteration"] for r in rows]
    axes[0].plot(it, [_num(r.get("episode_return_mean")) for r in rows], label="return (mean of 100 episodes)")
    if any(S.RETURN_EMA in r for r in rows):
        axes[0].plot(it, [_num(r.get(S.RETURN_EMA)) for r in rows], label=ema_label(d))
    evaluated = [(r["iteration"], _num(r.get(S.EVAL_RETURN))) for r in rows if r.get(S.EVAL_RETURN) is not None]
    if evaluated:   # the evaluation runners' return beside the training runners' (TRAIN_EVAL_GAP)
        axes[0].plot(*zip(*evaluated), "o-", markersize=3, label="evaluation return")
    axes[0].set_title("episode return")
    for ax in axes:
        _mark(ax, list(marks))
    _mark_legend(fig, list(marks))
    axes[0].legend(fontsize=7)
    for mid in sorted({r["module_id"] for r in learner}):
        mine = sorted((r for r in learner if r["module_id"] == mid), key=lambda r: r["iteration"])
        # matplotlib reads "$...$" as TeX and a label starting with "_" as hidden
        label = one_line(mid).replace("$", r"\$")
        axes[1].plot([r["iteration"] for r in mine], [_num(r.get("entropy_ratio")) for r in mine], label=label)
        axes[2].plot([r["iteration"] for r in mine], [_num(r.get("mean_kl_loss")) for r in mine], label=label)
    axes[1].set_title("entropy / max entropy")
    axes[2].set_title("KL (old -> new policy)")
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # iterations, not 1.5
    if learner:
        axes[1].legend(fontsize=7)
    return _png(fig)


def _signals(d: Location, marks: list[dict] = ()) -> str | None:
    """One small chart per learner-rule signal that has data (VALUE_NOT_LEARNING's explained
    variance, the policy loss, the learning rate...), per module; the codes it feeds in the
    title; the diagnosis's ``marks`` on each."""
    learner = [r for r in read_table(d, LEARNER_DIR).table.to_pylist() if r.get("kind") == "module"
               and isinstance(r.get("module_id"), str) and isinstance(r.get("iteration"), int)]
    shown = [(col, title, codes) for col, title, codes in rule_signals()
             if any(isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool) for r in learner)]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = min(3, len(shown))
    nrows = -(-len(shown) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(13, 3.0 * nrows), squeeze=False)
    for ax, (col, title, codes) in zip(axes.ravel(), shown):
        for mid in sorted({r["module_id"] for r in learner}):
            mine = sorted((r for r in learner if r["module_id"] == mid), key=lambda r: r["iteration"])
            ax.plot([r["iteration"] for r in mine], [_num(r.get(col)) for r in mine],
                    label=one_line(mid).replace("$", r"\$"))
        _mark(ax, list(marks))
        ax.set_title(f"{title} ({', '.join(codes)})", fontsize=8)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.ravel()[len(shown):]:
        ax.set_visible(False)
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    _mark_legend(fig, list(marks))
    return _png(fig)


def _whatif_png(d: Location, whatif_id: str) -> str | None:
    from .whatif import draw

    fig = draw(d, whatif_id)
    return _png(fig) if fig is not None else None


def _natural(name: str) -> list:
    """``mlp.10`` after ``mlp.2``: the numbers in a layer name compared as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def last_trace(rows: list[dict]) -> list[dict]:
    """The "grad" rows of each module's last traced iteration, layers in network order.

    Only one update in ``grad_every`` is traced, yet every iteration writes a row per layer
    (null RMS when not traced): the last iteration with rows is most often one without a
    trace, so the last one holding a number is taken, per module. Layers come in the
    module's order (``layer_index``, written since the learner/ table has it); a run
    directory written before has none, and its layers come by name (numbers as numbers),
    which for RLlib's default models is their order too."""
    traced = [r for r in rows if r.get("kind") == S.KIND_GRAD and isinstance(r.get("iteration"), int)
              and isinstance(r.get("module_id"), str) and isinstance(r.get("layer"), str)
              and isinstance(r.get(S.GRAD_RMS), (int, float)) and math.isfinite(r[S.GRAD_RMS])]
    last: dict[str, int] = {}
    for r in traced:
        last[r["module_id"]] = max(last.get(r["module_id"], r["iteration"]), r["iteration"])
    mine = [r for r in traced if r["iteration"] == last[r["module_id"]]]

    def place(r: dict) -> tuple:
        i = r.get(S.LAYER_INDEX)
        return (r["module_id"], 0, i, []) if isinstance(i, int) else (r["module_id"], 1, 0, _natural(r["layer"]))

    return [{**r, S.GRAD_RMS: f"{r[S.GRAD_RMS]:.3g}"} for r in sorted(mine, key=place)]


def _drawn(what: str, draw: Any, skipped: list[str]) -> str | None:
    """A plot, or None with why it could not be drawn named in ``skipped``: the page is
    written whatever a run's numbers hold."""
    try:
        return draw()
    except Exception as e:   # matplotlib on data from the run: named, never a traceback
        log.debug("flow1 report: %s not drawn", what, exc_info=True)
        skipped.append(f"{what}: not drawn ({type(e).__name__}: {one_line(e)[:200]})")
        return None


def _cluster_modules(d: Location, late: list[str], events: list) -> list[dict]:
    """Per module, the last snapshot's clusters: the flagged ones (raised as a WARN; with
    thumbnails as base64), all of them, and the cluster map (what cannot be read was named by
    the report)."""
    from .clusters import by_module, flagged, has_map, usable, views, warned

    table, _ = usable(read_table(d, CLUSTERS_DIR).table)
    out = []
    for module, rows in by_module(table.to_pylist() if table.num_rows else []).items():
        vs, _ = views(rows)
        shown = [{**v, "png": base64.b64encode(v["thumbnail"]).decode("ascii") if v["thumbnail"] else None}
                 for v in flagged(vs, warned(events, module, rows))]
        its = [r.get("iteration") for r in rows if isinstance(r.get("iteration"), int)]
        out.append({"module": module, "iteration": max(its) if its else None, "flagged": shown, "all": vs,
                    "thumbs": any(v["thumbnail"] for v in vs), "described": any(v["description"] for v in vs),
                    "map": _drawn(f"cluster map of {one_line(module)}", lambda vs=vs: _cluster_map(vs), late)
                    if has_map(vs) else None})
    return out


def _cluster_map(vs: list[dict]) -> str:
    """The clusters as points on their 2-D map (map_x, map_y): size the states, colour the
    verdict, each labelled with its id (a flagged one with its verdict too)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..clustering.heatmap import verdict_colour

    fig, ax = plt.subplots(figsize=(8, 5.2))
    biggest = max(v["size"] for v in vs) or 1
    for verdict in sorted({v["verdict"] for v in vs}):
        mine = [v for v in vs if v["verdict"] == verdict]
        ax.scatter([v["map_x"] for v in mine], [v["map_y"] for v in mine],
                   s=[30 + 600 * v["size"] / biggest for v in mine], c=verdict_colour(verdict), alpha=0.6,
                   edgecolors="black", linewidths=0.5, label=one_line(verdict).replace("$", r"\$"))
    for v in vs:   # the id (and a flagged cluster's verdict): its description is in the table beside
        text = str(v["cluster"]) + (f" {one_line(v['verdict'])}" if v["verdict"] != S.VERDICT_OK else "")
        ax.annotate(text.replace("$", r"\$"), (v["map_x"], v["map_y"]), fontsize=8, xytext=(5, 5),
                    textcoords="offset points")
    ax.set_xlabel("first principal component of the centroids")
    ax.set_ylabel("second principal component")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, markerscale=0.5)
    return _png(fig)


def render_html(report: Report, run_dir: "str | Location | None" = None) -> str:
    """The report as one HTML page (everything embedded; run strings escaped). The heatmaps
    are those the report lists (``summary["state_actions"]["heatmaps"]``: checked inside
    the run directory and PNG), read again through the same check."""
    import jinja2

    d = Location(run_dir) if run_dir is not None else None
    s = report.summary
    numbers = [(k, s[k]) for k in ("iterations", "env_steps", "episode_return_mean") if s.get(k) is not None]
    for k, v in (s.get("workers") or {}).items():
        numbers.append((f"workers {k}", v))
    numbers = [(k, f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else v)
               for k, v in numbers]
    heatmaps, gradients, snapshots, whatifs, cluster_modules = [], [], [], [], []
    diagnosis = report.diagnosis()
    curves = signals = None
    late: list[str] = []   # what could not be drawn now (the verdict below already counts the rest)
    if d is not None:
        for name in (s.get("state_actions") or {}).get("heatmaps", []):
            png, why = read_file(d, name, png=True)
            if png is None:
                late.append(why or name)
                continue
            heatmaps.append((name.rsplit("/", 1)[-1], base64.b64encode(png).decode("ascii")))
        cluster_modules = _cluster_modules(d, late, report.events)
        marks = anomaly_marks(diagnosis)
        curves = _drawn("training curves", lambda: _curves(d, marks), late)
        signals = _drawn("the learner rules' signals", lambda: _signals(d, marks), late)
        gradients = last_trace(read_table(d, LEARNER_DIR).table.to_pylist())
        snapshots = (s.get("learner") or {}).get("snapshots", [])
        for w in s.get("whatif") or []:
            whatifs.append({**w, "png": _drawn(f"what-if {w['id']} curves", lambda w=w: _whatif_png(d, w["id"]), late)})
    timeline = _drawn("worker timeline", lambda: _timeline(report), late)
    if late:
        report.skipped.extend(x for x in late if x not in report.skipped)
    env = jinja2.Environment(autoescape=True)
    modules = findings_by_module(report.events, diagnosis)
    return env.from_string(TEMPLATE).render(
        target=report.target, verdict=report.verdict, kind=verdict_kind(report.verdict), counts=report.by_status(),
        not_judged=report.not_judged, life=life_line(report.completeness), gaps=report.gaps(), numbers=numbers,
        dx=html_context(diagnosis), modules=modules, codes=code_entries(e["code"] for _, evs in modules for e in evs), timeline=timeline,
        curves=curves, signals=signals, heatmaps=heatmaps,
        gradients=gradients, snapshots=snapshots, whatifs=whatifs, cluster_modules=cluster_modules,
        how_to_read=HOW_TO_READ, cost=cost_table(((report.completeness or {}).get("stop") or {}).get("cost")))
