"""Run-directory files: Parquet parts written once, never rewritten, and read back.

A run directory holds ``events/part-*.parquet`` ``metrics/`` and ``clusters/``.
Each flush writes a new part through a temporary name and an atomic rename, so a reader
never sees a half-written file and a crash loses at most the batch being written.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import Flow1InputError
from .events import EVENT_SCHEMA, Event, events_to_table

EVENTS_DIR = "events"
METRICS_DIR = "metrics"
CLUSTERS_DIR = "clusters"
HEATMAPS_DIR = "heatmaps"
LEARNER_DIR = "learner"
SNAPSHOTS_DIR = "snapshots"
LOG_FILE = "flow1.log"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"

_seq = itertools.count()


def warm_up() -> None:
    """Pay Arrow's one-off cost now: a process's first Parquet write takes ~0.45 s of CPU
    (measured here; the write itself then takes ~0.5 ms). The Recorder calls this when the
    run starts, while the EnvRunners still wait, rather than in the run's first iterations."""
    pq.write_table(pa.table({"warm_up": pa.array([0], pa.int8())}), pa.BufferOutputStream())


def write_part(table: pa.Table, directory: str | os.PathLike) -> Path:
    """Write one Parquet part into ``directory``; returns its path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    name = f"part-{time.time_ns():020d}-{os.getpid()}-{next(_seq):06d}.parquet"
    tmp = d / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, d / name)
    return d / name


def write_learner_snapshot(run_dir: str | os.PathLike, name: str, snap: dict, max_bytes: int) -> Path | None:
    """``snapshots/<name>/<module>/<column>.npy`` (``np.save`` without pickle) and
    ``grad_rms.json``; nothing is written when the arrays pass ``max_bytes`` in all."""
    import json

    import numpy as np

    modules = snap.get("modules") or {}
    size = sum(int(np.asarray(a).nbytes) for cols in modules.values() for a in cols.values())
    if size > max_bytes:
        return None
    d = Path(run_dir) / SNAPSHOTS_DIR / name
    tmp = d.with_name("." + d.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    for mid, cols in modules.items():
        m = tmp / _safe(mid)
        m.mkdir(exist_ok=True)
        for col, arr in cols.items():
            np.save(m / f"{_safe(col)}.npy", np.asarray(arr), allow_pickle=False)
    meta = {k: v for k, v in snap.items() if k != "modules"}
    (tmp / "snapshot.json").write_text(json.dumps(meta, default=float, indent=1), encoding="utf-8")
    os.replace(tmp, d)
    return d


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name)) or "_"


def write_events(events: list[Event], run_dir: str | os.PathLike) -> Path | None:
    """Append events to ``run_dir/events/`` and their lines to ``run_dir/flow1.log``."""
    if not events:
        return None
    run_dir = Path(run_dir)
    part = write_part(events_to_table(events), run_dir / EVENTS_DIR)
    with open(run_dir / LOG_FILE, "a", encoding="utf-8") as f:
        f.writelines(e.log_line() + "\n" for e in events)
    return part


def _parts(path: Path, sub: str) -> list[Path]:
    if path.is_file():
        return [path]
    d = path / sub if (path / sub).is_dir() else path
    return sorted(p for p in d.glob("part-*.parquet"))


def _read(path: str | os.PathLike, sub: str, schema: pa.Schema | None) -> pa.Table:
    p = Path(path)
    if not p.exists():
        raise Flow1InputError(f"run directory not found: {p}")
    if p.is_dir() and not os.access(p, os.R_OK | os.X_OK):
        raise Flow1InputError(f"run directory not readable: {p}")
    parts = _parts(p, sub)
    if not parts:
        if schema is None:
            raise Flow1InputError(f"no {sub} parts under {p}")
        return schema.empty_table()
    try:
        tables = [pq.read_table(x) for x in parts]
    except (OSError, pa.ArrowInvalid) as e:
        raise Flow1InputError(f"cannot read {sub} under {p}: {e}") from None
    if schema is not None:
        tables = [t.select(schema.names).cast(schema) for t in tables]
    # parts written at different times may differ in columns (null-filled) and in a number
    # column's width (int -> double): "permissive" unifies both
    return pa.concat_tables(tables, promote_options="permissive")


def load_events(path: str | os.PathLike) -> pa.Table:
    """The events table of a run directory (or an events folder, or one part file)."""
    return _read(path, EVENTS_DIR, EVENT_SCHEMA)


def load_metrics(path: str | os.PathLike) -> pa.Table:
    """The per-iteration metrics table of a run directory."""
    return _read(path, METRICS_DIR, None)


def load_learner(path: str | os.PathLike) -> pa.Table:
    """The learner table of a run directory: per iteration, module and layer, the traced
    gradient RMS and dormant share, and per module the curve numbers (entropy ratio, KL...)."""
    return _read(path, LEARNER_DIR, None)


def load_clusters(path: str | os.PathLike) -> pa.Table:
    """The state-cluster rows of a run directory: one row per cluster and snapshot."""
    return _read(path, CLUSTERS_DIR, None)
