"""The event model: one finding = one :class:`Event`, one Arrow row, one log line.

Every producer (``flow1 check``, the EnvRunner sampler, the actors, the learner rules)
emits ``Event`` objects; the writer turns them into Arrow record batches and log lines.
Keeping a single record type is what lets a run directory be read back by any Arrow
reader and re-rendered by ``flow1 report`` without flow1 or Ray.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from . import codes as C

#: Arrow schema of the events table (README, "Run directory and events").
EVENT_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("module", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("code", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("evidence", pa.string(), nullable=False),
        pa.field("worker_index", pa.int32()),
        pa.field("pid", pa.int32()),
        pa.field("node_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("env_step", pa.int64()),
    ]
)


#: what may not appear raw in a one-line rendering (a log line, a console line): C0 and C1
#: controls, DEL, the Unicode line and paragraph separators (``str.splitlines`` splits on
#: them) and the bidirectional overrides (they reorder what a terminal shows)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: object) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``,
    ``\\u2028``): a string from a run (an exception message, an env id) can never start a
    line of its own, so it cannot forge a line of ``flow1.log`` or move a terminal's cursor."""
    s = text if isinstance(text, str) else str(text)
    if not _CONTROL.search(s):
        return s
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                             else f"\\u{ord(m.group()):04x}"), s)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def jsonable(obj: Any) -> Any:
    """Turn evidence into strict-JSON values: numpy scalars/arrays to Python, non-finite
    floats to the strings "nan"/"inf"/"-inf" (Arrow and JSON readers reject bare NaN)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if isinstance(obj, np.dtype):
        return str(obj)
    return repr(obj)


@dataclass
class Event:
    """One finding. ``module`` and ``status`` default to the code's catalogue entry."""

    code: str
    message: str
    evidence: dict = field(default_factory=dict)
    module: str = ""
    status: str = ""
    ts: datetime = field(default_factory=utcnow)
    run_id: str = ""
    worker_index: int | None = None
    pid: int | None = None
    node_id: str | None = None
    iteration: int | None = None
    env_step: int | None = None

    def __post_init__(self) -> None:
        spec = C.DEFAULTS.get(self.code)
        if spec is None:
            raise ValueError(f"unknown event code {self.code!r}: declare it in a rule file's RULES")
        module, status = spec
        if not self.module:
            if not module:
                raise ValueError(f"code {self.code} needs an explicit module")
            self.module = module
        if not self.status:
            self.status = status
        if self.status not in C.STATUS_RANK:
            raise ValueError(f"status must be one of {C.STATUSES}, got {self.status!r}")

    @property
    def advisory(self) -> bool:
        """A PASS that says something worth reading (how to feed the env, a property by
        design); see :func:`flow1_ray.checks.findings.advisory`."""
        return self.status == C.PASS and self.evidence.get("advisory") is True

    # -- renderings ----------------------------------------------------------------------
    def where(self) -> str:
        parts = []
        if self.worker_index is not None:
            parts.append(f"worker {self.worker_index}")
        if self.iteration is not None:
            parts.append(f"iter {self.iteration}")
        return f" [{', '.join(parts)}]" if parts else ""

    def log_line(self) -> str:
        """``YYYY-MM-DD HH:MM:SS.mmm | MODULE | STATUS | CODE message [where]`` (UTC), always
        one line: control characters of the strings are escaped (:func:`one_line`), so a
        message holding a newline cannot forge a line of its own."""
        stamp = self.ts.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.") + f"{self.ts.microsecond // 1000:03d}"
        return (f"{stamp} | {one_line(self.module)} | {one_line(self.status)} | {one_line(self.code)} "
                f"{one_line(self.message)}{one_line(self.where())}")

    def to_dict(self) -> dict:
        return {
            "ts": self.ts.astimezone(timezone.utc).isoformat(timespec="milliseconds"),
            "run_id": self.run_id,
            "module": self.module,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "evidence": jsonable(self.evidence),
            "worker_index": self.worker_index,
            "pid": self.pid,
            "node_id": self.node_id,
            "iteration": self.iteration,
            "env_step": self.env_step,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Event":
        """The inverse of :meth:`to_dict`.

        Args:
            d: an event's fields by name. ``code``, ``message``, ``module``, ``status`` and ``ts``
                are required; ``ts`` is a datetime or an ISO 8601 string, ``evidence`` a dict, a
                JSON string or absent (``{}``); the other fields may be absent (None; ``run_id`` "").

        Returns:
            The Event, checked like one built directly.

        Raises:
            KeyError: a required field is missing.
            ValueError: an unknown code or status, a ``ts`` string that is not ISO 8601, an
                ``evidence`` string that is not JSON.
        """
        ts = d["ts"]
        if isinstance(ts, str):
            ts = datetime.fromisoformat(ts)
        ev = d.get("evidence") or {}
        if isinstance(ev, str):
            ev = json.loads(ev)
        return cls(
            code=d["code"], message=d["message"], evidence=ev, module=d["module"],
            status=d["status"], ts=ts, run_id=d.get("run_id") or "",
            worker_index=d.get("worker_index"), pid=d.get("pid"), node_id=d.get("node_id"),
            iteration=d.get("iteration"), env_step=d.get("env_step"),
        )


#: columns an events row cannot do without (the rest may be null)
REQUIRED_COLUMNS = ("ts", "module", "status", "code", "message", "evidence")
_INT_COLUMNS = ("worker_index", "pid", "iteration", "env_step")
_TEXT_COLUMNS = ("run_id", "node_id")


class BadRow(ValueError):
    """An events row that is not an Event: the message says why (one line)."""


def event_from_row(row: Mapping[str, Any]) -> Event:
    """An :class:`Event` from one row of a run directory's events table, read as untrusted:
    raises :class:`BadRow` (never anything else) naming what is wrong -- a missing or null
    required column, a wrong type, a code no rule declares, a status
    that is not PASS/WARN/FAIL, evidence that is not a JSON object."""
    for name in REQUIRED_COLUMNS:
        if row.get(name) is None:
            raise BadRow(f"{name} is missing or null")
    ts = row["ts"]
    if not isinstance(ts, datetime):
        raise BadRow(f"ts is not a timestamp ({type(ts).__name__})")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    for name in ("module", "status", "code", "message", "evidence"):
        if not isinstance(row[name], str):
            raise BadRow(f"{name} is not a string ({type(row[name]).__name__})")
    if row["code"] not in C.DEFAULTS:
        raise BadRow(f"unknown code {one_line(row['code'])[:80]!r}")
    if row["status"] not in C.STATUS_RANK:
        raise BadRow(f"status {one_line(row['status'])[:40]!r} is not one of {', '.join(C.STATUSES)}")
    if not row["module"]:
        raise BadRow("module is empty")
    try:
        evidence = json.loads(row["evidence"])
    except ValueError as e:
        raise BadRow(f"evidence is not JSON ({e})") from None
    if not isinstance(evidence, dict):
        raise BadRow(f"evidence is not a JSON object (a {type(evidence).__name__})")
    ints: dict[str, int | None] = {}
    for name in _INT_COLUMNS:
        v = row.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise BadRow(f"{name} is not an integer ({type(v).__name__})")
        ints[name] = v
    for name in _TEXT_COLUMNS:
        if row.get(name) is not None and not isinstance(row[name], str):
            raise BadRow(f"{name} is not a string ({type(row[name]).__name__})")
    try:
        return Event(code=row["code"], message=row["message"], evidence=evidence, module=row["module"],
                     status=row["status"], ts=ts, run_id=row.get("run_id") or "", node_id=row.get("node_id"), **ints)
    except (TypeError, ValueError) as e:   # the dataclass' own checks: said, not raised
        raise BadRow(str(e)) from None


def rows_of(table: pa.Table) -> tuple[list[dict], dict[int, str]]:
    """The rows of ``table`` as dicts, and the rows whose values Arrow could not turn into
    Python (bytes that are not UTF-8 in a string column, a timestamp out of range): row
    index -> why. Only a column that fails is converted value by value."""
    cols: dict[str, list] = {}
    bad: dict[int, str] = {}
    for name in table.column_names:
        col = table.column(name)
        try:
            cols[name] = col.to_pylist()
            continue
        except (ValueError, OverflowError, pa.ArrowException):   # UnicodeDecodeError is a ValueError
            pass
        values: list = []
        for i in range(len(col)):
            try:
                values.append(col[i].as_py())
            except (ValueError, OverflowError, pa.ArrowException) as e:
                values.append(None)
                why = "is not valid UTF-8" if isinstance(e, UnicodeDecodeError) else f"cannot be read ({e})"
                bad.setdefault(i, f"{name} {why}")
        cols[name] = values
    names = list(cols)
    rows = [dict(zip(names, vals)) for vals in zip(*(cols[n] for n in names))] if names else \
        [{} for _ in range(table.num_rows)]
    return rows, bad


def events_from_table(table: pa.Table) -> tuple[list[Event], dict[int, str]]:
    """The rows of an events table that are Events, and the others: row index -> why.
    Never raises for what a row holds."""
    rows, bad = rows_of(table)
    events: list[Event] = []
    for i, row in enumerate(rows):
        if i in bad:
            continue
        try:
            events.append(event_from_row(row))
        except BadRow as e:
            bad[i] = str(e)
    return events, bad


def events_to_table(events: Iterable[Event]) -> pa.Table:
    """Events as an Arrow table with :data:`EVENT_SCHEMA`."""
    events = list(events)
    cols: dict[str, list] = {f.name: [] for f in EVENT_SCHEMA}
    for e in events:
        cols["ts"].append(e.ts)
        cols["run_id"].append(e.run_id)
        cols["module"].append(e.module)
        cols["status"].append(e.status)
        cols["code"].append(e.code)
        cols["message"].append(e.message)
        cols["evidence"].append(json.dumps(jsonable(e.evidence)))
        cols["worker_index"].append(e.worker_index)
        cols["pid"].append(e.pid)
        cols["node_id"].append(e.node_id)
        cols["iteration"].append(e.iteration)
        cols["env_step"].append(e.env_step)
    return pa.Table.from_pydict(cols, schema=EVENT_SCHEMA)


def table_to_events(table: pa.Table) -> list[Event]:
    """The inverse of :func:`events_to_table`; raises :class:`BadRow` (a ValueError) on the
    first row that is not an Event (:func:`events_from_table` skips and names them)."""
    events, bad = events_from_table(table)
    if bad:
        i = min(bad)
        raise BadRow(f"row {i}: {bad[i]}" + (f" (and {len(bad) - 1} more row(s))" if len(bad) > 1 else ""))
    return events
