"""The what-ifs of a run directory (``flow1 whatif``: ``whatif/<stamp>/``) read back for the
report and the panel, as untrusted input like the rest of the run directory: a file that is
missing, too large, not JSON or not of the expected shape is named among the skipped items,
never a traceback; only what has the expected types is shown.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

from ..common import schema as S
from ..rundir.reading import read_file
from ..rundir.store import Location

VERDICTS_JSON, CURVES_PARQUET = "verdicts.json", "curves.parquet"
#: the newest what-ifs a report shows
SHOWN = 5
_TEXT = ("branch", "finding", "module_id", "verdict", "why", "signal")


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _verdict_row(v: Any) -> dict | None:
    if not isinstance(v, dict) or not isinstance(v.get("branch"), str) or not isinstance(v.get("verdict"), str):
        return None
    row = {k: _str(v.get(k)) for k in _TEXT}
    back = v.get("readback") if isinstance(v.get("readback"), list) else []
    changes = v.get("changes") if isinstance(v.get("changes"), list) else []
    row["knobs"] = [c["knob"] for c in changes if isinstance(c, dict) and isinstance(c.get("knob"), str)]
    p = (v.get("symptom") or {}).get("p_better") if isinstance(v.get("symptom"), dict) else None
    row["p_better"] = p if isinstance(p, (int, float)) and not isinstance(p, bool) else None
    row["readback"] = sorted({f"{x.get('knob')}: asked {x.get('asked')!r}, after the restore "
                              f"{x.get('after_restore')!r} ({x.get('status')})"
                              for x in back if isinstance(x, dict) and x.get("status") != "in effect"})
    return row


def read_whatifs(d: Location) -> tuple[list[dict], list[str]]:
    """The newest :data:`SHOWN` what-ifs of ``d`` (newest first): their id, where they
    branched from, seeds, iterations, verdict rows and failed runs; and what was skipped."""
    folder = d / S.WHATIF_DIR
    try:
        if not folder.is_dir():
            return [], []
        names = sorted((n for n, is_file, is_link in folder.entries() if not is_file and not is_link),
                       reverse=True)[:SHOWN]
    except Exception as e:   # noqa: BLE001 -- an unreadable folder is named, never a traceback
        return [], [f"{S.WHATIF_DIR}: {type(e).__name__}: {e}"]
    out, skipped = [], []
    for name in names:
        rel = f"{S.WHATIF_DIR}/{name}/{VERDICTS_JSON}"
        data, why = read_file(d, rel, max_bytes=16 * 1024**2)
        if data is None:
            skipped.append(why or rel)
            continue
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            skipped.append(f"{rel}: not JSON ({type(e).__name__})")
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("verdicts"), list):
            skipped.append(f"{rel}: no verdicts list")
            continue
        runs = doc.get("runs") if isinstance(doc.get("runs"), list) else []
        out.append({"id": name, "checkpoint": _str(doc.get("checkpoint")),
                    "iteration": doc.get("iteration") if isinstance(doc.get("iteration"), int) else None,
                    "seeds": doc.get("seeds") if isinstance(doc.get("seeds"), int) else None,
                    "iterations": doc.get("iterations") if isinstance(doc.get("iterations"), int) else None,
                    "verdicts": [r for r in map(_verdict_row, doc["verdicts"]) if r is not None],
                    "failed": [f"{r.get('branch')} seed {r.get('seed')}: {r.get('error')}" for r in runs
                               if isinstance(r, dict) and isinstance(r.get("error"), str)]})
    return out, skipped


def branch_rows(d: Location, whatif_id: str) -> list[dict]:
    """A what-if's ``curves.parquet`` rows ([] when it cannot be read: the verdicts stand alone)."""
    import pyarrow.parquet as pq

    data, _ = read_file(d, f"{S.WHATIF_DIR}/{whatif_id}/{CURVES_PARQUET}", max_bytes=64 * 1024**2)
    if data is None:
        return []
    try:
        return pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception:   # noqa: BLE001 -- not Parquet: no picture, the verdicts stand alone
        return []


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def branch_series(rows: list[dict], column: str) -> dict[str, tuple[list[int], list[float], list[float], list[float]]]:
    """Per branch: iterations, and the mean, min and max over seeds (and modules) of
    ``column``, the finite values only (see :func:`nonfinite`)."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        b, it = r.get("branch"), r.get("iteration")
        if isinstance(b, str) and isinstance(it, int):
            by.setdefault(b, {}).setdefault(it, []).append(_num(r.get(column)))
    out = {}
    for b, its in by.items():
        xs = sorted(its)
        vals = [[v for v in its[i] if math.isfinite(v)] for i in xs]
        out[b] = (xs, [sum(v) / len(v) if v else math.nan for v in vals],
                  [min(v) if v else math.nan for v in vals], [max(v) if v else math.nan for v in vals])
    return out


def nonfinite(rows: list[dict], column: str) -> dict[str, int]:
    """Per branch, how many values of ``column`` were NaN or infinite (a KL of a policy that
    collapsed inside one update): a line cannot draw them, its legend says how many."""
    out: dict[str, int] = {}
    for r in rows:
        v = r.get(column)
        if isinstance(r.get("branch"), str) and isinstance(v, float) and not math.isfinite(v):
            out[r["branch"]] = out.get(r["branch"], 0) + 1
    return out


def label(branch: str, bad: int) -> str:
    return branch + (f" ({bad} NaN/inf, not drawn)" if bad else "")


#: what a what-if's picture shows: (column, title)
PLOTTED = (("episode_return_mean", "episode return"), ("mean_kl_loss", "KL"), ("entropy_ratio", "entropy / max"))


def draw(d: Location, whatif_id: str) -> Any:
    """A matplotlib figure: each branch's curve against the baseline's (the mean over seeds,
    the band their min to max), one panel per signal with data; None without curves."""
    rows = branch_rows(d, whatif_id)
    shown = [(c, t) for c, t in PLOTTED if any(math.isfinite(_num(r.get(c))) for r in rows)]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from ..common.events import one_line

    fig, axes = plt.subplots(1, len(shown), figsize=(4.4 * len(shown), 3.2), squeeze=False)
    for ax, (col, title) in zip(axes.ravel(), shown):
        series, bad = branch_series(rows, col), nonfinite(rows, col)
        for b in sorted(series, key=lambda b: (b != "baseline", b)):
            xs, mean, lo, hi = series[b]
            name = one_line(label(b, bad.get(b, 0))).replace("$", r"\$")
            style = {"color": "black", "lw": 2.0} if b == "baseline" else {}
            line, = ax.plot(xs, mean, label=name, **style)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel("branch iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
