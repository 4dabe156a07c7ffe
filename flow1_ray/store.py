"""Run-directory files: Parquet parts written once, never rewritten, and read back.

A run directory holds ``events/part-*.parquet`` ``metrics/`` and ``clusters/``.
Each flush writes a new part through a temporary name and an atomic rename, so a reader
never sees a half-written file and a crash loses at most the batch being written.

A run directory is a local path or a filesystem URI that ``pyarrow.fs`` understands
(``s3://bucket/prefix``, ``gs://...``, ``hdfs://...``; options in the query string, e.g.
``s3://runs/flow1?endpoint_override=minio:9000&scheme=http``): :class:`Location` is the one
place that knows which, so nothing else does. On object storage an object appears whole
when its upload ends (no rename needed); the log, which cannot be appended to there, is
rewritten at each flush.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
_fs_cache: dict[str, Any] = {}
_fs_lock = threading.Lock()


class Location:
    """A folder or file of a run directory: a local path, or a path behind a filesystem URI."""

    def __init__(self, where: "str | os.PathLike | Location") -> None:
        if isinstance(where, Location):
            self.local, self.scheme, self.path, self.query = where.local, where.scheme, where.path, where.query
            return
        text = os.fspath(where)
        if isinstance(text, bytes):
            text = text.decode()
        if "://" in text and not text.startswith("file://"):
            parts = urlsplit(text)
            self.local, self.scheme, self.query = False, parts.scheme, parts.query
            self.path = (parts.netloc + parts.path).rstrip("/")
        else:
            self.local, self.scheme, self.query = True, "", ""
            self.path = text[len("file://"):] if text.startswith("file://") else text

    # -- naming ----------------------------------------------------------------------------
    def __truediv__(self, name: str) -> "Location":
        child = Location(self)
        child.path = str(Path(self.path) / name) if self.local else f"{self.path}/{name}"
        return child

    def __str__(self) -> str:
        if self.local:
            return self.path
        return f"{self.scheme}://{self.path}" + (f"?{self.query}" if self.query else "")

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"

    def __fspath__(self) -> str:
        if not self.local:
            raise TypeError(f"{self} is not a local path")
        return self.path

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def fs(self) -> Any:
        """The pyarrow filesystem (one per scheme, host and options, cached)."""
        import pyarrow.fs as pafs

        if self.local:
            return pafs.LocalFileSystem()
        bucket = self.path.split("/", 1)[0]
        key = f"{self.scheme}://{bucket}?{self.query}"
        with _fs_lock:
            fs = _fs_cache.get(key)
            if fs is None:
                try:
                    fs = _fs_cache[key] = pafs.FileSystem.from_uri(key)[0]
                except (pa.ArrowInvalid, OSError, ValueError) as e:
                    raise Flow1InputError(f"cannot open {self}: {e}") from None
        return fs

    # -- queries ---------------------------------------------------------------------------
    def _type(self) -> Any:
        import pyarrow.fs as pafs

        if self.local:
            p = Path(self.path)
            return pafs.FileType.Directory if p.is_dir() else pafs.FileType.File if p.exists() else \
                pafs.FileType.NotFound
        return self.fs.get_file_info(self.path).type

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self._type() != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self._type() == pafs.FileType.Directory

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return self._type() == pafs.FileType.File

    def listdir(self) -> list[str]:
        """Names directly under this folder ([] when it does not exist)."""
        import pyarrow.fs as pafs

        if self.local:
            try:
                return os.listdir(self.path)
            except (FileNotFoundError, NotADirectoryError):
                return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return [i.base_name for i in infos]

    # -- writing -----------------------------------------------------------------------------
    def mkdir(self) -> None:
        if self.local:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        else:
            self.fs.create_dir(self.path, recursive=True)

    def parent_dir(self) -> "Location":
        up = Location(self)
        up.path = str(Path(self.path).parent) if self.local else self.path.rsplit("/", 1)[0]
        return up

    def write_bytes(self, data: bytes) -> None:
        """Whole or not at all: a local file through a temporary name and a rename, an
        object by its upload."""
        if self.local:
            p = Path(self.path)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, p)
            return
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def append_text(self, text: str) -> None:
        """A local append; on object storage the object is rewritten with the text added."""
        if self.local:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
            return
        old = self.read_bytes() if self.is_file() else b""
        self.write_bytes(old + text.encode("utf-8"))

    def read_bytes(self) -> bytes:
        if self.local:
            return Path(self.path).read_bytes()
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_table(self, table: pa.Table) -> None:
        if self.local:
            p = Path(self.path)
            tmp = p.with_name(f".{p.name}.tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, p)
        else:
            pq.write_table(table, self.path, filesystem=self.fs)

    def read_table(self) -> pa.Table:
        return pq.read_table(self.path) if self.local else pq.read_table(self.path, filesystem=self.fs)


def warm_up() -> None:
    """Pay Arrow's one-off cost now: a process's first Parquet write takes ~0.45 s of CPU
    (measured here; the write itself then takes ~0.5 ms). The Recorder calls this when the
    run starts, while the EnvRunners still wait, rather than in the run's first iterations."""
    pq.write_table(pa.table({"warm_up": pa.array([0], pa.int8())}), pa.BufferOutputStream())


def write_part(table: pa.Table, directory: "str | os.PathLike | Location") -> Location:
    """Write one Parquet part into ``directory``; returns where."""
    d = Location(directory)
    d.mkdir()
    name = f"part-{time.time_ns():020d}-{os.getpid()}-{next(_seq):06d}.parquet"
    (d / name).write_table(table)
    return d / name


def write_learner_snapshot(run_dir: "str | os.PathLike | Location", name: str, snap: dict,
                           max_bytes: int) -> Location | None:
    """``snapshots/<name>/<module>/<column>.npy`` (``np.save`` without pickle) and
    ``snapshot.json``, written last (a snapshot with its json is complete); nothing is
    written when the arrays pass ``max_bytes`` in all."""
    import io
    import json

    import numpy as np

    modules = snap.get("modules") or {}
    size = sum(int(np.asarray(a).nbytes) for cols in modules.values() for a in cols.values())
    if size > max_bytes:
        return None
    d = Location(run_dir) / SNAPSHOTS_DIR / name
    d.mkdir()
    for mid, cols in modules.items():
        m = d / _safe(mid)
        m.mkdir()
        for col, arr in cols.items():
            buf = io.BytesIO()
            np.save(buf, np.asarray(arr), allow_pickle=False)
            (m / f"{_safe(col)}.npy").write_bytes(buf.getvalue())
    meta = {k: v for k, v in snap.items() if k != "modules"}
    (d / "snapshot.json").write_text(json.dumps(meta, default=float, indent=1))
    return d


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name)) or "_"


def write_events(events: list[Event], run_dir: "str | os.PathLike | Location") -> Location | None:
    """Append events to ``run_dir/events/`` and their lines to ``run_dir/flow1.log``."""
    if not events:
        return None
    d = Location(run_dir)
    part = write_part(events_to_table(events), d / EVENTS_DIR)
    (d / LOG_FILE).append_text("".join(e.log_line() + "\n" for e in events))
    return part


def _parts(path: Location, sub: str) -> list[Location]:
    if path.is_file():
        return [path]
    d = path / sub if (path / sub).is_dir() else path
    return [d / n for n in sorted(n for n in d.listdir() if n.startswith("part-") and n.endswith(".parquet"))]


def _read(path: "str | os.PathLike | Location", sub: str, schema: pa.Schema | None) -> pa.Table:
    p = Location(path)
    if not p.exists():
        raise Flow1InputError(f"run directory not found: {p}")
    if p.local and p.is_dir() and not os.access(p.path, os.R_OK | os.X_OK):
        raise Flow1InputError(f"run directory not readable: {p}")
    parts = _parts(p, sub)
    if not parts:
        if schema is None:
            raise Flow1InputError(f"no {sub} parts under {p}")
        return schema.empty_table()
    return read_parts(parts, schema, f"{sub} under {p}")


def read_parts(parts: list[Location], schema: pa.Schema | None, what: str = "parts") -> pa.Table:
    """Parquet parts of one folder as one table, in their order.

    Parts written at different times may differ in columns (null-filled) and in a number
    column's width (int -> double): the schema is unified over the parts' footers
    ("permissive") unless given, then one dataset scan reads them all (Arrow's threads; ~2x
    faster than a read per part on a run of thousands of parts). Raises Flow1InputError when
    a part cannot be read."""
    import pyarrow.dataset as ds

    try:
        if schema is None:
            schema = pa.unify_schemas([pq.read_schema(x.path, filesystem=None if x.local else x.fs)
                                       for x in parts], promote_options="permissive")
        first = parts[0]
        return ds.dataset([x.path for x in parts], schema=schema, format="parquet",
                          filesystem=None if first.local else first.fs).to_table()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass   # a column no cast unifies: part by part below, as strictly as before
    except (OSError, pa.ArrowInvalid) as e:
        raise Flow1InputError(f"cannot read {what}: {e}") from None
    try:
        tables = [x.read_table() for x in parts]
    except (OSError, pa.ArrowInvalid) as e:
        raise Flow1InputError(f"cannot read {what}: {e}") from None
    if schema is not None:
        tables = [t.select(schema.names).cast(schema) for t in tables]
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
