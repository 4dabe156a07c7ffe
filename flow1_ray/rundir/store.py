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
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from ..common.errors import Flow1InputError
from ..common.events import Event, events_to_table, one_line
# the run directory's names live in flow1_ray.common.schema; imported here for the store's callers
from ..common.schema import (CLUSTERS_DIR, EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, LOG_FILE, METRICS_DIR, REPORT_JSON,
    REPORT_MD, SNAPSHOTS_DIR)

_seq = itertools.count()
_fs_cache: dict[str, Any] = {}
_fs_lock = threading.Lock()
#: an object store that does not answer is said within seconds: Arrow's S3 default (no
#: connect timeout of its own, ten attempts) took 6 s for a refused connection; the writer
#: loses nothing by failing sooner (the Recorder keeps its rows and tries at its next flush)
S3_CONNECT_TIMEOUT_S = 3.0
S3_ATTEMPTS = 3


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
                    raise Flow1InputError(f"cannot open {self}: {error_line(e)}") from None
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
            raise Flow1InputError(f"cannot reach {self}: {error_line(e)}") from None

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
            raise Flow1InputError(f"cannot list {self}: {error_line(e)}") from None
        return [i.base_name for i in infos]

    def entries(self) -> list[tuple[str, bool, bool]]:
        """(name, is a file, is a link) of each entry directly under this folder ([] when
        it does not exist), from the listing alone."""
        import pyarrow.fs as pafs

        if not self.local:
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
            except OSError as e:
                raise Flow1InputError(f"cannot list {self}: {error_line(e)}") from None
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


def error_line(e: BaseException) -> str:
    """An exception as one short line (Arrow's messages run over several)."""
    text = str(e).strip().splitlines()
    return one_line(text[0] if text else type(e).__name__)[:300]
