"""A run's findings read as one diagnosis: the primary symptom, what follows from it, its
candidate causes ranked by the run's own evidence, and the change to make.

:func:`diagnose` takes what a report holds (its events, which trend rules had data, the run's
config settings, the what-if verdicts) and returns a :class:`Diagnosis`. The primary symptom is
the most upstream finding that explains others (:mod:`.stages`; within the learning stage,
through a cause of :mod:`.causes`), a FAIL before a WARN, the one that explains most, the
earliest; a run where no finding explains another gets its most upstream one. Each candidate
cause has a standing: *tested* (a what-if verdict on its change), *supported by N independent
signals* (findings on different signals; the config's settings corroborate, never support on
their own), *not assessable* (its signals were not recorded or had too little data), or *not
supported*. No percentage is shown: none is calibrated yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..checks.advice import Knobs
from ..common import codes as C
from ..common import schema as S
from ..common.events import Event
from .causes import Cause, Sign, causes_of
from .change import change_for
from .stages import DEATHS, LEARNING, RANK, follows, stage

#: the diagnosis's states
SICK, HEALTHY, SHORT, NOT_JUDGED = "sick", "healthy", "not enough data", "not judged"
#: a cause's standing, best first
TESTED_HELD, TWO_OR_MORE, ONE, OBSERVED, NOT_ASSESSABLE, UNSUPPORTED, TESTED_NOT_HELD, TESTED_HARMFUL = (
    "tested: held", "supported by 2 or more independent signals", "supported by 1 signal",
    "observed", "not assessable", "not supported", "tested: did not hold", "tested: harmful")
_TIER = {TESTED_HELD: 0, OBSERVED: 1, TWO_OR_MORE: 1, ONE: 2, NOT_ASSESSABLE: 3, UNSUPPORTED: 4, TESTED_NOT_HELD: 5,
         TESTED_HARMFUL: 5}
UNTESTED = "untested: run `flow1 whatif {run} --from-advice` to test it against the run itself"


@dataclass
class Diagnosis:
    """See the module docstring; :meth:`to_dict` is ``diagnosis.json``."""

    state: str
    line: str
    primary: dict | None = None
    chain: list[dict] = field(default_factory=list)
    causes: list[dict] = field(default_factory=list)
    others: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "state": self.state, "line": self.line, "primary": self.primary, "chain": self.chain,
                "causes": self.causes, "others": self.others}


def symptoms(events: Iterable[Event]) -> list[Event]:
    """The findings that are symptoms of the run: WARN or FAIL, of a stage (flow1's own codes,
    advisories and gaps aside), one per (code, module, worker) -- the first."""
    seen, out = set(), []
    for e in sorted(events, key=_when):
        if e.status == C.PASS or stage(e.code) is None:
            continue
        key = (e.code, _module(e), e.worker_index if e.code in DEATHS else None, _ts(e) if e.code in DEATHS else None)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def diagnose(events: list[Event], learning: dict | None = None, settings: dict | None = None,
             whatifs: list[dict] | None = None, not_judged: str | None = None, short: str | None = None,
             run: str = "RUN") -> Diagnosis:
    """The diagnosis of a run (see the module docstring). ``learning``: the report's
    sufficiency dict; ``settings``: ``run.json``'s config; ``whatifs``: verdict rows
    (``branch``, ``finding``, ``verdict``, ``why``, ``knobs``, ``p_better``); ``run``: how the
    run is named in the advice to test (its directory)."""
    found = symptoms(events)
    if not found:
        if not_judged:
            return Diagnosis(NOT_JUDGED, f"not judged: {not_judged}")
        if short:
            return Diagnosis(SHORT, short)
        return Diagnosis(HEALTHY, "no symptom: every check that had its data passed")
    knobs = Knobs.from_config(settings) if settings else Knobs()
    deaths = sum(e.code in DEATHS for e in found)
    ctx = _Context(found, knobs, settings or {}, learning, whatifs or [], deaths, run)
    scored = [(e, *ctx.explained(e)) for e in found]
    primary, chain, top = max(scored, key=lambda s: (bool(s[1]), -RANK[stage(s[0].code)], C.STATUS_RANK[s[0].status],
                                                     len(s[1]), -_when(s[0])[0]))
    causes = ctx.ranked(primary)
    explained = {id(e) for e, _ in chain} | {id(primary)}
    line = _line(primary, causes)
    return Diagnosis(SICK, line, {**_summary(primary), **_lasted(primary, events)},
                     [{**_summary(e), "why": why} for e, why in chain],
                     causes, [_summary(e) for e in found if id(e) not in explained])


class _Context:
    def __init__(self, found: list[Event], knobs: Knobs, settings: dict, learning: dict | None, whatifs: list[dict],
                 deaths: int, run: str) -> None:
        self.found, self.knobs, self.settings, self.learning, self.whatifs, self.deaths, self.run = (
            found, knobs, settings, learning, whatifs, deaths, run)

    def explained(self, up: Event) -> tuple[list[tuple[Event, str]], Cause | None]:
        """What follows from ``up``: (finding, why) pairs, and the cause that links them within
        the learning stage (None across stages)."""
        out: list[tuple[Event, str]] = []
        top = None
        if stage(up.code) == LEARNING:
            ranked = self._scored(up)
            top = ranked[0][1] if ranked and _TIER[ranked[0][0]["standing"]] <= _TIER[ONE] else None
        for down in self.found:
            if down is up:
                continue
            why = follows(up.code, down.code, self.deaths, linked=_linked(up, down))
            if why is None and top is not None and stage(down.code) == LEARNING and down.code in top.symptoms \
                    and _same_module(up, down):
                why = f"may follow from the same cause: {top.text.split(':')[0]}"
            if why:
                out.append((down, why))
        return out, top

    def _scored(self, primary: Event) -> list[tuple[dict, Cause]]:
        rows = []
        for order, cause in enumerate(causes_of(primary.code, self.knobs.algo)):
            row = self._judge(cause, primary)
            rows.append((row, cause, order))
        rows.sort(key=lambda r: (_TIER[r[0]["standing"]], -(r[0]["support"] - r[0]["contradicted"]), r[2]))
        return [(r, c) for r, c, _ in rows]

    def ranked(self, primary: Event) -> list[dict]:
        """The primary symptom's causes, best first; a symptom no cause declares is its own."""
        rows = [r for r, _ in self._scored(primary)] if stage(primary.code) == LEARNING else []
        if not rows:
            rows = [self._observed(primary)]
        for i, r in enumerate(rows):
            r["rank"] = i + 1
        return rows

    def _observed(self, e: Event) -> dict:
        """A symptom that is its own cause (an env contract broken on live data, a death)."""
        change = change_for(None, [e], self.settings, e.env_step)
        return {"id": e.code.lower(), "text": e.message, "standing": OBSERVED,
                "for": [{"signal": e.code, "text": "seen on the run's own data by flow1's check", "code": e.code}],
                "against": [], "not_assessable": [], "support": 1, "contradicted": 0,
                "change": change, "expected": UNTESTED.format(run=self.run) if change else None}

    def _judge(self, cause: Cause, primary: Event) -> dict:
        pro, con, blind = self._signs(cause.signs, primary), self._signs(cause.against, primary), []
        for_rows = [x for x in pro if x.get("held")]
        against_rows = [x for x in con if x.get("held")]
        blind = [x for x in pro if x.get("held") is None]
        run_signals = {x["signal"] for x in for_rows if x.get("code")}
        support = len({x["signal"] for x in for_rows}) if run_signals else 0
        contradicted = len({x["signal"] for x in against_rows})
        standing = TWO_OR_MORE if support >= 2 else ONE if support == 1 else NOT_ASSESSABLE if blind and not \
            [x for x in pro if x.get("held") is False and x.get("code")] else UNSUPPORTED
        related = [e for e in self.found if e.code in cause.symptoms and _same_module(primary, e)]
        change = change_for(cause.knobs, [primary] + [e for e in related if e is not primary], self.settings,
                            primary.env_step)
        tested = self._tested(cause, related, change)
        if tested is not None:
            standing = {S.WHATIF_HELD: TESTED_HELD, S.WHATIF_NOT_HELD: TESTED_NOT_HELD,
                        S.WHATIF_HARMFUL: TESTED_HARMFUL}.get(tested["verdict"], standing)
        expected = (f"what-if {tested['branch']}: {tested['verdict']}: {tested['why']}" if tested
                    else UNTESTED.format(run=self.run) if change else None)
        return {"id": cause.id, "text": cause.text, "standing": standing, "support": support,
                "contradicted": contradicted, "for": [_sign_row(x) for x in for_rows],
                "against": [_sign_row(x) for x in against_rows],
                "not_assessable": [f"{x['signal']}: {x['why']}" for x in blind], "change": change,
                "tested": tested, "expected": expected}

    def _signs(self, signs: tuple[Sign, ...], primary: Event) -> list[dict]:
        out = []
        for s in signs:
            if s.algos and self.knobs.algo is not None and self.knobs.algo not in s.algos:
                continue
            if s.setting is not None:
                v = s.setting(self.knobs) if self.knobs.known else None
                out.append({"signal": s.signal, "text": s.text, "held": v,
                            "why": "the run's config is not recorded" if not self.knobs.known else "not set"})
                continue
            hit = next((e for e in self.found if e.code in s.codes and _same_module(primary, e)
                        and (s.when is None or s.when(e.evidence or {}))), None)
            why = self._blind(s.codes)
            held = True if hit is not None else (None if why else False)
            out.append({"signal": s.signal, "text": s.text, "held": held, "code": hit.code if hit else s.codes[0],
                        "iteration": hit.iteration if hit else None, "why": why})
        return out

    def _blind(self, codes: tuple[str, ...]) -> str | None:
        """Why none of ``codes`` could have been raised, or None when one could: a trend rule
        could where it had its data (``learning["judged"]``), any other learner rule where the
        run recorded learner curves."""
        lr = self.learning
        if lr is None:
            return "the run recorded no learner curves"
        short, judged = lr.get("short") or {}, set(lr.get("judged") or [])
        if any(c in judged or c not in C.NEEDS for c in codes):
            return None
        said = [f"{c} {short[c]}" for c in codes if c in short]
        return "; ".join(said) if said else "its signal was not recorded"

    def _tested(self, cause: Cause, related: list[Event], change: dict | None) -> dict | None:
        """The what-if verdict on this cause's advice: a branch that set a knob of the cause to a
        value one of its findings advised, judged on one of those findings. Of several, a harmful
        one first (a branch is harmful on every finding when it hurt any), then one that held,
        then one that did not; an inconclusive one leaves the standing as the signals give it."""
        codes = {e.code for e in related}
        advised = [(k["knob"], k.get("value")) for e in related for k in (e.evidence or {}).get("knobs") or []
                   if isinstance(k, dict) and k.get("knob") in cause.knobs]
        hits = []
        for v in self.whatifs:
            branch = v.get("branch") if isinstance(v.get("branch"), str) else ""
            pairs = [part.partition("=")[::2] for part in branch.split()]
            if v.get("finding") in codes and any(k == a and _same(x, b) for k, x in pairs for a, b in advised):
                hits.append(v)
        order = (S.WHATIF_HARMFUL, S.WHATIF_HELD, S.WHATIF_NOT_HELD)
        hits.sort(key=lambda v: order.index(v.get("verdict")) if v.get("verdict") in order else len(order))
        if not hits:
            return None
        v = hits[0]
        symptom = v.get("symptom") if isinstance(v.get("symptom"), dict) else {}
        p = v.get("p_better", symptom.get("p_better"))
        return {"branch": v.get("branch"), "finding": v.get("finding"), "verdict": v.get("verdict"), "why": v.get("why"),
                "p_better": p if isinstance(p, (int, float)) and not isinstance(p, bool) else None}


def _same(text: str, value: Any) -> bool:
    """A branch's value as written in its name (``lr=0.0053``) against an advised value."""
    try:
        return math.isclose(float(text), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return text.strip("'\"") == str(value)


def _sign_row(x: dict) -> dict:
    return {k: x[k] for k in ("signal", "text", "code", "iteration") if x.get(k) is not None}


def _linked(up: Event, down: Event) -> bool:
    lo = (down.evidence or {}).get("likely_origin") if down.code in DEATHS else None
    return isinstance(lo, dict) and lo.get("code") == up.code and (up.pid is None or down.pid == up.pid)


def _module(e: Event) -> str | None:
    m = (e.evidence or {}).get("module_id")
    return m if isinstance(m, str) else None


def _same_module(a: Event, b: Event) -> bool:
    ma, mb = _module(a), _module(b)
    return ma is None or mb is None or ma == mb


def _ts(e: Event) -> float:
    return e.ts.timestamp()


def _when(e: Event) -> tuple[float, float]:
    """(iteration, time): where a finding began (a finding with no iteration by its time)."""
    return (float(e.iteration) if e.iteration is not None else float("inf"), _ts(e))


def _summary(e: Event) -> dict:
    out = {"code": e.code, "status": e.status, "stage": stage(e.code), "module": e.module, "message": e.message,
           "iteration": e.iteration, "env_step": e.env_step, "ts": e.ts.isoformat(), "worker_index": e.worker_index,
           "pid": e.pid,
           "module_id": _module(e), "reference": C.reference(e.code)}
    return {k: v for k, v in out.items() if v is not None}


def _lasted(primary: Event, events: list[Event]) -> dict:
    """The last iteration the primary symptom was raised at (its module's, WARN or FAIL): where
    its interval on the curves ends."""
    its = [e.iteration for e in events if e.code == primary.code and e.status != C.PASS and e.iteration is not None
           and _module(e) == _module(primary)]
    return {"last_iteration": max(its)} if its and primary.iteration is not None else {}


def _line(primary: Event, causes: list[dict]) -> str:
    at = f" at iteration {primary.iteration}" if primary.iteration is not None else ""
    out = f"{primary.code} ({primary.status}){at}"
    top = causes[0] if causes else None
    if top and top["standing"] not in (NOT_ASSESSABLE, UNSUPPORTED, OBSERVED):
        out += f"; most likely cause: {top['text'].split(':')[0]} ({top['standing']})"
    if top and top.get("change"):
        out += f"; change {top['change']['summary']}"
    return out
