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
import stat
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import Flow1InputError
from .events import EVENT_SCHEMA, Event, events_to_table, one_line

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
#: an object store that does not answer is said within seconds: Arrow's S3 default (no
#: connect timeout of its own, ten attempts) took 6 s for a refused connection; the writer
#: loses nothing by failing sooner (the Recorder keeps its rows and tries at its next flush)
S3_CONNECT_TIMEOUT_S = 3.0
S3_ATTEMPTS = 3
#: the first bytes of every PNG file (what a heatmap must start with to be shown)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
                    fs = _fs_cache[key] = _short_timeouts(pafs.FileSystem.from_uri(key)[0])
                except (pa.ArrowInvalid, OSError, ValueError) as e:
                    raise Flow1InputError(f"cannot open {self}: {_first_line(e)}") from None
        return fs

    # -- queries ---------------------------------------------------------------------------
    def _type(self) -> Any:
        """File, Directory or NotFound; a path that cannot be looked at (no permission, an
        object store that does not answer) is a Flow1InputError with one line."""
        import pyarrow.fs as pafs

        if self.local:
            try:
                st = os.stat(self.path)
            except (FileNotFoundError, NotADirectoryError):
                return pafs.FileType.NotFound
            except OSError as e:
                raise Flow1InputError(f"cannot read {self}: {e.strerror or e}") from None
            return pafs.FileType.Directory if stat.S_ISDIR(st.st_mode) else pafs.FileType.File
        try:
            return self.fs.get_file_info(self.path).type
        except OSError as e:
            raise Flow1InputError(f"cannot reach {self}: {_first_line(e)}") from None

    def file_type(self) -> str:
        """``"file"``, ``"dir"`` or ``"missing"``, in one look (Flow1InputError as _type)."""
        import pyarrow.fs as pafs

        t = self._type()
        return "dir" if t == pafs.FileType.Directory else "missing" if t == pafs.FileType.NotFound else "file"

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
            except OSError as e:
                raise Flow1InputError(f"cannot list {self}: {e.strerror or e}") from None
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        except OSError as e:
            raise Flow1InputError(f"cannot list {self}: {_first_line(e)}") from None
        return [i.base_name for i in infos]

    def entries(self) -> list[tuple[str, bool, bool]]:
        """(name, is a file, is a link) of each entry directly under this folder ([] when
        it does not exist), from the listing alone."""
        import pyarrow.fs as pafs

        if not self.local:
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
            except OSError as e:
                raise Flow1InputError(f"cannot list {self}: {_first_line(e)}") from None
            return [(i.base_name, i.type == pafs.FileType.File, False) for i in infos]
        out = []
        try:
            with os.scandir(self.path) as it:
                for entry in it:
                    try:
                        is_file = entry.is_file()
                    except OSError:
                        is_file = False
                    out.append((entry.name, is_file, entry.is_symlink()))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise Flow1InputError(f"cannot list {self}: {e.strerror or e}") from None
        return out

    def inside(self, name: str) -> "tuple[Location | None, str | None]":
        """``self / name`` when it stays inside this folder, else (None, why): a name with
        ``..`` or an absolute path, or (local) a symlink anywhere on the way that resolves
        outside. What a reader embeds or serves goes through here: a run directory is
        input, and a heatmap that is a link to a file elsewhere must not carry it out."""
        parts = name.replace("\\", "/").split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            return None, f"{one_line(name)[:120]}: a path that leaves the run directory (or is not a plain name)"
        child = self / name
        if not self.local:
            return child, None
        root = os.path.realpath(self.path)
        real = os.path.realpath(child.path)
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            return None, f"{one_line(name)[:120]}: a link to a file outside the run directory"
        return child, None

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


def _short_timeouts(fs: Any) -> Any:
    """An S3 filesystem with :data:`S3_CONNECT_TIMEOUT_S` and :data:`S3_ATTEMPTS` unless
    its URI set a connect timeout (rebuilt through its own pickling arguments, so every
    other option of the URI is kept)."""
    import pyarrow.fs as pafs

    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    ctor, args = fs.__reduce__()
    opts = dict(args[0])
    if opts.get("connect_timeout", -1) > 0:
        return fs
    opts.update(connect_timeout=S3_CONNECT_TIMEOUT_S,
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS))
    return ctor(opts)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return one_line(text[0] if text else type(e).__name__)[:300]


# -- reading a run directory's tables ---------------------------------------------------------
#: what each table of a run directory needs to be read at all: column -> the Arrow type
#: test its values must pass (a part without one, or with another type, is skipped)
REQUIRED: dict[str, dict[str, Any]] = {
    METRICS_DIR: {"iteration": pa.types.is_integer},
    LEARNER_DIR: {"iteration": pa.types.is_integer, "module_id": pa.types.is_string, "kind": pa.types.is_string},
    CLUSTERS_DIR: {"snapshot": pa.types.is_integer, "size": pa.types.is_integer, "verdict": pa.types.is_string},
}
#: the column a reader may ask for: which part each row came from (its file name)
PART_COLUMN = "__part"


class Loaded(NamedTuple):
    """A table of a run directory as far as it could be read, and what was left out:
    each ``"events/part-....parquet: why"`` (a part that is not Parquet, a directory, a
    schema that does not fit...)."""

    table: pa.Table
    skipped: list[str]


def _is_null_or(test: Any) -> Any:
    return lambda t: pa.types.is_null(t) or test(t)


def _conform(table: pa.Table, kind: str, schema: pa.Schema | None) -> pa.Table:
    """``table`` as the folder's schema wants it, or ValueError saying why not."""
    for name, test in REQUIRED.get(kind, {}).items():
        if name not in table.column_names:
            raise ValueError(f"no column {name!r}")
        if not _is_null_or(test)(table.schema.field(name).type):
            raise ValueError(f"column {name!r} is {table.schema.field(name).type}")
    if schema is None:
        return table
    cols = []
    for f in schema:
        if f.name not in table.column_names:
            cols.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        try:
            cols.append(col if col.type == f.type else col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise ValueError(f"column {f.name!r} ({col.type}) cannot be read as {f.type}: {_first_line(e)}") from None
    return pa.Table.from_arrays(cols, schema=schema)


def _label(kind: str, part: Location) -> str:
    return f"{kind}/{one_line(part.name)}"


def list_parts(folder: Location, kind: str, seen: "set[str] | frozenset[str]" = frozenset()
               ) -> tuple[list[Location], dict[str, str]]:
    """The ``part-*.parquet`` of a folder in their order (those in ``seen`` left out), and
    those skipped on the way, name -> why: a part that is a directory, or a link out of the
    folder (types from the listing itself: no request per part on an object store).
    Flow1InputError when the folder cannot be listed."""
    parts, skipped = [], {}
    for n, is_file, is_link in sorted(folder.entries()):
        if not (n.startswith("part-") and n.endswith(".parquet")) or n in seen:
            continue
        part, why = folder.inside(n) if is_link else (folder / n, None)
        if part is None:
            skipped[n] = f"{kind}/{why}"
        elif not is_file:
            skipped[n] = f"{_label(kind, part)}: not a file"
        else:
            parts.append(part)
    return parts, skipped


def _unify(schemas: list[tuple[Location, pa.Schema]], kind: str) -> tuple[pa.Schema, list[Location], list[str]]:
    """One schema for the parts (nulls filled, int -> double, permissive); when some
    cannot be merged, the schema most parts share wins and the others are skipped."""
    try:
        return pa.unify_schemas([sc for _, sc in schemas], promote_options="permissive"), \
            [p for p, _ in schemas], []
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    groups: dict[pa.Schema, list[Location]] = {}
    for p, sc in schemas:
        groups.setdefault(sc.remove_metadata(), []).append(p)
    merged, kept, skipped = None, [], []
    for sc, parts in sorted(groups.items(), key=lambda g: -len(g[1])):
        try:
            merged = sc if merged is None else pa.unify_schemas([merged, sc], promote_options="permissive")
            kept += parts
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            skipped += [f"{_label(kind, p)}: its columns cannot be merged with the other parts' "
                        f"({_first_line(e)})" for p in parts]
    order = {id(p): i for i, (p, _) in enumerate(schemas)}
    return merged, sorted(kept, key=lambda p: order[id(p)]), skipped


def read_parts(parts: list[Location], kind: str, part_column: bool = False) -> Loaded:
    """Parquet parts of one folder (``kind``: events, metrics, learner, clusters) as one
    table, in their order, and the parts that could not be read (never an exception for a
    damaged part: not Parquet, truncated, empty, a schema that does not fit).

    Events are read with :data:`EVENT_SCHEMA`; other tables with the schema unified over
    the parts' footers (null-filled columns, int -> double). The fast path is one dataset
    scan (Arrow's threads; ~2x faster than a read per part on a run of thousands of
    parts); when it fails, each part is read alone and the bad ones are named.
    ``part_column`` adds :data:`PART_COLUMN` (each row's part name)."""
    import pyarrow.dataset as ds

    schema = EVENT_SCHEMA if kind == EVENTS_DIR else None
    if not parts:
        return Loaded((schema or pa.schema([])).empty_table(), [])
    fs = None if parts[0].local else parts[0].fs
    skipped: list[str] = []
    if schema is None:   # every footer: the unified schema, and the required columns of each part
        schemas = []
        for p in parts:
            try:
                sc = pq.read_schema(p.path, filesystem=fs)
                _conform(sc.empty_table(), kind, None)
                schemas.append((p, sc))
            except (OSError, pa.ArrowException, ValueError) as e:
                skipped.append(f"{_label(kind, p)}: {_why(e)}")
        if not schemas:
            return Loaded(pa.schema([]).empty_table(), skipped)
        schema, parts, more = _unify(schemas, kind)
        skipped += more
    try:
        dataset = ds.dataset([x.path for x in parts], schema=schema, format="parquet", filesystem=fs)
        if part_column:
            table = dataset.to_table(columns={**{n: ds.field(n) for n in schema.names},
                                              PART_COLUMN: ds.field("__filename")})
            names = pa.array([n.rsplit("/", 1)[-1] for n in table.column(PART_COLUMN).to_pylist()], pa.string())
            table = table.set_column(table.schema.get_field_index(PART_COLUMN), PART_COLUMN, names)
        else:
            table = dataset.to_table()
        _conform(table, kind, None)
        return Loaded(table, skipped)
    except (OSError, pa.ArrowException, ValueError):
        pass   # one part at a time below, to name the bad ones
    tables = []
    for p in parts:
        try:
            t = _conform(p.read_table(), kind, schema if kind == EVENTS_DIR else None)
            if part_column:
                t = t.append_column(PART_COLUMN, pa.array([p.name] * t.num_rows, pa.string()))
            tables.append(t)
        except (OSError, pa.ArrowException, ValueError, Flow1InputError) as e:
            skipped.append(f"{_label(kind, p)}: {_why(e)}")
    if not tables:
        return Loaded(((schema if kind == EVENTS_DIR else None) or pa.schema([])).empty_table(), skipped)
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:   # unified above: not expected
        return Loaded(tables[0], skipped + [f"{kind}: parts after the first left out ({_first_line(e)})"])
    return Loaded(table, skipped)


#: bad rows named per part (the rest counted)
ROWS_NAMED = 3


def name_bad_rows(folder: Location, parts: list[str], bad: dict[int, str]) -> list[str]:
    """Rows of an events table that are not Events, named per part: ``parts[i]`` is row
    i's part (:data:`PART_COLUMN`), ``bad`` row index -> why. A part without a column every
    row needs is said as such (from its footer) rather than row by row."""
    from .events import REQUIRED_COLUMNS

    first: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for i, p in enumerate(parts):
        first.setdefault(p, i)
        sizes[p] = sizes.get(p, 0) + 1
    by_part: dict[str, list[tuple[int, str]]] = {}
    for i, why in sorted(bad.items()):
        by_part.setdefault(parts[i], []).append((i - first[parts[i]], why))
    out = []
    for part, rows in by_part.items():
        label = f"{EVENTS_DIR}/{one_line(part)}"
        try:
            names = pq.read_schema((folder / part).path, filesystem=None if folder.local else folder.fs).names
        except (OSError, pa.ArrowException, Flow1InputError):
            names = None
        missing = [c for c in REQUIRED_COLUMNS if names is not None and c not in names]
        if missing:
            out.append(f"{label}: no column {', '.join(missing)} ({sizes[part]} row(s) skipped)")
            continue
        named = "; ".join(f"row {r}: {why}" for r, why in rows[:ROWS_NAMED])
        more = f"; and {len(rows) - ROWS_NAMED} more" if len(rows) > ROWS_NAMED else ""
        out.append(f"{label}: {len(rows)} of {sizes[part]} row(s) skipped ({named}{more})")
    return out


def _why(e: BaseException) -> str:
    if isinstance(e, IsADirectoryError):
        return "a directory, not a file"
    if isinstance(e, PermissionError):
        return "not readable (permission denied)"
    if isinstance(e, Flow1InputError):
        return str(e)
    return _first_line(e)


def read_table(path: "str | os.PathLike | Location", kind: str, part_column: bool = False) -> Loaded:
    """A table of a run directory (``kind``: ``events``, ``metrics``, ``learner`` or
    ``clusters``; ``path`` may also be that folder, or one part file), with the parts that
    could not be read named in ``skipped`` instead of raised. A folder that is not there
    gives an empty table; a path that is not there, or cannot be read at all (no
    permission, an object store that does not answer), is a Flow1InputError."""
    p = Location(path)
    if not p.exists():
        raise Flow1InputError(f"run directory not found: {p}")
    if p.is_file():
        return read_parts([p], kind, part_column)
    if p.local and not os.access(p.path, os.R_OK | os.X_OK):
        raise Flow1InputError(f"run directory not readable: {p} (permission denied)")
    empty = read_parts([], kind).table
    folder, why = p.inside(kind)
    if folder is None:
        return Loaded(empty, [why])
    try:
        if folder.exists() and not folder.is_dir():
            return Loaded(empty, [f"{kind}: not a directory"])
        if not folder.exists():
            folder = p   # the folder itself was given (or holds no such folder: no parts)
        parts, skipped = list_parts(folder, kind)
    except Flow1InputError as e:
        return Loaded(empty, [f"{kind}: {e}"])
    loaded = read_parts(parts, kind, part_column)
    return Loaded(loaded.table, list(skipped.values()) + loaded.skipped)


def _strict(path: "str | os.PathLike | Location", kind: str) -> pa.Table:
    loaded = read_table(path, kind)
    if loaded.skipped:
        more = f" (and {len(loaded.skipped) - 1} more)" if len(loaded.skipped) > 1 else ""
        raise Flow1InputError(f"cannot read {kind} under {Location(path)}: {loaded.skipped[0]}{more}")
    return loaded.table


def load_events(path: str | os.PathLike) -> pa.Table:
    """The events table of a run directory (or an events folder, or one part file).
    Raises Flow1InputError (one line) when a part cannot be read; :func:`read_table`
    (``kind="events"``) returns what could be read and names the rest instead."""
    return _strict(path, EVENTS_DIR)


def load_metrics(path: str | os.PathLike) -> pa.Table:
    """The per-iteration metrics table of a run directory (Flow1InputError as load_events)."""
    return _strict(path, METRICS_DIR)


def load_learner(path: str | os.PathLike) -> pa.Table:
    """The learner table of a run directory: per iteration, module and layer, the traced
    gradient RMS and dormant share, and per module the curve numbers (entropy ratio, KL...)."""
    return _strict(path, LEARNER_DIR)


def load_clusters(path: str | os.PathLike) -> pa.Table:
    """The state-cluster rows of a run directory: one row per cluster and snapshot."""
    return _strict(path, CLUSTERS_DIR)


def check_file(run_dir: "str | os.PathLike | Location", name: str, png: bool = False) -> str | None:
    """Why a reader may not embed or serve ``run_dir/name`` (None when it may): a path that
    leaves the run directory or a link out of it, not a file, not readable, or (``png``)
    not a PNG -- from its first bytes only."""
    data, why = _open(run_dir, name, png, len(PNG_MAGIC))
    return why


def read_file(run_dir: "str | os.PathLike | Location", name: str, png: bool = False,
              max_bytes: int = 64 * 1024**2) -> tuple[bytes | None, str | None]:
    """(bytes, None) of a file a reader embeds or serves (a heatmap...), or (None, why):
    as :func:`check_file`, or larger than ``max_bytes``."""
    return _open(run_dir, name, png, None, max_bytes)


def _open(run_dir: "str | os.PathLike | Location", name: str, png: bool, head: int | None,
          max_bytes: int = 64 * 1024**2) -> tuple[bytes | None, str | None]:
    f, why = Location(run_dir).inside(name)
    if f is None:
        return None, why
    shown = one_line(name)
    try:
        if not f.is_file():
            return None, f"{shown}: not a file"
        if f.local:
            if os.path.getsize(f.path) > max_bytes:
                return None, f"{shown}: larger than {max_bytes // 1024**2} MB"
            with open(f.path, "rb") as fh:
                data = fh.read(head) if head else fh.read()
        elif head:
            with f.fs.open_input_stream(f.path) as fh:
                data = fh.read(head)
        else:
            data = f.read_bytes()
    except (OSError, Flow1InputError) as e:
        return None, f"{shown}: {_why(e)}"
    if png and not data.startswith(PNG_MAGIC):
        return None, f"{shown}: not a PNG image"
    return data, None


def heatmap_names(d: Location, seen: "set[str] | frozenset[str]" = frozenset()) -> tuple[list[str], list[str]]:
    """``heatmaps/iter_*.png`` (those in ``seen`` left out) that a reader may show -- inside
    the run directory, files, PNGs -- and the others named."""
    try:
        names = sorted(n for n in (d / HEATMAPS_DIR).listdir() if n.startswith("iter_") and n.endswith(".png")
                       and f"{HEATMAPS_DIR}/{n}" not in seen)
    except Flow1InputError as e:
        return [], [f"{HEATMAPS_DIR}: {e}"]
    shown, skipped = [], []
    for n in names:
        why = check_file(d, f"{HEATMAPS_DIR}/{n}", png=True)
        if why:
            skipped.append(why if why.startswith(HEATMAPS_DIR) else f"{HEATMAPS_DIR}/{why}")
        else:
            shown.append(f"{HEATMAPS_DIR}/{n}")
    return shown, skipped


def snapshot_names(d: Location) -> tuple[list[str], list[str]]:
    """The learner snapshots (folders under ``snapshots/``), links out of the run
    directory named instead."""
    folder, why = d.inside(SNAPSHOTS_DIR)
    if folder is None:
        return [], [str(why)]
    try:
        entries = sorted(folder.entries())
    except Flow1InputError as e:
        return [], [f"{SNAPSHOTS_DIR}: {e}"]
    shown, skipped = [], []
    for name, _is_file, is_link in entries:
        if name.startswith("."):
            continue
        inside, why = d.inside(f"{SNAPSHOTS_DIR}/{name}") if is_link else (folder / name, None)
        if inside is None:
            skipped.append(str(why))
        else:
            shown.append(f"{SNAPSHOTS_DIR}/{one_line(name)}")
    return shown, skipped
