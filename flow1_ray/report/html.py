"""The run as one self-contained HTML page: verdict, findings with their evidence and advice,
a worker timeline, the curves, the heatmaps and the learner tables.

Everything the page shows is inside the file (plots as embedded PNGs, no script, no font,
no stylesheet from the network), so it opens from disk anywhere. Every string that came
from the run -- env messages, exception text, stack frames, env ids -- goes through Jinja2's
autoescaping: an event whose message holds ``<script>`` shows that text and runs nothing.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from ..store import HEATMAPS_DIR, LEARNER_DIR, METRICS_DIR, Location, load_learner, load_metrics
from .model import Report
from .views import STATE_COLOURS, findings_by_module, timeline_marks

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flow1 report: {{ target }}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{font-size:1.4rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.verdict{font-size:1.2rem;font-weight:600;padding:.5rem 1rem;border-radius:4px;display:inline-block}
.PASS{background:#e8f6ec;color:#1e7b34} .WARN{background:#fff4e0;color:#9a5b00} .FAIL{background:#fde8e6;color:#a61b0f}
table{border-collapse:collapse;width:100%;font-size:.9rem} td,th{border:1px solid #ddd;padding:.3rem .5rem;vertical-align:top;text-align:left}
th{background:#f5f5f5} pre{white-space:pre-wrap;font-size:.8rem;margin:.2rem 0;max-height:16rem;overflow:auto}
img{max-width:100%} .muted{color:#777} details summary{cursor:pointer}
</style></head><body>
<h1>flow1 report: {{ target }}</h1>
<p><span class="verdict {{ status }}" id="verdict">{{ status }}</span>
 {{ counts.FAIL }} FAIL, {{ counts.WARN }} WARN, {{ counts.PASS }} PASS</p>
<p class="muted" id="numbers">{% for k, v in numbers %}{{ k }}: {{ v }}{% if not loop.last %} · {% endif %}{% endfor %}</p>

<h2>Findings</h2>
{% if not modules %}<p>No WARN or FAIL.</p>{% endif %}
{% for module, events in modules %}
<h3>{{ module }}</h3>
<table class="findings"><tr><th>time (UTC)</th><th>status</th><th>code</th><th>where</th><th>message</th></tr>
{% for e in events %}<tr class="{{ e.status }}"><td>{{ e.ts }}</td><td>{{ e.status }}</td><td>{{ e.code }}</td>
<td>{{ e.where }}</td><td>{{ e.message }}
{% if e.knobs %}<ul>{% for k in e.knobs %}<li><code>{{ k.line }}</code> ({{ k.knob }} {{ k.current }} &rarr; {{ k.value }}: {{ k.why }})</li>{% endfor %}</ul>{% endif %}
<details><summary>evidence</summary><pre>{{ e.evidence }}</pre></details></td></tr>{% endfor %}
</table>
{% endfor %}

<h2>Workers</h2>
{% if timeline %}<img id="timeline" alt="worker timeline" src="data:image/png;base64,{{ timeline }}">
{% else %}<p>No worker died, stalled or restarted.</p>{% endif %}

<h2>Training curves</h2>
{% if curves %}<img id="curves" alt="training curves" src="data:image/png;base64,{{ curves }}">
{% else %}<p class="muted">No metrics in this run directory.</p>{% endif %}

<h2>State clusters x actions</h2>
{% for name, png in heatmaps %}<figure><img alt="{{ name }}" src="data:image/png;base64,{{ png }}">
<figcaption>{{ name }}</figcaption></figure>{% else %}<p class="muted">No heatmap.</p>{% endfor %}

{% if gradients %}<h2>Gradients (last trace)</h2>
<table><tr><th>module</th><th>layer</th><th>gradient RMS</th><th>iteration</th></tr>
{% for g in gradients %}<tr><td>{{ g.module_id }}</td><td>{{ g.layer }}</td><td>{{ g.grad_rms }}</td><td>{{ g.iteration }}</td></tr>{% endfor %}
</table>{% endif %}
{% if snapshots %}<h2>Learner snapshots</h2><ul>{% for s in snapshots %}<li>{{ s }}</li>{% endfor %}</ul>{% endif %}
</body></html>
"""


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


def _curves(d: Location) -> str | None:
    """The return and its EMA per iteration; the learner's entropy ratio and KL per module."""
    rows = load_metrics(d).to_pylist() if (d / METRICS_DIR).is_dir() else []
    learner = [r for r in load_learner(d).to_pylist() if r.get("kind") == "module"] \
        if (d / LEARNER_DIR).is_dir() else []
    if not rows and not learner:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    rows.sort(key=lambda r: r.get("iteration") or 0)
    it = [r.get("iteration") for r in rows]
    axes[0].plot(it, [r.get("episode_return_mean") for r in rows], label="return (mean of 100 episodes)")
    if any("flow1/learner/return_ema" in r for r in rows):
        axes[0].plot(it, [r.get("flow1/learner/return_ema") for r in rows], label="EMA (alpha 0.99 per episode)")
    axes[0].set_title("episode return")
    axes[0].legend(fontsize=7)
    for mid in sorted({r["module_id"] for r in learner}):
        mine = sorted((r for r in learner if r["module_id"] == mid), key=lambda r: r["iteration"])
        axes[1].plot([r["iteration"] for r in mine], [r.get("entropy_ratio") for r in mine], label=mid)
        axes[2].plot([r["iteration"] for r in mine], [r.get("mean_kl_loss") for r in mine], label=mid)
    axes[1].set_title("entropy / max entropy")
    axes[2].set_title("KL (old -> new policy)")
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # iterations, not 1.5
    if learner:
        axes[1].legend(fontsize=7)
    return _png(fig)


def render_html(report: Report, run_dir: "str | Location | None" = None) -> str:
    """The report as one HTML page (everything embedded; run strings escaped)."""
    import jinja2

    d = Location(run_dir) if run_dir is not None else None
    s = report.summary
    numbers = [(k, s[k]) for k in ("iterations", "env_steps", "episode_return_mean") if s.get(k) is not None]
    for k, v in (s.get("workers") or {}).items():
        numbers.append((f"workers {k}", v))
    numbers = [(k, f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else v)
               for k, v in numbers]
    heatmaps, gradients, snapshots = [], [], []
    curves = None
    if d is not None:
        for name in sorted(n for n in (d / HEATMAPS_DIR).listdir() if n.endswith(".png")):
            heatmaps.append((name, base64.b64encode((d / HEATMAPS_DIR / name).read_bytes()).decode("ascii")))
        curves = _curves(d)
        if (d / LEARNER_DIR).is_dir():
            grads = [r for r in load_learner(d).to_pylist() if r.get("kind") == "grad"]
            last = max((r["iteration"] for r in grads), default=None)
            gradients = [r for r in grads if r["iteration"] == last]
        snapshots = (s.get("learner") or {}).get("snapshots", [])
    env = jinja2.Environment(autoescape=True)
    return env.from_string(TEMPLATE).render(
        target=report.target, status=report.status, counts=report.by_status(), numbers=numbers,
        modules=findings_by_module(report.events), timeline=_timeline(report), curves=curves, heatmaps=heatmaps,
        gradients=gradients, snapshots=snapshots)
