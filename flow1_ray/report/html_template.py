"""The HTML report's Jinja2 template (rendered by :func:`flow1_ray.report.html.render_html` with
autoescaping: every string from the run shows as text)."""

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flow1 report: {{ target }}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{font-size:1.4rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.verdict{font-size:1.2rem;font-weight:600;padding:.5rem 1rem;border-radius:4px;display:inline-block}
.PASS{background:#e8f6ec;color:#1e7b34} .WARN{background:#fff4e0;color:#9a5b00} .FAIL{background:#fde8e6;color:#a61b0f}
.NOT_JUDGED{background:#eceff1;color:#37474f} .GAPS{background:#fff8e1;color:#7a5c00}
table{border-collapse:collapse;width:100%;font-size:.9rem} td,th{border:1px solid #ddd;padding:.3rem .5rem;vertical-align:top;text-align:left}
th{background:#f5f5f5} pre{white-space:pre-wrap;font-size:.8rem;margin:.2rem 0;max-height:16rem;overflow:auto}
img{max-width:100%} .muted{color:#777} details summary{cursor:pointer}
td.n{white-space:nowrap} img.thumb{width:96px;height:auto;image-rendering:pixelated;border:1px solid #ccc} img.clustermap{max-width:640px}
</style></head><body>
<h1>flow1 report: {{ target }}</h1>
<p><span class="verdict {{ kind }}" id="verdict">{{ verdict }}</span>
 {{ counts.FAIL }} FAIL, {{ counts.WARN }} WARN, {{ counts.PASS }} PASS</p>
{% if not_judged %}<p id="not-judged">Not judged: {{ not_judged }}</p>{% endif %}
{% if life %}<p class="muted" id="life">Run: {{ life }}</p>{% endif %}
{% if gaps %}<h2>Gaps</h2><p>What flow1 did not see whole:</p>
<ul id="gaps">{% for g in gaps %}<li>{{ g }}</li>{% endfor %}</ul>{% endif %}
<p class="muted" id="numbers">{% for k, v in numbers %}{{ k }}: {{ v }}{% if not loop.last %} · {% endif %}{% endfor %}</p>

<h2>Diagnosis</h2>
<section id="diagnosis">{% if dx.state != "sick" %}<p>{{ dx.line }}</p>{% else %}
<p><b>Primary symptom:</b> <span class="{{ dx.primary.status }}">{{ dx.primary.status }}</span> <b>{{ dx.primary.code }}</b>{{ dx.where }}: {{ dx.symptom }}</p>
{% if dx.ranked %}<table id="causes"><tr><th>rank</th><th>cause</th><th>standing</th><th>not assessable</th></tr>
{% for c in dx.causes %}<tr><td>{{ c.rank }}</td><td>{{ c.text }}</td><td>{{ c.standing_text }}</td><td>{{ c.not_assessable|join("; ") }}</td></tr>{% endfor %}</table>{% endif %}
{% if dx.top and dx.top.change %}<p><b>The change to make</b> ({{ dx.top.change.why }}):</p>
<pre id="change"># before: {{ dx.top.change.before }}
{{ dx.top.change.after }}</pre>
{% if dx.top.change.schedule and dx.top.change.schedule.after_line %}<p>The run set {{ dx.top.change.knob }} as a schedule: {{ dx.top.change.schedule.value_at_step }} at step {{ dx.top.change.schedule.step }}; scaled to the advised value there:</p><pre>{{ dx.top.change.schedule.after_line }}</pre>{% endif %}
<p><b>Expected effect:</b> {{ dx.top.expected }}</p>{% endif %}
{% if dx.chain %}<p>Follows from it (its advice waits for this one):</p>
<ul id="chain">{% for c in dx.chain %}<li>{{ c.code }} ({{ c.status }}{{ c.where }}): {{ c.why }}</li>{% endfor %}</ul>{% endif %}
{% if dx.others %}<p>Also found (not explained by it):</p>
<ul id="others">{% for c in dx.others %}<li>{{ c.code }} ({{ c.status }}{{ c.where }})</li>{% endfor %}</ul>{% endif %}
{% endif %}</section>

<h2>Findings</h2>
{% if not modules %}<p>No WARN or FAIL.</p>{% endif %}
{% for module, events in modules %}
<h3>{{ module }}</h3>
<table class="findings"><tr><th>time (UTC)</th><th>status</th><th>code</th><th>where</th><th>message</th></tr>
{% for e in events %}<tr class="{{ e.status }}"><td>{{ e.ts }}</td><td>{{ e.status }}</td><td><a href="#{{ e.anchor }}">{{ e.code }}</a></td>
<td>{{ e.where }}</td><td>{{ e.message }}
{% for c in e.led_to %}<p class="led-to">led to: {{ c }}</p>{% endfor %}
{% if e.follows %}<p class="follows">follows from {{ e.follows }} (see the diagnosis): its advice waits for that one</p>{% endif %}
{% if e.knobs %}<ul>{% for k in e.knobs %}<li><code>{{ k.line }}</code> ({{ k.knob }} {{ k.current }} &rarr; {{ k.value }}: {{ k.why }})</li>{% endfor %}</ul>{% endif %}
<details><summary>evidence</summary><pre>{{ e.evidence }}</pre>
<p class="muted">What {{ e.code }} means: <a href="#{{ e.anchor }}">below</a>; in flow1's docs, <code>{{ e.reference }}</code>.</p></details></td></tr>{% endfor %}
</table>
{% endfor %}

<h2>Workers</h2>
{% if timeline %}<img id="timeline" alt="worker timeline" src="data:image/png;base64,{{ timeline }}">
{% else %}<p>No worker died, stalled or restarted.</p>{% endif %}

<h2>Training curves</h2>
{% if curves %}<img id="curves" alt="training curves" src="data:image/png;base64,{{ curves }}">
{% else %}<p class="muted">No metrics in this run directory.</p>{% endif %}
{% if signals %}<h3>The learner rules' signals</h3>
<img id="signals" alt="the learner rules' signals" src="data:image/png;base64,{{ signals }}">{% endif %}

<h2>State clusters x actions</h2>
{% for m in cluster_modules %}<section class="clusters" id="clusters-{{ loop.index }}">
<h3>{{ m.module }}: the flagged clusters of the last snapshot{% if m.iteration is not none %} (iteration {{ m.iteration }}){% endif %}</h3>
<p class="muted">{{ how_to_read }}</p>
{% if m.flagged %}<table class="clusters"><tr><th>cluster</th><th>verdict</th><th>states</th><th>top action</th><th>what sets its states apart (centroid vs the mean of all states)</th>{% if m.thumbs %}<th>a state of it</th>{% endif %}</tr>
{% for c in m.flagged %}<tr class="cluster"><td>{{ c.cluster }}</td><td>{{ c.verdict }}</td><td class="n">{{ c.size }} ({{ "%.1f"|format(100 * c.share) }} %)</td>
<td>{% if c.top_action is not none %}{{ c.top_action }}{% if c.p_top is not none %} at {{ "%.2f"|format(c.p_top) }}{% endif %}{% endif %}</td>
<td class="description">{{ c.description or "(not recorded: a run written before cluster descriptions)" }}</td>
{% if m.thumbs %}<td>{% if c.png %}<img class="thumb" alt="a state of cluster {{ c.cluster }}" src="data:image/png;base64,{{ c.png }}">{% else %}<span class="muted">no frame kept</span>{% endif %}</td>{% endif %}</tr>{% endfor %}
</table>{% else %}<p id="no-flagged-{{ loop.index }}">No cluster verdict was raised as a WARN{% if m.all|rejectattr("verdict", "equalto", "OK")|list %}: the verdicts in the list of every cluster are informational (a policy still undecided, or decided clusters too few to judge){% endif %}.</p>{% endif %}
{% if m.map %}<figure><img class="clustermap" alt="cluster map of {{ m.module }}" src="data:image/png;base64,{{ m.map }}">
<figcaption>The clusters on a plane (the first two principal components of their centroids, standardised features): clusters close together hold similar states; size = states, colour = verdict.</figcaption></figure>{% endif %}
{% if m.described %}<details><summary>every cluster of this snapshot ({{ m.all|length }})</summary>
<table class="clusters-all"><tr><th>cluster</th><th>verdict</th><th>states</th><th>what sets its states apart</th></tr>
{% for c in m.all %}<tr><td>{{ c.cluster }}</td><td>{{ c.verdict }}</td><td>{{ c.size }}</td><td>{{ c.description or "" }}</td></tr>{% endfor %}
</table></details>{% endif %}
</section>{% endfor %}
{% for name, png in heatmaps %}<figure><img alt="{{ name }}" src="data:image/png;base64,{{ png }}">
<figcaption>{{ name }}</figcaption></figure>{% else %}<p class="muted">No heatmap.</p>{% endfor %}

{% if gradients %}<h2>Gradients (last trace)</h2>
<table><tr><th>module</th><th>layer</th><th>gradient RMS</th><th>iteration</th></tr>
{% for g in gradients %}<tr><td>{{ g.module_id }}</td><td>{{ g.layer }}</td><td>{{ g.grad_rms }}</td><td>{{ g.iteration }}</td></tr>{% endfor %}
</table>{% endif %}
{% for w in whatifs %}<h2 id="whatif-{{ loop.index }}">What-if {{ w.id }}: the advice tested</h2>
<p class="muted">From {{ w.checkpoint }}{% if w.iteration %} (iteration {{ w.iteration }}){% endif %}, {{ w.seeds }} seeds x {{ w.iterations }} iterations a branch; each branch's curve against the baseline's (the mean over seeds, the band their range).</p>
<table class="whatif"><tr><th>branch</th><th>finding</th><th>verdict</th><th>why</th></tr>
{% for v in w.verdicts %}<tr><td><code>{{ v.branch }}</code></td><td>{{ v.finding or "(the return)" }}</td><td>{{ v.verdict }}</td>
<td>{{ v.why }}{% for r in v.readback %}<br><span class="muted">read back: {{ r }}</span>{% endfor %}</td></tr>{% endfor %}
{% for f in w.failed %}<tr><td colspan="4">failed: {{ f }}</td></tr>{% endfor %}
</table>
{% if w.png %}<img alt="what-if {{ w.id }} curves" src="data:image/png;base64,{{ w.png }}">{% endif %}
{% endfor %}
{% if cost %}<h2>flow1's own cost</h2><p class="muted">{{ cost[0] }}</p>
<table><tr><th>feature</th><th>CPU per env step</th><th>share of the runner's</th><th>budget</th></tr>
{% for r in cost[1] %}<tr><td>{{ r[0] }}</td><td>{{ r[1] }}</td><td>{{ r[2] }}</td><td>{{ r[3] }}</td></tr>{% endfor %}</table>{% endif %}
{% if snapshots %}<h2>Learner snapshots</h2><ul>{% for s in snapshots %}<li>{{ s }}</li>{% endfor %}</ul>{% endif %}
{% if codes %}<h2 id="codes">What the codes mean</h2>
<p class="muted">Each code of the findings above, as flow1's rules declare it (the trigger with the default thresholds; a finding's evidence holds the thresholds it was judged with). The full entry of each is in flow1's docs, on the page named.</p>
<dl class="codes">{% for c in codes %}<dt id="{{ c.anchor }}"><b>{{ c.code }}</b>{% if c.status %} ({{ c.module }}, default {{ c.status }}){% endif %}</dt>
<dd>{% if c.trigger %}Raised when: {{ c.trigger }}.{% else %}Not a code of this flow1 version.{% endif %}
{% if c.knobs %} Knobs its advice may turn: {% for k in c.knobs %}<code>{{ k }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.{% endif %}
<br><span class="muted">flow1's docs: <code>{{ c.reference }}</code></span></dd>{% endfor %}</dl>{% endif %}
</body></html>
"""
