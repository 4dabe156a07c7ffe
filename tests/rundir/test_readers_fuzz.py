"""Every reader on damaged or foreign input (a reader never ends in a traceback: one line naming what it left out).

One real run directory is written by the real RecorderCore (no Ray), copied, and damaged
one way per row of MUTATIONS. Each copy goes through ``flow1 report`` in md, html and json
(in process: an exception would fail the test), the console, and the panel's callbacks
(``panel_callbacks``, which poll a real RunFollower). For each: no traceback, an exit code
in {0, 1, 2}, never a plain PASS when events were unreadable, the skipped item named in
every rendering, and the same verdict and gaps everywhere. Runs as another uid, an
unreachable S3 endpoint and one real browser check follow.
"""

from __future__ import annotations

import base64
import html as html_lib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from browser import Served, assert_no_alert, chrome, needs_browser, requested_urls, text, wait_for
from flow1_ray.common import codes as C
from flow1_ray.hub.recorder import RecorderCore
from flow1_ray.cli.main import main
from flow1_ray.common.events import EVENT_SCHEMA, Event
from flow1_ray.report.model import NOT_JUDGED, md
from flow1_ray.report.panel_callbacks import REFRESH_OUTPUTS, Runs, panel_callbacks

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
EVIL = '<script>alert(1)</script>\n2026-01-01 00:00:00.000 | FLOW1 | PASS | CHECKS_PASSED all good `x` | y'
MARKUP = '<a href="https://example.invalid">m</a><b>x</b><br>'   # what Plotly would render as a link
LAST = "part-99999999999999999999-0-000000.parquet"   # sorts after every part the Recorder wrote


def _png(seed: int) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    plt.imsave(buf, np.random.default_rng(seed).random((6, 6)), format="png")
    return buf.getvalue()


def _write_run(run: Path) -> None:
    """A clean run as the Recorder writes it: five flushes of PASS events, metrics rows (a
    dead worker, 2 restarts), learner rows (five iterations of the KL and the entropy: enough to
    judge learning), cluster rows, a heatmap, a learner snapshot, and a clean stop."""
    from flow1_ray.clustering.state_action_map import analyze_state_actions

    rec = RecorderCore(str(run), "run-1", flush_interval_s=3600)
    rng = np.random.default_rng(0)
    for i in range(1, 6):
        rec.add_events([Event(C.STATE_SNAPSHOT, f"snapshot {i}", {"clusters": 4}, iteration=i,
                              ts=T0 + timedelta(seconds=i))])
        rec.add_metrics({"iteration": i, "env_steps": 100 * i, "episode_return_mean": 10.0 + i,
                         "flow1/worker/alive": 1, "flow1/worker/dead": 1, "flow1/worker/stalled": 0,
                         "flow1/worker/restarts": 2})
        rec.add_learner_rows([{"iteration": i, "module_id": "default_policy", "kind": "module", "layer": None,
                               "entropy_ratio": 0.9 - 0.05 * i, "mean_kl_loss": 0.01},
                              {"iteration": i, "module_id": "default_policy", "kind": "grad", "layer": "pi.0",
                               "grad_rms": 0.1}])
        if i == 3:
            import gymnasium as gym

            m = analyze_state_actions(rng.normal(size=(200, 3)), rng.integers(0, 2, 200), gym.spaces.Discrete(2),
                                      n_clusters=4, backend="sklearn")
            rec.add_snapshot({"rows": m.to_arrow(snapshot=0, iteration=3, module="default_policy")})
            rec.add_learner_snapshot("iter_000003-reward_drop", {"modules": {"default_policy": {
                "obs": np.zeros((4, 3), np.float32)}}, "iteration": 3}, 5, 1 << 20)
        rec.flush()
    (run / "heatmaps").mkdir(exist_ok=True)
    (run / "heatmaps" / "iter_000003.png").write_bytes(_png(0))
    rec.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("template") / "20260101-000000-aaaaaa"
    _write_run(run)
    return run


@pytest.fixture
def run_copy(template, tmp_path) -> Path:
    dst = tmp_path / template.name
    shutil.copytree(template, dst, symlinks=True)
    return dst


# -- damage ------------------------------------------------------------------------------------
def _row(**over) -> dict:
    row = {"ts": T0 + timedelta(seconds=9), "run_id": "run-1", "module": C.STATE_ACTION, "status": C.PASS,
           "code": C.STATE_SNAPSHOT, "message": "a row", "evidence": "{}", "worker_index": None, "pid": None,
           "node_id": None, "iteration": 3, "env_step": None}
    row.update(over)
    return row


def _events_part(run: Path, rows: list[dict], schema: pa.Schema | None = None) -> None:
    """A real Parquet part in events/, beside the Recorder's: one bad row and one good one."""
    table = pa.Table.from_pylist(rows, schema=schema or pa.schema([f.with_nullable(True) for f in EVENT_SCHEMA]))
    pq.write_table(table, run / "events" / LAST)


def _first_part(run: Path, sub: str) -> Path:
    return sorted((run / sub).glob("part-*.parquet"))[0]


def _non_utf8(run: Path) -> None:
    table = pa.Table.from_pylist([_row(), _row()], schema=pa.schema([f.with_nullable(True) for f in EVENT_SCHEMA]))
    bad = pa.array([b"caf\xe9 \xff", b"fine"], pa.binary()).view(pa.string())   # bytes Arrow does not check
    pq.write_table(table.set_column(table.schema.get_field_index("message"), "message", bad), run / "events" / LAST)


def _outside_png(run: Path) -> None:
    secret = run.parent / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(_png(7))
    (run / "heatmaps" / "iter_000099.png").symlink_to(secret)


def _old_heartbeat(run: Path) -> None:
    """A driver SIGKILLed after iteration 3: no stop record, the last heartbeat a day old
    (stale past 5 flush intervals: the fixture's is an hour)."""
    (run / "stop.json").unlink()
    old = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat(timespec="milliseconds")
    (run / "heartbeat.json").write_text(json.dumps({"ts": old, "iteration": 3, "pid": 1}))


def _every_events_part(run: Path, data: bytes) -> None:
    for p in (run / "events").glob("part-*.parquet"):
        p.write_bytes(data)


def _write_pq(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path)


def _markup(run: Path) -> None:
    """Nothing damaged: a run whose strings hold markup, a forged log line and a terminal
    escape (test_run_strings_are_escaped_where_they_are_shown checks each rendering)."""
    rec = RecorderCore(str(run), "run-1", flush_interval_s=3600)
    rec.add_events([Event(C.ENV_CRASHED, EVIL, {"frame": EVIL}, worker_index=1, pid=5),
                    Event(C.WORKER_DIED, "died\r\x1b[2J", {}, worker_index=1, pid=5)])
    rec.add_learner_rows([{"iteration": 4, "module_id": MARKUP, "kind": "module", "layer": None,
                           "entropy_ratio": 0.5, "mean_kl_loss": 0.02}])
    rec.close()


@dataclass
class Mutation:
    name: str
    damage: Callable[[Path], None]
    named: str | None            # what the skipped item / the reason must name (None: nothing skipped)
    events: str = "ok"           # "ok": events intact; "some": some unreadable; "none": no readable events
    code: int = 0                # flow1 report's exit code (default --fail-on FAIL)


MUTATIONS = [
    Mutation("truncated part", lambda r: (r / "events" / LAST).write_bytes(
        _first_part(r, "events").read_bytes()[:200]), LAST, "some", 1),
    Mutation("zero-byte part", lambda r: (r / "events" / LAST).write_bytes(b""), LAST, "some", 1),
    Mutation("text named part-*.parquet", lambda r: (r / "events" / LAST).write_text("ts,code\n1,X\n"), LAST,
             "some", 1),
    Mutation("part that is a directory", lambda r: (r / "events" / LAST).mkdir(), f"{LAST}: not a file", "some", 1),
    Mutation("ts as a string", lambda r: _events_part(r, [_row(ts="yesterday"), _row(ts="today")], schema=pa.schema(
        [pa.field("ts", pa.string())] + [f.with_nullable(True) for f in EVENT_SCHEMA][1:])),
        f"{LAST}: column 'ts' (string) cannot be read as timestamp", "some", 1),
    Mutation("no code column", lambda r: _events_part(r, [{k: v for k, v in _row().items() if k != "code"}],
                                                      schema=pa.schema([f.with_nullable(True) for f in EVENT_SCHEMA
                                                                        if f.name != "code"])),
             f"{LAST}: no column code", "some", 1),
    Mutation("null status", lambda r: _events_part(r, [_row(status=None), _row()]), "row 0: status is missing or null",
             "some", 1),
    Mutation("unknown code", lambda r: _events_part(r, [_row(code="NOPE"), _row()]), "row 0: unknown code 'NOPE'",
             "some", 1),
    Mutation("bad status", lambda r: _events_part(r, [_row(status="ALERT"), _row()]),
             "row 0: status 'ALERT' is not one of", "some", 1),
    Mutation("evidence not JSON", lambda r: _events_part(r, [_row(evidence="not json"), _row()]),
             "row 0: evidence is not JSON", "some", 1),
    Mutation("evidence a JSON list", lambda r: _events_part(r, [_row(evidence="[1, 2]"), _row()]),
             "row 0: evidence is not a JSON object (a list)", "some", 1),
    Mutation("non-UTF-8 message", _non_utf8, "row 0: message is not valid UTF-8", "some", 1),
    Mutation("worker_index as text", lambda r: _events_part(r, [_row(worker_index="one")], schema=pa.schema(
        [f.with_nullable(True) if f.name != "worker_index" else pa.field("worker_index", pa.string())
         for f in EVENT_SCHEMA])), f"{LAST}: column 'worker_index' (string) cannot be read as int32", "some", 1),
    Mutation("an events part removed", lambda r: _first_part(r, "events").unlink(),
             "events: the Recorder wrote", "some", 1),
    Mutation("every events part damaged", lambda r: _every_events_part(r, b"PAR1 not really"), "events/part-",
             "none", 2),
    Mutation("metrics iteration as a string", lambda r: _write_pq(pa.table({"iteration": ["3"], "env_steps": [1]}),
                                                                  r / "metrics" / LAST),
             f"metrics/{LAST}: column 'iteration' is string"),
    Mutation("metrics schemas that cannot merge", lambda r: _write_pq(pa.table({"iteration": [4], "env_steps": ["x"]}),
                                                                      r / "metrics" / LAST),
             f"metrics/{LAST}: its columns cannot be merged"),
    Mutation("learner part without module_id and kind", lambda r: _write_pq(
        pa.table({"iteration": [4], "entropy_ratio": [0.5]}), r / "learner" / LAST),
        f"learner/{LAST}: no column 'module_id'"),
    Mutation("clusters part without snapshot", lambda r: _write_pq(
        pa.table({"iteration": [4], "size": [3], "verdict": ["OK"]}), r / "clusters" / LAST),
        f"clusters/{LAST}: no column 'snapshot'"),
    Mutation("heatmap a directory", lambda r: (r / "heatmaps" / "iter_000099.png").mkdir(),
             "heatmaps/iter_000099.png: not a file"),
    Mutation("heatmap not a PNG", lambda r: (r / "heatmaps" / "iter_000099.png").write_text("<svg onload=x>"),
             "heatmaps/iter_000099.png: not a PNG image"),
    Mutation("heatmap a link outside", _outside_png,
             "heatmaps/iter_000099.png: a link to a file outside the run directory"),
    Mutation("snapshot a link outside", lambda r: (r / "snapshots" / "iter_000009-x").symlink_to(r.parent),
             "snapshots/iter_000009-x: a link to a file outside the run directory"),
    Mutation("run.json not JSON", lambda r: (r / "run.json").write_text("{run"), "run.json is not JSON", "ok", 2),
    Mutation("run.json missing", lambda r: (r / "run.json").unlink(), "no start record (run.json missing)", "ok", 2),
    Mutation("events/ missing", lambda r: shutil.rmtree(r / "events"), "no readable events (events/ missing)",
             "none", 2),
    Mutation("events/ a file", lambda r: (shutil.rmtree(r / "events"), (r / "events").write_text("x")),
             "events: not a directory", "none", 2),
    Mutation("events/ a link outside", lambda r: (shutil.move(r / "events", r.parent / "other-events"),
                                                  (r / "events").symlink_to(r.parent / "other-events")),
             "events: a link to a file outside the run directory", "none", 2),
    Mutation("no clean stop", _old_heartbeat, "ended without a clean stop after iteration 3", "ok", 1),
    Mutation("stop.json not JSON", lambda r: (r / "stop.json").write_bytes(b"\xff{"), "stop.json is not JSON"),
    Mutation("heartbeat.json a directory", lambda r: ((r / "heartbeat.json").unlink(), (r / "heartbeat.json").mkdir()),
             "heartbeat.json is not a file"),
    Mutation("part a link outside", lambda r: (r / "events" / LAST).symlink_to(_first_part(r, "events")
                                                                              .rename(r.parent / "moved.parquet")),
             f"events/{LAST}: a link to a file outside the run directory", "some", 1),
    Mutation("run strings with markup", _markup, None, "ok", 1),
]


def _report(run: Path, fmt: str, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["report", str(run), "--format", fmt, "--out", "-", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _texts(component) -> list[str]:
    """Every string in a Dash component tree (what the page would show)."""
    if component is None or isinstance(component, (int, float)):
        return []
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in _texts(c)]
    return _texts(getattr(component, "children", None))


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_reader_on_a_damaged_run(m: Mutation, run_copy, capsys):
    m.damage(run_copy)
    code, out, err = _report(run_copy, "json", capsys)
    assert "Traceback" not in err and code in (0, 1, 2), err
    data = json.loads(out)
    verdict, gaps = data["verdict"], data["gaps"]
    assert code == m.code, (code, verdict, gaps)
    if m.events == "none":
        assert verdict == NOT_JUDGED and "no readable events" in data["not_judged"]
    elif m.events == "some":
        assert verdict != C.PASS and verdict.startswith("PASS, but ")
        assert any(g.startswith("skipped: events") for g in gaps)
    if m.code == 2 and m.events == "ok":   # no start record
        assert verdict == NOT_JUDGED and "no start record" in data["not_judged"]
    where = " ".join(gaps + [data["not_judged"] or ""])
    assert m.named in where if m.named else data["skipped"] == [], where
    assert "flow1: error: NOT JUDGED: " in err if code == 2 else "flow1: error" not in err
    for g in gaps:   # the console (stderr here: the report went to stdout) says every gap
        assert f"gap: {g}" in err, (g, err[-2000:])

    code_md, page_md, err_md = _report(run_copy, "md", capsys)
    assert code_md == code and "Traceback" not in err_md
    assert f"**{md(verdict)}**" in page_md.splitlines()[2]
    for g in gaps:
        assert f"- {md(g)}" in page_md

    code_html, page, err_html = _report(run_copy, "html", capsys)
    assert code_html == code and "Traceback" not in err_html
    shown = html_lib.unescape(re.search(r'id="verdict">(.*?)</span>', page).group(1))
    assert shown == verdict
    items = [html_lib.unescape(x) for x in re.findall(r"<li>(.*?)</li>", page, re.S)]
    for g in gaps:
        assert g in items, (g, items)
    if m.name == "heatmap a link outside":
        secret = (run_copy.parent / "elsewhere" / "secret.png").read_bytes()
        assert base64.b64encode(secret).decode()[:200] not in page, "the linked file was embedded"
        # no timeline here: the curves, the cluster map and the run's own heatmap
        assert page.count("data:image/png;base64,") == 3, "the curves, the cluster map and the run's own heatmap"

    # the panel's callbacks, on a real follower: same verdict, same gaps, nothing raised
    list_runs, refresh = panel_callbacks(Runs(run_copy))
    assert list_runs(1, None) == [run_copy.name]
    drawn = dict(zip(REFRESH_OUTPUTS, refresh(1, run_copy.name, None)))
    assert not str(drawn["updated"]).startswith("not redrawn"), drawn["updated"]
    assert drawn["verdict"] == verdict, (drawn["verdict"], verdict)
    shown = _texts(drawn["result-head"])
    for g in gaps:
        assert g in shown, (g, shown)
    if m.name == "heatmap a link outside":
        img = " ".join(str(c.src) for c in _walk(drawn["heatmap"]) if hasattr(c, "src"))
        assert base64.b64encode(secret).decode()[:200] not in img


def _walk(component):
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from _walk(c)
    elif component is not None and not isinstance(component, (str, int, float)):
        yield component
        yield from _walk(getattr(component, "children", None))


def test_the_clean_run_is_a_plain_pass(run_copy, capsys):
    """The base of every mutation above is judged whole: the damage is what changes it."""
    code, out, err = _report(run_copy, "json", capsys)
    data = json.loads(out)
    assert (code, data["verdict"], data["gaps"], data["skipped"]) == (0, C.PASS, [], []), data
    assert data["completeness"]["state"] == "stopped" and data["summary"]["iterations"] == 5
    assert data["summary"]["state_actions"]["heatmaps"] == ["heatmaps/iter_000003.png"]


def test_a_bad_row_is_skipped_not_its_part(run_copy, capsys):
    """The Recorder writes a flush's rows as one part: one foreign row must not hide the
    FAIL flushed with it."""
    _events_part(run_copy, [_row(code="NOPE"), _row(code=C.WORKER_DIED, module=C.WORKER, status=C.FAIL,
                                                     message="worker 1 died", worker_index=1)])
    code, out, _ = _report(run_copy, "json", capsys)
    data = json.loads(out)
    assert code == 1 and data["verdict"] == C.FAIL and data["counts"][C.FAIL] == 1
    assert data["skipped"] == [f"events/{LAST}: 1 of 2 row(s) skipped (row 0: unknown code 'NOPE')"]


def test_allow_blind_accepts_a_run_without_a_clean_stop_and_a_watcher_off(run_copy, capsys):
    _old_heartbeat(run_copy)
    assert _report(run_copy, "json", capsys, "--allow-blind")[0] == 0
    rec = RecorderCore(str(run_copy), "run-1", flush_interval_s=3600)   # a restarted writer: run.json kept
    rec.add_events([Event(C.WATCHER_OFF, "the probe of node n1 stopped answering",
                          {"what": "EnvRunner liveness on node n1", "watcher": "probe n1"}),
                    Event(C.HUB_RESTARTED, "hub restarted", {"down_s": 4.5, "previous_pid": 10, "pid": 11})])
    rec.close()
    code, out, _ = _report(run_copy, "json", capsys, "--fail-on", "WARN")
    data = json.loads(out)
    assert code == 1 and data["status"] == C.PASS
    assert data["verdict"] == ("PASS, but not watched: EnvRunner liveness on node n1 (probe n1); "
                               "hub restarted 1 time(s)")
    assert any("after 4.5 s down, pid 10 -> 11" in g for g in data["gaps"])
    assert _report(run_copy, "json", capsys, "--fail-on", "WARN", "--allow-blind")[0] == 0


def test_the_panel_says_live_only_while_the_run_runs(run_copy):
    _, refresh = panel_callbacks(Runs(run_copy))
    assert dict(zip(REFRESH_OUTPUTS, refresh(1, run_copy.name, None)))["updated"].startswith("stopped cleanly · ")
    (run_copy / "stop.json").unlink()   # heartbeat fresh: the writer may still be at work
    _, refresh = panel_callbacks(Runs(run_copy))
    assert dict(zip(REFRESH_OUTPUTS, refresh(1, run_copy.name, None)))["updated"].startswith("live · ")


def test_a_run_still_running_says_so(run_copy, capsys):
    (run_copy / "stop.json").unlink()   # heartbeat fresh: the writer may still be at work
    code, out, _ = _report(run_copy, "json", capsys)
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "PASS, but still running"
    assert data["gaps"][0].startswith("still running (iteration 5, last data at ")


def test_run_strings_are_escaped_where_they_are_shown(run_copy, capsys):
    evil, markup = EVIL, MARKUP
    _markup(run_copy)
    log = (run_copy / "flow1.log").read_text()
    assert not re.search(r"^2026-01-01 00:00:00\.000 \| FLOW1 \| PASS", log, re.M), "a forged line"
    assert "\\n2026-01-01 00:00:00.000 | FLOW1 | PASS" in log and "\\x1b[2J" in log
    assert all(line[:4].isdigit() for line in log.splitlines())

    _, page_md, err = _report(run_copy, "md", capsys)
    assert "<script" not in page_md and "&lt;script&gt;" in page_md and "\\`x\\` \\| y" in page_md
    assert not [line for line in page_md.splitlines() if line.startswith("2026-01-01 00:00:00.000")]
    assert "\x1b" not in err and "\\x1b[2J" in err
    _, page, _ = _report(run_copy, "html", capsys)
    assert "<script" not in page.lower() and "&lt;script&gt;" in page

    _, refresh = panel_callbacks(Runs(run_copy))
    drawn = dict(zip(REFRESH_OUTPUTS, refresh(1, run_copy.name, None)))
    names = [t.name for t in drawn["policy-graph"].data]
    assert html_lib.escape(markup, quote=False) in names and markup not in names, names
    hover = [h for t in drawn["timeline-graph"].data for h in t.text]
    assert hover and all("<" not in h for h in hover)
    assert evil in _texts(drawn["cause"]), "a Dash text node holds the raw string (React shows it as text)"


def test_the_follower_marks_a_bad_part_seen_and_never_reads_it_again(run_copy):
    from flow1_ray.report.follow import RunFollower

    (run_copy / "events" / LAST).write_text("not parquet")
    f = RunFollower(run_copy)
    f.poll()
    assert [s for s in f.skipped if LAST in s] and f.report().verdict.startswith("PASS, but ")
    _events_part(run_copy, [_row(code=C.WORKER_DIED, module=C.WORKER, status=C.FAIL, message="late")])
    f.poll(force=True)   # now, not after the throttle
    assert f.counts[C.FAIL] == 0 and len([s for s in f.skipped if LAST in s]) == 1, "read once, named once"


def test_load_events_raises_one_line_and_read_table_names_what_it_skipped(run_copy):
    from flow1_ray import Flow1InputError, load_events
    from flow1_ray.rundir.reading import read_table

    good = load_events(run_copy).num_rows
    (run_copy / "events" / LAST).write_bytes(b"")
    with pytest.raises(Flow1InputError, match=f"cannot read events under .*{LAST}") as e:
        load_events(run_copy)
    assert "\n" not in str(e.value)
    loaded = read_table(run_copy, "events")
    assert loaded.table.num_rows == good and len(loaded.skipped) == 1 and LAST in loaded.skipped[0]


# -- another uid, an object store that does not answer, a browser ------------------------------
NOBODY = 65534


def _as_nobody(args: list[str], cli_env: dict) -> subprocess.CompletedProcess:
    """The CLI as uid 65534 (tests/jobs/as_uid.py: it drops root before reading the run)."""
    return subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "jobs" / "as_uid.py"), str(NOBODY), *args],
                          capture_output=True, text=True, timeout=120,
                          env={**cli_env, "HOME": "/nonexistent", "MPLCONFIGDIR": tempfile.gettempdir()})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another uid")
def test_a_directory_the_process_may_not_read(template, cli_env):
    base = Path(tempfile.mkdtemp(prefix="flow1-uid-"))
    try:
        os.chmod(base, 0o755)   # nobody may reach what is inside, not read the run
        run = base / "run"
        shutil.copytree(template, run, symlinks=True)
        os.chmod(run, 0o700)
        r = _as_nobody(["report", str(run), "--format", "md", "--out", "-"], cli_env)
        assert r.returncode == 2 and r.stderr == f"flow1: error: run directory not readable: {run} " \
                                                 f"(permission denied)\n", r.stderr
        os.chmod(run, 0o755)
        for sub in run.rglob("*"):
            if not sub.is_symlink():
                os.chmod(sub, 0o755 if sub.is_dir() else 0o644)
        os.chmod(run / "events", 0o700)   # the run readable, its events not
        r = _as_nobody(["report", str(run), "--format", "json", "--out", "-"], cli_env)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        data = json.loads(r.stdout)
        assert data["verdict"] == NOT_JUDGED and "no readable events" in data["not_judged"]
        assert any(s.startswith("events: cannot list") and "Permission denied" in s for s in data["skipped"])
        assert r.stderr.strip().splitlines()[-1].startswith("flow1: error: NOT JUDGED: no readable events")
        serve = _as_nobody(["serve", str(run / "events"), "--port", "0"], cli_env)
        assert serve.returncode == 2 and serve.stderr.startswith("flow1: error: ") and "Traceback" not in serve.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_object_store_that_does_not_answer(cli_env, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed once the block ends: nothing listens there
    uri = f"s3://flow1-runs/team/run1?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    from conftest import S3_ENV

    env = {**cli_env, **S3_ENV}
    for args in (["report", uri], ["serve", uri, "--port", "0"]):
        r = subprocess.run([sys.executable, "-m", "flow1_ray", *args], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("flow1: error: cannot reach s3://flow1-runs/team/run1"), r.stderr


def test_diagnose_imports_nothing_the_file_names_and_judges_no_all_nan_file(tmp_path, cli_env):
    marker = tmp_path / "imported"
    (tmp_path / "evil_env.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    lines = [{"training_iteration": i, "config": {"env": "evil_env:Env", "lr": 3e-4},
              "env_runners": {"episode_return_mean": 20.0 + i},
              "learners": {"default_policy": {"entropy": 0.6, "mean_kl_loss": 0.01, "policy_loss": -0.01,
                                              "vf_loss": 1.0, "default_optimizer_learning_rate": 3e-4}}}
             for i in range(1, 8)]
    good = tmp_path / "result.json"
    good.write_text("\n".join(json.dumps(x) for x in lines))
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), cli_env.get("PYTHONPATH", "")])}

    def diagnose(*args):
        return subprocess.run([sys.executable, "-m", "flow1_ray", "diagnose", *map(str, args), "--json", "-"],
                              capture_output=True, text=True, env=env, timeout=120)

    r = diagnose(good)
    assert r.returncode == 0 and not marker.exists(), "a module named inside the file was imported"
    data = json.loads(r.stdout)
    assert any("no action space" in n for n in data["not_assessable"]) and data["verdict"].startswith("PASS, but ")
    nan = tmp_path / "nan.json"
    nan.write_text("\n".join(json.dumps({"training_iteration": i, "env_runners": {"episode_return_mean": "NaN"},
                                         "learners": {"default_policy": {"entropy": float("nan"),
                                                                         "mean_kl_loss": float("nan")}}})
                             for i in range(1, 5)))
    r = diagnose(nan)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["verdict"] == NOT_JUDGED and "0 finding(s)" not in r.stderr.splitlines()[-1]
    assert r.stderr.splitlines()[-1].startswith("flow1: error: NOT JUDGED: ")


@needs_browser
def test_the_panel_in_chromium_names_the_skipped_parts(run_copy, cli_env):
    (run_copy / "events" / LAST).write_text("not parquet")
    _outside_png(run_copy)
    with Served(run_copy, env=cli_env) as served:
        d = chrome()
        try:
            d.get(served.url)
            gaps = wait_for(lambda: text(d, "gaps"), 20)
            assert gaps and f"skipped: events/{LAST}" in gaps and "heatmaps/iter_000099.png: a link" in gaps, gaps
            assert text(d, "verdict").startswith("PASS, but ")
            assert text(d, "result-verdict") == text(d, "verdict")
            assert wait_for(lambda: text(d, "n-iteration") == "5", 10)
            assert all(u.startswith((served.url, "data:")) for u in requested_urls(d)), "nothing from elsewhere"
            assert_no_alert(d)
        finally:
            d.quit()
