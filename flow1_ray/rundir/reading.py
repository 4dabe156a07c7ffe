"""A run directory read as untrusted input: what could be read, and what was left out.

A run directory may hold a part that is truncated, empty, not Parquet, a directory, of a
schema that does not fit; a heatmap that is a link to a file elsewhere; a folder that cannot
be listed. Every reader goes through here and gets, instead of an exception, the table as
far as it could be read and each item it left out named (``"events/part-...: why"``).
Whole-input problems (a path that is not there, a directory the process may not read, an
object store that does not answer) stay one-line errors (:class:`~.errors.Flow1InputError`).
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..common.errors import Flow1InputError
from ..common.events import EVENT_SCHEMA, one_line
from .store import (CLUSTERS_DIR, EVENTS_DIR, HEATMAPS_DIR, LEARNER_DIR, METRICS_DIR, SNAPSHOTS_DIR, Location,
    error_line)

#: the first bytes of every PNG file (what a heatmap must start with to be shown)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


#: what each table of a run directory needs to be read at all: column -> the Arrow type
#: test its values must pass (a part without one, or with another type, is skipped)
REQUIRED: dict[str, dict[str, Any]] = {
    METRICS_DIR: {"iteration": pa.types.is_integer},
    LEARNER_DIR: {"iteration": pa.types.is_integer, "module_id": pa.types.is_string, "kind": pa.types.is_string},
    CLUSTERS_DIR: {"snapshot": pa.types.is_integer, "size": pa.types.is_integer, "verdict": pa.types.is_string},
}
#: the column a reader may ask for: which part each row came from (its file name)
PART_COLUMN = "__part"
# PART_ERRORS: where a part is opened, every exception is caught and the part named. A
# foreign file can make Arrow's Parquet reader raise OSError, ArrowInvalid, ArrowKeyError,
# IsADirectoryError, UnicodeDecodeError, MemoryError on a forged length...: what a part
# holds is input, and no exception type of it may reach a reader's user.


class Loaded(NamedTuple):
    """A table of a run directory as far as it could be read, and what was left out:
    each ``"events/part-....parquet: why"`` (a part that is not Parquet, a directory, a
    schema that does not fit...)."""

    table: pa.Table
    skipped: list[str]


def _is_null_or(test: Any) -> Any:
    return lambda t: pa.types.is_null(t) or test(t)


def _required(schema: pa.Schema, kind: str) -> None:
    """ValueError unless ``schema`` has the columns :data:`REQUIRED` names, of their types."""
    for name, test in REQUIRED.get(kind, {}).items():
        if name not in schema.names:
            raise ValueError(f"no column {name!r}")
        if not _is_null_or(test)(schema.field(name).type):
            raise ValueError(f"column {name!r} is {schema.field(name).type}")


def _conform(table: pa.Table, kind: str, schema: pa.Schema | None) -> pa.Table:
    """``table`` as the folder's schema wants it, or ValueError saying why not."""
    _required(table.schema, kind)
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
            raise ValueError(f"column {f.name!r} ({col.type}) cannot be read as {f.type}: {error_line(e)}") from None
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
                        f"({error_line(e)})" for p in parts]
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
                _required(sc, kind)
                schemas.append((p, sc))
            except Exception as e:   # PART_ERRORS
                skipped.append(f"{_label(kind, p)}: {_why(e)}")
        if not schemas:
            return Loaded(pa.schema([]).empty_table(), skipped)
        schema, parts, more = _unify(schemas, kind)
        skipped += more
    try:
        dataset = ds.dataset([x.path for x in parts], schema=schema, format="parquet", filesystem=fs)
        if part_column:   # Arrow's own column of each row's file (a list projection: a dict one refuses it)
            table = dataset.to_table(columns=[*schema.names, "__filename"])
            names = pa.array([n.rsplit("/", 1)[-1] for n in table.column("__filename").to_pylist()], pa.string())
            table = table.set_column(table.num_columns - 1, PART_COLUMN, names)
        else:
            table = dataset.to_table()
        _required(table.schema, kind)
        return Loaded(table, skipped)
    except Exception:   # PART_ERRORS
        pass   # one part at a time below, to name the bad ones
    tables = []
    for p in parts:
        try:
            t = _conform(p.read_table(), kind, schema if kind == EVENTS_DIR else None)
            if part_column:
                t = t.append_column(PART_COLUMN, pa.array([p.name] * t.num_rows, pa.string()))
            tables.append(t)
        except Exception as e:   # PART_ERRORS
            skipped.append(f"{_label(kind, p)}: {_why(e)}")
    if not tables:
        return Loaded(((schema if kind == EVENTS_DIR else None) or pa.schema([])).empty_table(), skipped)
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:   # unified above: not expected
        return Loaded(tables[0], skipped + [f"{kind}: parts after the first left out ({error_line(e)})"])
    return Loaded(table, skipped)


#: bad rows named per part (the rest counted)
ROWS_NAMED = 3


def name_bad_rows(folder: Location, parts: list[str], bad: dict[int, str]) -> list[str]:
    """Rows of an events table that are not Events, named per part: ``parts[i]`` is row
    i's part (:data:`PART_COLUMN`), ``bad`` row index -> why. A part without a column every
    row needs is said as such (from its footer) rather than row by row."""
    from ..common.events import REQUIRED_COLUMNS

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
        except Exception:   # PART_ERRORS: then its rows are named one by one
            names = None
        missing = [c for c in REQUIRED_COLUMNS if names is not None and c not in names]
        if missing:
            out.append(f"{label}: no column {', '.join(missing)} ({sizes[part]} row(s) skipped)")
            continue
        named = "; ".join(f"row {r}: {why}" for r, why in rows[:ROWS_NAMED])
        more = f"; and {len(rows) - ROWS_NAMED} more" if len(rows) > ROWS_NAMED else ""
        out.append(f"{label}: {len(rows)} of {sizes[part]} row(s) skipped ({named}{more})")
    return out


#: Arrow's prefix to a Parquet file it cannot open (it repeats the part's whole path)
_ARROW_OPEN = re.compile(r"^Could not open Parquet input source '.*?': ")


def _why(e: BaseException) -> str:
    if isinstance(e, IsADirectoryError):
        return "a directory, not a file"
    if isinstance(e, PermissionError):
        return "not readable (permission denied)"
    if isinstance(e, Flow1InputError):
        return str(e)
    if isinstance(e, (OSError, pa.ArrowException, ValueError)):
        return _ARROW_OPEN.sub("", error_line(e))
    return f"{type(e).__name__}: {error_line(e)}"


def read_table(path: "str | os.PathLike | Location", kind: str, part_column: bool = False) -> Loaded:
    """A table of a run directory, the parts that could not be read named in ``skipped``, not raised.

    Args:
        path: the run directory (a local path or a filesystem URI), its ``kind`` folder or one part file.
        kind: ``events``, ``metrics``, ``learner`` or ``clusters``; a folder not there: an empty table.
        part_column: add :data:`PART_COLUMN`, each row's part file name.

    Raises:
        Flow1InputError: ``path`` is not there or cannot be read at all (no permission, an
            object store that does not answer)."""
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


# --- strict loaders: the whole table or one line saying why not ---------------------------
def _strict(path: "str | os.PathLike | Location", kind: str) -> pa.Table:
    loaded = read_table(path, kind)
    if loaded.skipped:
        more = f" (and {len(loaded.skipped) - 1} more)" if len(loaded.skipped) > 1 else ""
        raise Flow1InputError(f"cannot read {kind} under {Location(path)}: {loaded.skipped[0]}{more}")
    return loaded.table


def load_events(path: str | os.PathLike) -> pa.Table:
    """The events table of a run directory, whole (:func:`read_table` names what it cannot read).

    Args:
        path: the run directory (a local path or a filesystem URI), its ``events`` folder or one part file.

    Raises:
        Flow1InputError: (one line) ``path`` is not there or not readable, or anything of the table
            could not be read (a part, the folder)."""
    return _strict(path, EVENTS_DIR)


def load_metrics(path: str | os.PathLike) -> pa.Table:
    """The per-iteration metrics table of a run directory (Flow1InputError as :func:`load_events`).

    Args:
        path: the run directory (a local path or a filesystem URI), its ``metrics`` folder or a part."""
    return _strict(path, METRICS_DIR)


def load_learner(path: str | os.PathLike) -> pa.Table:
    """The learner table of a run directory: per iteration, module and layer, the traced
    gradient RMS and dormant share, and per module the curve numbers (entropy ratio, KL...).

    Args:
        path: the run directory, its ``learner`` folder or a part (Flow1InputError as :func:`load_events`)."""
    return _strict(path, LEARNER_DIR)


def load_clusters(path: str | os.PathLike) -> pa.Table:
    """The state-cluster rows of a run directory: one row per cluster and snapshot.

    Args:
        path: the run directory, its ``clusters`` folder or a part (Flow1InputError as :func:`load_events`)."""
    return _strict(path, CLUSTERS_DIR)
