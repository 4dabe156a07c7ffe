"""The event model: log line, Arrow schema, JSON, Parquet round trip."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flow1_ray import EVENT_SCHEMA, Event, Flow1InputError, check_env, load_events
from flow1_ray.common import codes as C
from flow1_ray.common.events import events_to_table, table_to_events
from flow1_ray.rundir.store import write_events

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| [A-Z_]+ \| (PASS|WARN|FAIL) \| [A-Z_]+ .+$")


def _event(**kw):
    base = dict(code=C.OBS_DTYPE_MISMATCH, message="obs dtype: expected float32, actual float64 (first at step 6)",
                evidence={"expected": "float32", "actual": "float64", "first_step": np.int64(6), "x": float("nan")},
                ts=datetime(2026, 6, 15, 14, 22, 31, 878000, tzinfo=timezone.utc), run_id="r1")
    base.update(kw)
    return Event(**base)


def test_log_line_format():
    e = _event(worker_index=1, iteration=3)
    assert e.log_line() == ("2026-06-15 14:22:31.878 | ENV_SPEC | FAIL | OBS_DTYPE_MISMATCH obs dtype: expected "
                            "float32, actual float64 (first at step 6) [worker 1, iter 3]")
    assert LOG_LINE.match(e.log_line())


def test_module_and_status_come_from_the_catalogue():
    e = _event()
    assert (e.module, e.status) == (C.ENV_SPEC, C.FAIL)
    with pytest.raises(ValueError, match="unknown event code"):
        Event(code="NOPE", message="x")
    with pytest.raises(ValueError, match="status must be"):
        _event(status="ALERT")


def test_json_is_strict_and_round_trips():
    e = _event()
    d = json.loads(e.to_json())  # numpy ints and NaN are made JSON-safe
    assert d["evidence"]["first_step"] == 6 and d["evidence"]["x"] == "nan"
    back = Event.from_dict(d)
    assert back.code == e.code and back.ts == e.ts and back.evidence["first_step"] == 6


def test_arrow_schema_and_round_trip():
    events = [_event(), _event(code=C.WORKER_DIED, message="gone", worker_index=2, pid=1234, node_id="n1",
                               iteration=5, env_step=1000)]
    t = events_to_table(events)
    assert t.schema.equals(EVENT_SCHEMA)
    assert t.schema.field("ts").type == pa.timestamp("ms", tz="UTC")
    assert t.schema.field("worker_index").type == pa.int32()
    back = table_to_events(t)
    assert [b.code for b in back] == [C.OBS_DTYPE_MISMATCH, C.WORKER_DIED]
    assert back[1].pid == 1234 and back[1].env_step == 1000 and back[0].worker_index is None


def test_parquet_write_and_load_events(tmp_path):
    write_events([_event()], tmp_path)
    write_events([_event(code=C.REWARD_NAN, message="reward nan")], tmp_path)
    parts = sorted((tmp_path / "events").glob("part-*.parquet"))
    assert len(parts) == 2
    for src in (tmp_path, tmp_path / "events", parts[0]):
        t = load_events(src)
        assert t.schema.equals(EVENT_SCHEMA)
    assert load_events(tmp_path).column("code").to_pylist() == [C.OBS_DTYPE_MISMATCH, C.REWARD_NAN]
    lines = (tmp_path / "flow1.log").read_text().splitlines()
    assert len(lines) == 2 and all(LOG_LINE.match(x) for x in lines)
    assert pq.read_table(parts[0]).num_rows == 1  # any Arrow reader opens a part


def test_load_events_errors_are_clear(tmp_path):
    with pytest.raises(Flow1InputError, match="run directory not found"):
        load_events(tmp_path / "missing")
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "part-0.parquet").write_text("not parquet")
    with pytest.raises(Flow1InputError, match="cannot read events"):
        load_events(tmp_path)


def test_load_events_of_an_empty_run_dir(tmp_path):
    assert load_events(tmp_path).num_rows == 0


def test_report_write_and_load(tmp_path):
    import zoo
    report = check_env(zoo.NanRewardAtStep23, steps=200)
    report.write(tmp_path)
    t = load_events(tmp_path)
    assert t.num_rows == len(report.events)
    assert C.REWARD_NAN in t.column("code").to_pylist()
    d = json.loads((tmp_path / "report.json").read_text())
    assert d["status"] == C.FAIL and d["counts"][C.FAIL] >= 1
    for e in d["events"]:
        for v in e["evidence"].values():
            assert not (isinstance(v, float) and not math.isfinite(v))


def test_a_log_line_is_one_line_whatever_its_strings_hold():
    forged = "boom\n2026-06-15 14:22:31.878 | ENV_SPEC | PASS | CHECKS_PASSED all fine\r\x1b[2J\u2028\x85"
    e = _event(message=forged, module="ENV_SPEC\nX")
    line = e.log_line()
    assert line.splitlines() == [line] and "\x1b" not in line
    assert "boom\\n2026-06-15 14:22:31.878 | ENV_SPEC | PASS" in line and "\\r\\x1b[2J\\u2028\\x85" in line
    assert "| ENV_SPEC\\nX | FAIL |" in line


def test_rows_from_a_foreign_table_are_named_not_raised():
    from flow1_ray.common.events import BadRow, event_from_row, events_from_table

    good = events_to_table([_event()]).to_pylist()[0]
    assert event_from_row(good).code == C.OBS_DTYPE_MISMATCH
    for change, why in (({"code": "NOPE"}, "unknown code 'NOPE'"), ({"status": "ALERT"}, "status 'ALERT'"),
                        ({"evidence": "[1]"}, "not a JSON object"), ({"evidence": "{"}, "evidence is not JSON"),
                        ({"message": None}, "message is missing or null"), ({"pid": "7"}, "pid is not an integer"),
                        ({"ts": "2026"}, "ts is not a timestamp"), ({"module": ""}, "module is empty")):
        with pytest.raises(BadRow, match=re.escape(why)):
            event_from_row({**good, **change})
    table = pa.Table.from_pylist([good, {**good, "code": "NOPE"}], schema=pa.schema(
        [f.with_nullable(True) for f in EVENT_SCHEMA]))
    events, bad = events_from_table(table)
    assert [e.code for e in events] == [C.OBS_DTYPE_MISMATCH] and bad == {1: "unknown code 'NOPE'"}
    with pytest.raises(ValueError, match="row 1: unknown code"):
        table_to_events(table)
