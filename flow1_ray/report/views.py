"""What the HTML report and the live panel show, as plain data (no HTML, no plotting).

Both views read a run the way a person reasons about it, in four parts: the result, the cause
(findings with their evidence), the hypothesis to test (knob values computed from the run's
config, the frame an env raised in, the batches snapshotted), the risk (workers, restarts,
contention, memory, dropped samples). Strings stay raw here; each renderer escapes them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from ..common import codes as C
from ..common import schema as S
from ..common.events import Event
from ..checks.run.death_cause import consequences, led_to

#: event codes that change a worker's state, for the worker timeline
TIMELINE = {C.WORKER_DIED: "dead", C.LEARNER_DIED: "dead", C.WORKER_STALLED: "stalled",
            C.LEARNER_STALLED: "stalled", C.WORKER_RESTARTED: "restarted", C.ENV_CRASHED: "crashed"}
STATE_COLOURS = {"dead": "#c0392b", "stalled": "#e67e22", "restarted": "#2e86c1", "crashed": "#8e44ad"}
#: codes that belong to the risk quadrant's "contention" and "memory" lines
CONTENTION_CODES = (C.RESOURCE_CONTENTION, C.ACTOR_UNPLACEABLE)
MEMORY_CODES = (C.MEMORY_LEAK_SUSPECTED, C.MEMORY_GROWTH_NOT_ENV)
EVIDENCE_CHARS = 6000


def finding_row(e: Event) -> dict[str, Any]:
    """One finding for display: its knobs apart, the rest of the evidence as indented JSON."""
    ev = dict(e.evidence)
    knobs = knob_list(ev.pop("knobs", None)) if isinstance(ev.get("knobs"), list) else None
    return {"ts": e.ts.strftime("%Y-%m-%d %H:%M:%S"), "status": e.status, "code": e.code, "module": e.module,
            "where": e.where().strip(" []"), "message": e.message, "knobs": knobs or [],
            "evidence": json.dumps(ev, indent=1, default=str)[:EVIDENCE_CHARS],
            "reference": C.reference(e.code), "anchor": "code-" + C.anchor(e.code)}


def code_entries(codes: Iterable[str]) -> list[dict[str, Any]]:
    """What each code means, for the views that show it beside a run's findings (the report's
    list of codes, the panel's line under a finding): its entry in the docs, its default
    module and status, when it is raised (the trigger with the default thresholds) and the
    knobs its advice may turn. A code this flow1 does not know (a run written by another
    version) gets its docs entry and no text."""
    from ..checks.catalogue import rules

    known = rules()
    out = []
    for code in dict.fromkeys(codes):
        r = known.get(code)
        out.append({"code": code, "anchor": "code-" + C.anchor(code), "reference": C.reference(code),
                    "module": (r.module or "(the module checked)") if r else "", "status": r.status if r else "",
                    "trigger": r.text() if r else "", "knobs": list(r.knobs) if r else []})
    return out


def knob_list(knobs: Any) -> list[dict]:
    """The knob entries of a finding's evidence that are what the advice writes (dicts):
    evidence is read from the run, and may hold anything."""
    return [k for k in knobs if isinstance(k, dict)] if isinstance(knobs, list) else []


def is_finding(e: Event) -> bool:
    return e.status != C.PASS or e.advisory


def findings_by_module(events: Iterable[Event], diagnosis: dict | None = None) -> list[tuple[str, list[dict]]]:
    """WARN, FAIL and advisory events grouped by module, each group in time order; a finding
    that led to a death says so (``led_to``); one that follows from the diagnosis's primary
    symptom says so (``follows``: the primary's code) and keeps its advice back."""
    events = list(events)
    by_origin = consequences(events)
    chain = {(c.get("code"), c.get("ts")) for c in (diagnosis or {}).get("chain") or []}
    primary = ((diagnosis or {}).get("primary") or {}).get("code")
    out: dict[str, list[dict]] = {}
    for e in events:
        if is_finding(e):
            row = {**finding_row(e), "led_to": led_to(e, by_origin)}
            if (e.code, e.ts.isoformat()) in chain:
                row.update(follows=primary, knobs=[])
            out.setdefault(e.module, []).append(row)
    return sorted(out.items())


def current_findings(events: list[Event], limit: int = 30) -> list[dict]:
    """The newest finding of each code and place (FAIL first, then newest first), with how
    many times it was raised: what is wrong now, without a wall of repeats."""
    latest: dict[tuple, tuple[Event, int]] = {}
    for e in events:
        if not is_finding(e):
            continue
        key = (e.code, e.module, e.worker_index if e.code in TIMELINE or e.module == C.WORKER else None)
        n = latest.get(key, (e, 0))[1] + 1
        latest[key] = (e, n)
    ranked = sorted(latest.values(), key=lambda p: (-C.STATUS_RANK[p[0].status], -p[0].ts.timestamp()))
    by_origin = consequences(events)
    return [{**finding_row(e), "count": n, "led_to": led_to(e, by_origin)} for e, n in ranked[:limit]]


def hypotheses(events: list[Event], snapshots: list[str]) -> list[dict]:
    """What to try or look at next, newest first, one line per knob or lead:
    ``kind`` "knob" (the knob, its value in this run, the value to try, why, the config
    line), "frame" (the frame an env raised in, or a worker hung at), or "snapshot" (a batch to replay)."""
    seen: set[tuple] = set()
    out: list[dict] = []
    for e in sorted((e for e in events if e.status != C.PASS), key=lambda e: -e.ts.timestamp()):
        knobs = knob_list(e.evidence.get("knobs"))
        for k in knobs:
            key = ("knob", e.code, k.get("knob"))
            if key not in seen:
                seen.add(key)
                out.append({"kind": "knob", "code": e.code, "status": e.status, "knob": str(k.get("knob")),
                            "current": k.get("current"), "value": k.get("value"), "why": str(k.get("why", "")),
                            "line": str(k.get("line", "")), "iteration": e.iteration})
        frame = e.evidence.get("frame") or e.evidence.get("top_frame")   # raised in / hung at
        if not knobs and isinstance(frame, str) and frame:
            key = ("frame", e.code, frame)
            if key not in seen:
                seen.add(key)
                error = e.evidence.get("error") or e.evidence.get("exception") or ""
                out.append({"kind": "frame", "code": e.code, "status": e.status, "frame": frame,
                            "error": str(error)[:300], "where": e.where().strip(" []")})
    for s in reversed(snapshots):
        out.append({"kind": "snapshot", "name": s,
                    "what": "the train batch and per-layer gradient RMS at that moment (.npy, allow_pickle=False)"})
    return out


def timeline_marks(events: Iterable[Event]) -> list[dict]:
    """Each worker's (EnvRunner's or Learner's) state changes: who, state, when."""
    return [{"who": ("learner " if e.code.startswith("LEARNER") else "worker ") + str(e.worker_index),
             "state": TIMELINE[e.code], "ts": e.ts, "code": e.code, "pid": e.pid}
            for e in events if e.code in TIMELINE]


def risk(last: dict, code_counts: dict[str, int], findings: list[Event]) -> list[dict]:
    """The risk quadrant's lines: label, value, level ("ok" | "warn" | "fail").

    From the last metrics row (the counts the monitor held at that iteration) and the
    findings (contention, memory), so a run that has not finished an iteration yet still
    shows its incidents."""
    def level(bad: bool, worse: bool = False) -> str:
        return "fail" if worse else "warn" if bad else "ok"

    deaths = sum(code_counts.get(c, 0) for c in (C.WORKER_DIED, C.ENV_CRASHED))
    stalls = code_counts.get(C.WORKER_STALLED, 0)
    w = {k: last.get(S.metric("worker", k)) for k in (S.ALIVE, S.STALLED, S.DEAD, "restarts")}
    lines = [{"label": "EnvRunners", "value": (f"{_n(w['alive'])} alive · {_n(w['stalled'])} stalled · "
                                                f"{_n(w['dead'])} dead" if w["alive"] is not None else "no iteration yet"),
              "level": level(bool(w["stalled"]), bool(w["dead"]))},
             {"label": "restarts", "value": _n(w["restarts"]), "level": level(bool(w["restarts"]))},
             {"label": "deaths and env crashes", "value": str(deaths), "level": level(False, bool(deaths))},
             {"label": "stalls", "value": str(stalls), "level": level(bool(stalls))}]
    lr = {k: last.get(S.metric("learners", k)) for k in (S.ALIVE, S.STALLED, S.DEAD)}
    if any(v for v in lr.values()) or code_counts.get(C.LEARNER_DIED) or code_counts.get(C.LEARNER_STALLED):
        lines.append({"label": "Learner actors", "value": f"{_n(lr['alive'])} alive · {_n(lr['stalled'])} stalled · "
                                                          f"{_n(lr['dead'])} dead",
                      "level": level(bool(lr["stalled"] or code_counts.get(C.LEARNER_STALLED)),
                                     bool(lr["dead"] or code_counts.get(C.LEARNER_DIED)))})
    contention = [e for e in findings if e.code in CONTENTION_CODES]
    lines.append({"label": "contention", "value": contention[-1].message if contention else "none seen",
                  "level": level(bool(contention), any(e.status == C.FAIL for e in contention))})
    memory = [e for e in findings if e.code in MEMORY_CODES]
    mem = []
    if _is_number(last.get(S.MEMORY_NODE_PERCENT)):
        mem.append(f"node {last[S.MEMORY_NODE_PERCENT]:.0f} % used")
    if _is_number(last.get(S.MEMORY_RUNNERS_RSS_MB)):
        mem.append(f"EnvRunners {last[S.MEMORY_RUNNERS_RSS_MB]:.0f} MB RSS")
    if memory:
        mem.append(memory[-1].message)
    lines.append({"label": "memory", "value": "; ".join(mem) or "no reading yet",
                  "level": level(any(e.status != C.PASS for e in memory))})
    dropped = last.get(S.SAMPLES_DROPPED)
    # flow1's own loss (diagnostic batches under back-pressure), not the run's: warn only
    # where the Recorder raised SAMPLES_DROPPED
    lines.append({"label": "samples dropped", "value": _n(dropped),
                  "level": level(bool(code_counts.get(C.SAMPLES_DROPPED)))})
    return lines


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _n(v: Any) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


#: the learner columns the fixed charts draw (entropy ratio, KL); every other column a
#: learner rule's View names is drawn among "the learner rules' signals"
CHARTED = (S.ENTROPY_RATIO, S.MEAN_KL)


def rule_signals() -> list[tuple[str, str, list[str]]]:
    """(column, title, codes) of every learner-table column a rule's View charts beyond
    :data:`CHARTED`, in catalogue order: a new rule's signal is drawn without an edit here."""
    from ..checks.catalogue import rules

    out: dict[str, tuple[str, list[str]]] = {}
    for code, r in rules().items():
        if r.view is None or r.view.table != S.LEARNER_DIR:
            continue
        for col in r.view.columns:
            if col not in CHARTED:   # one chart per column: a View of several names each
                title = f"{r.view.title}: {col}" if len(r.view.columns) > 1 else r.view.title
                out.setdefault(col, (title, []))[1].append(code)
    return [(col, title, codes) for col, (title, codes) in out.items()]


def ema_label(run_dir: Any) -> str:
    """The return EMA's legend, with the alpha this run used (its options' thresholds)."""
    from ..checks.thresholds import DEFAULT
    from ..rundir.runrecord import RUN_JSON, read_json

    start, _ = read_json(run_dir, RUN_JSON) if run_dir is not None else (None, None)
    opts = (start or {}).get("options")
    th = opts.get("thresholds") if isinstance(opts, dict) else None
    alpha = th.get("return_ema_alpha") if isinstance(th, dict) else None
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        alpha = DEFAULT.return_ema_alpha
    return f"EMA (alpha {alpha:g} per episode)"
