"""The last state-cluster snapshot of each module, read back for people: what each cluster
holds (its description, a thumbnail for image envs), its verdict, and the cluster map.

``clusters/`` is input like every table of a run directory: a run written before the
descriptions has no such columns (its clusters are shown by number, as then), and a
column of another type, or a thumbnail that is not a small PNG, is left out and named,
never a traceback. The HTML report, the Markdown/JSON summary and the live panel all take
their rows from here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import pyarrow as pa

from ..common import codes as C
from ..common import schema as S
from ..rundir.reading import PNG_MAGIC

#: columns a reader shows when they are there, and the Arrow type test each must pass
SHOWN: dict[str, Callable[[pa.DataType], bool]] = {
    "module": pa.types.is_string, "iteration": pa.types.is_integer, "cluster": pa.types.is_integer,
    "top_action": pa.types.is_string, "p_top": pa.types.is_floating, "description": pa.types.is_string,
    "label": pa.types.is_string, "thumbnail": lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t),
    "map_x": pa.types.is_floating, "map_y": pa.types.is_floating,
}
MAX_THUMBNAIL_BYTES = 64 * 1024   # a <= 64x64 PNG is a few kB; anything larger is not one of ours
DESCRIBED = 30                    # flagged clusters listed per module (the largest first)


def usable(table: pa.Table) -> tuple[pa.Table, list[str]]:
    """The table without the shown columns whose type is not theirs (each named)."""
    skipped = []
    for name, test in SHOWN.items():
        if name in table.column_names and not (pa.types.is_null(table.schema.field(name).type)
                                               or test(table.schema.field(name).type)):
            skipped.append(f"{S.CLUSTERS_DIR}: column {name!r} is {table.schema.field(name).type}: left out")
            table = table.drop_columns([name])
    return table, skipped


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def snapshot_key(r: dict) -> tuple[int, int]:
    # by iteration first: a restarted clusterer numbers its snapshots from 0 again
    it, snap = _int(r.get("iteration")), _int(r.get("snapshot"))
    return (it if it is not None else -1, snap if snap is not None else -1)


def by_module(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows per module (a row without one is the default module's), modules sorted."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(str(r.get("module") or S.DEFAULT_MODULE_ID), []).append(r)
    return dict(sorted(out.items()))


def latest(rows: list[dict]) -> list[dict]:
    """The rows of the last snapshot among ``rows`` (one module's)."""
    if not rows:
        return []
    top = max(snapshot_key(r) for r in rows)
    return [r for r in rows if snapshot_key(r) == top]


def thumbnail(v: Any) -> bytes | None:
    """A thumbnail a page may embed: PNG bytes of a bounded size, else None."""
    return v if isinstance(v, bytes) and v.startswith(PNG_MAGIC) and len(v) <= MAX_THUMBNAIL_BYTES else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def view(r: dict, total: int, position: int) -> dict[str, Any]:
    """One cluster as the renderers show it (raw strings: each renderer escapes them)."""
    size = _int(r.get("size")) or 0
    cluster = _int(r.get("cluster"))
    return {"cluster": cluster if cluster is not None else position, "size": size,
            "share": size / total if total else 0.0, "verdict": str(r.get("verdict") or "?"),
            "top_action": r.get("top_action") if isinstance(r.get("top_action"), str) else None,
            "p_top": _num(r.get("p_top")),
            "description": r.get("description") if isinstance(r.get("description"), str) else None,
            "label": r.get("label") if isinstance(r.get("label"), str) else None,
            "thumbnail": thumbnail(r.get("thumbnail")), "map_x": _num(r.get("map_x")), "map_y": _num(r.get("map_y"))}


def views(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The last snapshot of one module's rows as :func:`view` s (in cluster order), and
    what was left out (thumbnails that are not small PNGs, said once)."""
    last = latest(rows)
    total = sum(_int(r.get("size")) or 0 for r in last)
    out = [view(r, total, i) for i, r in enumerate(last)]
    bad = sum(r.get("thumbnail") is not None and v["thumbnail"] is None for r, v in zip(last, out))
    skipped = [f"{S.CLUSTERS_DIR}: {bad} thumbnail(s) that are not PNGs of <= {MAX_THUMBNAIL_BYTES} bytes left out"
               ] if bad else []
    return sorted(out, key=lambda v: v["cluster"]), skipped


#: the cluster verdicts a snapshot raises as findings (one STATE_ACTION event per verdict)
CLUSTER_CODES = (C.CHAOS, C.BLIND_SPOT, C.ERROR_FIXATION, C.RARE_STATE)


def warned(events: Iterable[Any], module: str | None, rows: list[dict]) -> set[str]:
    """The cluster verdicts the last snapshot of this module's ``rows`` raised as a WARN or FAIL:
    its STATE_ACTION events, matched by the snapshot's index and iteration (a restarted clusterer
    numbers its snapshots from 0 again); an undecided policy's CHAOS clusters were informational
    (PASS), not flagged."""
    last = latest(rows)
    key = snapshot_key(last[0]) if last else None
    out = set()
    for e in events:
        ev = getattr(e, "evidence", None) or {}
        if e.code in CLUSTER_CODES and e.status != C.PASS and ev.get("module") in (None, module) \
                and key == (e.iteration if isinstance(e.iteration, int) else -1,
                            ev.get("snapshot") if isinstance(ev.get("snapshot"), int) else -1):
            out.add(e.code)
    return out


def flagged(vs: list[dict], warned_codes: set[str]) -> list[dict]:
    """The clusters whose verdict the snapshot raised as a finding (``warned_codes``: see
    :func:`warned`), the largest first (at most DESCRIBED); the others are in the list of all
    clusters, informational."""
    return sorted((v for v in vs if v["verdict"] in warned_codes), key=lambda v: -v["size"])[:DESCRIBED]


def summary_row(v: dict) -> dict[str, Any]:
    """A flagged cluster for report.json / report.md (text only: no thumbnail bytes)."""
    return {k: v[k] for k in ("cluster", "verdict", "size", "share", "top_action", "p_top", "description")} \
        | {"thumbnail": v["thumbnail"] is not None}


def has_map(vs: list[dict]) -> bool:
    return len(vs) >= 2 and all(v["map_x"] is not None and v["map_y"] is not None for v in vs)
