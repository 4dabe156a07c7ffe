"""The change to make, as config lines a user can paste: before and after.

A finding's advice (its evidence's ``knobs``: :meth:`~flow1_ray.checks.advice.Knob.as_dict`) is
computed from the run's own config and signals. The diagnosis takes the first knob a cause
turns, in the cause's order of preference, from the primary symptom's advice first and then
from the findings it explains; where the run set that knob as a schedule (``[[t, v], ...]``,
RLlib's piecewise-linear schedules: lr, entropy_coeff), the schedule's value at the symptom's
step and the whole schedule scaled to the advised value there.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from ..checks.advice import literal, show


def change_for(names: Iterable[str] | None, findings: list, settings: dict | None = None,
               step: int | None = None) -> dict | None:
    """The change (see the module docstring) or None when no finding advised one of ``names``
    (None: any knob, the first advised)."""
    wanted = list(names) if names is not None else None
    advised = [(e.code, k) for e in findings for k in ((e.evidence or {}).get("knobs") or [])
               if isinstance(k, dict) and isinstance(k.get("knob"), str) and k.get("line")]
    if not advised:
        return None
    if wanted is None:
        code, knob = advised[0]
    else:
        ranked = [(wanted.index(k["knob"]), i) for i, (_, k) in enumerate(advised) if k["knob"] in wanted]
        if not ranked:
            return None
        code, knob = advised[min(ranked)[1]]
    name, method = knob["knob"], knob.get("method") or "training"
    current = knob.get("current")
    before = f"config.{method}({name}={literal(current)})" if current is not None else f"{name} unset"
    out = {"knob": name, "method": method, "current": current, "value": knob.get("value"), "before": before,
           "after": knob["line"], "why": knob.get("why"), "from": code,
           "summary": f"{name} {show(current) if current is not None else '(unset)'} -> {show(knob.get('value'))}: "
                      f"{knob['line']}"}
    schedule = (settings or {}).get(name)
    value = knob.get("value")
    if _is_schedule(schedule) and isinstance(value, (int, float)) and not isinstance(value, bool):
        out["schedule"] = _rescaled(name, method, schedule, float(value), step)
    return out


def _is_schedule(v: Any) -> bool:
    return isinstance(v, list) and len(v) >= 2 and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p) for p in v)


def value_at(schedule: list, step: float) -> float:
    """A piecewise-linear schedule's value at ``step`` (its first value before it, its last
    after it), as RLlib's ``PiecewiseSchedule`` interpolates."""
    pts = sorted((float(t), float(v)) for t, v in schedule)
    if step <= pts[0][0]:
        return pts[0][1]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if step <= t1:
            return v0 + (v1 - v0) * (step - t0) / (t1 - t0) if t1 > t0 else v1
    return pts[-1][1]


def _rescaled(name: str, method: str, schedule: list, value: float, step: int | None) -> dict:
    at = value_at(schedule, float(step or 0))
    factor = value / at if at and math.isfinite(at) else None
    after = [[t, float(f"{v * factor:.2g}")] for t, v in schedule] if factor else None
    return {"before": schedule, "step": step, "value_at_step": at, "after": after,
            "after_line": f"config.{method}({name}={after!r})" if after else None}
