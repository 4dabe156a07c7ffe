"""The event model: one finding = one :class:`Event`, one Arrow row, one log line.

Every producer (``flow1 check``, the EnvRunner sampler, the actors, the learner rules)
emits ``Event`` objects; the writer turns them into Arrow record batches and log lines.
Keeping a single record type is what lets a run directory be read back by any Arrow
reader and re-rendered by ``flow1 report`` without flow1 or Ray.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from . import codes as C

#: Arrow schema of the events table (DESIGN.md, "Events").
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
        spec = C.CATALOGUE.get(self.code)
        if spec is None:
            raise ValueError(f"unknown event code {self.code!r}: add it to flow1_ray.codes")
        if not self.module:
            if not spec.module:
                raise ValueError(f"code {self.code} needs an explicit module")
            self.module = spec.module
        if not self.status:
            self.status = spec.status
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
        """``YYYY-MM-DD HH:MM:SS.mmm | MODULE | STATUS | CODE evidence`` (UTC)."""
        stamp = self.ts.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.") + f"{self.ts.microsecond // 1000:03d}"
        return f"{stamp} | {self.module} | {self.status} | {self.code} {self.message}{self.where()}"

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
    """The inverse of :func:`events_to_table`."""
    return [Event.from_dict(row) for row in table.to_pylist()]
