"""The diagnosis (``report.json["diagnosis"]``, ``diagnosis.json``) as the console's lines and
the report's top section: what to read first, before the list of findings."""

from __future__ import annotations

from typing import Any

_MAX_MESSAGE = 240


def _short(text: Any, n: int = _MAX_MESSAGE) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[: n - 3] + "..."


def where_text(p: dict) -> str:
    at = [f"iteration {p['iteration']}"] if p.get("iteration") is not None else []
    at += [f"worker {p['worker_index']}"] if p.get("worker_index") is not None else []
    at += [f"module {p['module_id']}"] if p.get("module_id") else []
    return f" at {', '.join(at)}" if at else ""


def symptom_text(p: dict) -> str:
    """The primary symptom's message without what the diagnosis says beside it: the module it
    names (said in :func:`where_text`) and its own advice (the change, said once below)."""
    text = str(p.get("message") or "")
    if p.get("module_id"):
        text = text.removeprefix(f"module {p['module_id']!r}: ")
    return text.split("; try ", 1)[0]


def _signals(c: dict) -> str:
    return ", ".join(dict.fromkeys(s["signal"] for s in c.get("for") or []))


def standing_text(c: dict) -> str:
    out = c["standing"]
    if c.get("for") and c["standing"] != "observed":
        out += f" ({_signals(c)})"
    if c.get("contradicted"):
        out += f"; contradicted by {', '.join(dict.fromkeys(s['signal'] for s in c.get('against') or []))}"
    if (c.get("tested") or {}).get("p_better") is not None:
        out += f"; p {c['tested']['p_better']:.3g}"
    return out


def console_lines(d: dict | None) -> list[str]:
    """Three to six lines: the primary symptom, its most likely cause and standing, the change,
    its expected effect, what follows from it and what else was found; one for a healthy run;
    none for a short or unjudged one (its gap line says why)."""
    if not d:
        return []
    if d.get("state") != "sick" or not d.get("primary"):
        # a short or unjudged run's line is the verdict's own gap line already: not said twice
        return [f"diagnosis: {_short(d.get('line'))}"] if d.get("state") == "healthy" else []
    p, causes = d["primary"], d.get("causes") or []
    out = [f"diagnosis: {p['code']} ({p['status']}){where_text(p)}: {_short(symptom_text(p), 200)}"]
    top = causes[0] if causes else None
    if top is not None and top["standing"] != "observed":
        out.append(f"  most likely cause: {_short(top['text'], 160)} -- {standing_text(top)}")
    if top is not None and top.get("change"):
        ch = top["change"]
        out.append(f"  change: {ch['before']}  ->  {ch['after']}")
        out.append(f"  expected effect: {_short(top.get('expected'), 200)}")
    if d.get("reproduce"):
        out.append(f"  make it happen again here: {d['reproduce']}")
    chain, others = d.get("chain") or [], d.get("others") or []
    tail = []
    if chain:
        tail.append(f"follows from it: {', '.join(dict.fromkeys(c['code'] for c in chain))}")
    if others:
        tail.append(f"also found: {', '.join(dict.fromkeys(c['code'] for c in others))}")
    if tail:
        out.append("  " + "; ".join(tail))
    return out


def markdown_lines(d: dict | None, md) -> list[str]:
    """The report's "Diagnosis" section (every run string through ``md``)."""
    if not d:
        return []
    out = ["## Diagnosis", ""]
    if d.get("state") != "sick" or not d.get("primary"):
        return out + [md(d.get("line")), ""]
    p = d["primary"]
    out += [f"**Primary symptom: {md(p['code'])} ({md(p['status'])}){md(where_text(p))}**: {md(symptom_text(p))}", ""]
    causes = d.get("causes") or []
    if causes and causes[0]["standing"] != "observed":
        out += ["| rank | cause | standing | not assessable |", "|---|---|---|---|"]
        out += [f"| {c['rank']} | {md(c['text'])} | {md(standing_text(c))} | {md('; '.join(c.get('not_assessable') or []))} |"
                for c in causes]
        out.append("")
    top = causes[0] if causes else None
    if top is not None and top.get("change"):
        ch = top["change"]
        out += [f"The change to make ({md(ch.get('why'))}):", "", "```python", f"# before: {ch['before']}",
                ch["after"], "```", ""]
        sched = ch.get("schedule")
        if sched and sched.get("after_line"):
            out += [f"The run set {md(ch['knob'])} as a schedule: {md(sched['value_at_step'])} at step "
                    f"{md(sched['step'])}; the schedule scaled to the advised value there:", "", "```python",
                    sched["after_line"], "```", ""]
        out += [f"Expected effect: {md(top.get('expected'))}", ""]
    if d.get("reproduce"):
        out += ["Make it happen again on this machine (the flight recorder's dump):", "", "```bash",
                d["reproduce"], "```", ""]
    if d.get("chain"):
        out += ["Follows from it (its advice waits for this one):", ""]
        out += [f"- {md(c['code'])} ({md(c['status'])}{md(where_text(c))}): {md(c['why'])}" for c in d["chain"]] + [""]
    if d.get("others"):
        out += ["Also found (not explained by it):", ""]
        out += [f"- {md(c['code'])} ({md(c['status'])}{md(where_text(c))})" for c in d["others"]] + [""]
    return out


def html_context(d: dict | None) -> dict | None:
    """The diagnosis as the HTML page's template reads it (None: no diagnosis to show)."""
    if not d:
        return None
    out = dict(d)
    causes = d.get("causes") or []
    out["causes"] = [dict(c, standing_text=standing_text(c)) for c in causes]
    out["ranked"] = bool(causes) and causes[0]["standing"] != "observed"
    out["top"] = causes[0] if causes else None
    out["where"] = where_text(d["primary"]) if d.get("primary") else ""
    out["symptom"] = symptom_text(d["primary"]) if d.get("primary") else ""
    out["chain"] = [dict(c, where=where_text(c)) for c in d.get("chain") or []]
    out["others"] = [dict(c, where=where_text(c)) for c in d.get("others") or []]
    return out


#: the standings whose signs are not marked on the curves (nothing of the run points at them)
_UNMARKED = ("not assessable", "not supported", "tested: did not hold", "tested: harmful")
#: the colours of the marks: the primary symptom's interval, its most likely cause's signs
SYMPTOM_COLOUR, CAUSE_COLOUR = "#d62728", "#ff7f0e"


def anomaly_marks(d: dict | None) -> list[dict]:
    """What the curves of the report and the panel mark, by iteration: the primary symptom's
    interval (``kind`` "symptom": from the iteration it was first raised at to the last, a band)
    and where each sign of its most likely cause began (``kind`` "cause": a line), each with
    ``code``, ``start`` and ``end``. None for a run that is not sick, or whose symptom has no
    iteration (a finding of the env checker, a death before the first iteration)."""
    p = (d or {}).get("primary") or {}
    if (d or {}).get("state") != "sick" or not isinstance(p.get("iteration"), int):
        return []
    end = p.get("last_iteration") if isinstance(p.get("last_iteration"), int) else p["iteration"]
    out = [{"kind": "symptom", "code": p["code"], "start": p["iteration"], "end": max(end, p["iteration"])}]
    top = ((d or {}).get("causes") or [None])[0]
    if top and top.get("standing") not in _UNMARKED:
        for s in top.get("for") or []:
            if isinstance(s.get("iteration"), int) and s.get("code") and not any(m["code"] == s["code"] for m in out):
                out.append({"kind": "cause", "code": s["code"], "start": s["iteration"], "end": s["iteration"]})
    return out


def mark_legend(marks: list[dict]) -> dict[str, str]:
    """The legend's entry for each kind of mark: one for the symptom's band, one for all the
    cause's lines."""
    out = {}
    for m in marks:
        if m["kind"] == "symptom":
            span = f"{m['start']}" if m["end"] == m["start"] else f"{m['start']}-{m['end']}"
            out["symptom"] = f"{m['code']}, the primary symptom (iteration {span})"
    signs = [f"{m['code']} ({m['start']})" for m in marks if m["kind"] == "cause"]
    if signs:
        out["cause"] = f"its cause's signs began: {', '.join(signs)}"
    return out


#: a finding a flight-recorder entry of the same process replays: its own code, or the death or
#: stall the probe wrote of what the runner dumped
_REPLAYED_BY = {"WORKER_STALLED": ("ENV_HUNG",), "WORKER_DIED": ("ENV_CRASHED", "ENV_HUNG", "OBS_NAN_INF"),
                "ENV_HUNG": ("ENV_HUNG",)}


#: findings the driver makes of another process's dump (the Learner's NaN guard): any entry of the code
_ANY_PROCESS = ("LEARNER_NONFINITE",)


def replay_for(p: dict | None, heads: list[dict] | None, run_dir: str) -> str | None:
    """``flow1 replay RUN/repro/<entry>`` for the primary symptom ``p`` where the run holds a
    flight-recorder entry of its process (rundir/repro.py's ``entry_heads``), else None."""
    if not p or not heads:
        return None
    codes = (p.get("code"),) + _REPLAYED_BY.get(str(p.get("code")), ())
    for code in codes:
        for h in heads:
            if code in _ANY_PROCESS and h.get("finding") == code:   # said by the driver of a Learner's dump
                return f"flow1 replay {run_dir.rstrip('/')}/{h['entry']}"
            if h.get("finding") == code and h.get("worker_index") == p.get("worker_index") \
                    and (p.get("pid") is None or h.get("pid") in (None, p.get("pid"))):
                return f"flow1 replay {run_dir.rstrip('/')}/{h['entry']}"
    return None
