"""What a run directory says about the run itself: when it started (and with what), whether
it is still being written, and whether it stopped cleanly.

A verdict is only as good as the view behind it. A run whose driver was SIGKILLed leaves
fewer parts and no word of why; a directory with no start record may be anything. So
every writer leaves three small JSON files beside its tables:

- ``run.json``, once at the start: run id, kind (``run`` or ``check``), UTC start time,
  the options, the versions of flow1 and of what it runs with, the process and the host, and
  for a run its Algorithm's class (``algorithm``: ``PPO``; `flow1 whatif` refuses a checkpoint
  of another algorithm filed under it);
- ``heartbeat.json``, rewritten at each flush of the Recorder: the time and the last
  iteration written, so "last data at" needs no listing of the tables;
- ``stop.json``, once at the end: when, after which iteration, how it stopped, and whether
  cleanly -- ``algo.stop()`` or the end of ``flow1 check`` (``clean: true``), or the
  Algorithm's process dying under the hub that watches it (``clean: false``: a SIGKILLed
  driver, an OOM kill; the hub outlives it by a second or so, measured; when Ray ends the hub
  first, its last-word process writes it: :mod:`flow1_ray.hub.lastword`).

A run with ``run.json`` and no ``stop.json`` is still running or ended without a word
(the hub died with its driver); readers tell which by the heartbeat's age (:func:`completeness`). Tracebacks of
flow1's own failures go to ``internal/`` (one file each), so that an event's message stays
one line.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from datetime import datetime, timezone
from typing import Any

from ..common.events import jsonable

RUN_JSON = "run.json"
HEARTBEAT_JSON = "heartbeat.json"
STOP_JSON = "stop.json"
INTERNAL_DIR = "internal"
#: a run whose last heartbeat is older than this (and at least 5 flush intervals) without a
#: stop record has ended without a clean stop; younger, it may still be running
STALE_AFTER_S = 15.0
#: the packages whose versions a start record keeps
VERSIONED = ("flow1-ray", "ray", "gymnasium", "torch", "numpy", "pyarrow")


def _iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc).isoformat(timespec="milliseconds")


def versions() -> dict[str, str]:
    """Python's and the installed versions of :data:`VERSIONED` (absent ones left out)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def start_record(run_id: str, kind: str, options: dict | None = None, **extra: Any) -> dict:
    """The content of ``run.json``."""
    return jsonable({"run_id": run_id, "kind": kind, "started_at": _iso(), "versions": versions(),
                     "options": options or {}, "pid": os.getpid(), "host": socket.gethostname(), **extra})


def _loc(run_dir: Any) -> Any:
    from .store import Location

    return Location(run_dir)


def write_start(run_dir: Any, run_id: str, kind: str, options: dict | None = None, **extra: Any) -> dict:
    """Write ``run.json`` (once: an existing record, a restarted writer's, is kept)."""
    d = _loc(run_dir)
    rec = start_record(run_id, kind, options, **extra)
    if not (d / RUN_JSON).exists():
        d.mkdir()
        (d / RUN_JSON).write_text(json.dumps(rec, indent=1))
    return rec


def write_heartbeat(run_dir: Any, iteration: int | None, **extra: Any) -> None:
    (_loc(run_dir) / HEARTBEAT_JSON).write_text(json.dumps(jsonable(
        {"ts": _iso(), "iteration": iteration, "pid": os.getpid(), **extra})))


def write_stop(run_dir: Any, iteration: int | None, how: str, clean: bool = True, **extra: Any) -> None:
    (_loc(run_dir) / STOP_JSON).write_text(json.dumps(jsonable(
        {"stopped_at": _iso(), "iteration": iteration, "how": how, "clean": clean, **extra}), indent=1))


def read_json(run_dir: Any, name: str) -> tuple[dict | None, str | None]:
    """(record, problem): the record when it is a readable JSON object, else None and why
    (None, None when the file is absent)."""
    f = _loc(run_dir) / name
    try:
        if not f.is_file():
            return None, None if not f.exists() else f"{name} is not a file"
        raw = f.read_bytes()
    except Exception as e:
        return None, f"{name} unreadable: {type(e).__name__}: {e}"[:300]
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"{name} is not JSON: {e}"[:300]
    if not isinstance(rec, dict):
        return None, f"{name} is not a JSON object"
    return rec, None


def _number(v: Any) -> float | None:
    """A positive finite number from a record, or None (a record is read as untrusted)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if 0 < v < float("inf") else None


def _ts(text: Any) -> float | None:
    try:
        ts = datetime.fromisoformat(str(text))
        return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def completeness(run_dir: Any, now: float | None = None, flush_interval_s: float | None = None) -> dict:
    """What the run directory says of the run's life, for a report:

    ``started`` (run.json readable), ``start`` (its content), ``stopped`` (a clean stop),
    ``stop``, ``last_data_at`` (ISO, from the heartbeat or the stop), ``last_iteration``,
    ``state`` -- ``"stopped"`` (clean), ``"running"`` (heartbeat fresh), ``"ended"`` (no
    clean stop and a stale heartbeat), ``"unknown"`` (no start record) -- and
    ``problems`` (records present but unreadable)."""
    now = time.time() if now is None else now
    start, p1 = read_json(run_dir, RUN_JSON)
    beat, p2 = read_json(run_dir, HEARTBEAT_JSON)
    stop, p3 = read_json(run_dir, STOP_JSON)
    out: dict[str, Any] = {"started": start is not None, "start": start, "stopped": stop is not None, "stop": stop,
                           "heartbeat": beat,
                           "problems": [p for p in (p1, p2, p3) if p]}
    last_ts, last_it = None, None
    for rec, key in ((beat, "ts"), (stop, "stopped_at")):
        if rec is not None and _ts(rec.get(key)) is not None and (last_ts is None or _ts(rec.get(key)) > last_ts):
            last_ts, last_it = _ts(rec.get(key)), rec.get("iteration")
    if last_it is None and stop is not None:
        last_it = stop.get("iteration")
    out["last_data_at"] = _iso(last_ts) if last_ts is not None else None
    out["last_iteration"] = last_it if isinstance(last_it, int) and not isinstance(last_it, bool) else None
    if start is None:
        out["state"] = "unknown"
    elif stop is not None:   # a stop record of a death is an end, not a clean stop
        out["state"] = "stopped" if stop.get("clean") is not False else "ended"
        out["stopped"] = out["state"] == "stopped"
    else:
        options = start.get("options") if isinstance(start.get("options"), dict) else {}
        flush = flush_interval_s or _number(options.get("flush_interval_s")) or 2.0
        fresh = last_ts is not None and now - last_ts < max(STALE_AFTER_S, 5 * flush)
        if last_ts is None:   # no heartbeat yet: judge by the start time
            started_ts = _ts(start.get("started_at"))
            fresh = started_ts is not None and now - started_ts < max(STALE_AFTER_S, 5 * flush)
        out["state"] = "running" if fresh else "ended"
    return out
