"""The last-word process: real processes stand in for the Algorithm's and the hub's, the
stop record is read back from real files."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from flow1_ray.hub import lastword
from flow1_ray.rundir.runrecord import STOP_JSON, write_heartbeat, write_stop


@pytest.fixture
def procs():
    """Two sleeping processes: the owner (the Algorithm's) and the hub."""
    owner, hub = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2))
    yield owner, hub
    for p in (owner, hub):
        p.kill()
        p.wait()


def _end(p):
    p.kill()
    p.wait()


def test_the_owner_dies_and_the_hub_ends_without_a_word(tmp_path, procs):
    owner, hub = procs
    write_heartbeat(tmp_path, 7)
    _end(owner)
    _end(hub)
    assert lastword.watch(str(tmp_path), owner.pid, hub.pid, grace_s=5.0) is True
    rec = json.loads((tmp_path / STOP_JSON).read_text())
    assert rec["clean"] is False and rec["iteration"] == 7 and rec["written_by"] == "last-word", rec
    assert f"pid {owner.pid}" in rec["how"] and "rows the hub had not flushed are lost" in rec["how"]


def test_the_hub_word_stands(tmp_path, procs):
    owner, hub = procs
    write_stop(tmp_path, 3, "the hub's own", clean=False)
    _end(owner)
    t0 = time.monotonic()
    assert lastword.watch(str(tmp_path), owner.pid, hub.pid, grace_s=0.5) is False   # the hub outlived the grace
    assert time.monotonic() - t0 < 5
    assert json.loads((tmp_path / STOP_JSON).read_text())["how"] == "the hub's own"


def test_a_hub_that_ends_first_leaves_nothing_to_say(tmp_path, procs):
    owner, hub = procs
    _end(hub)     # restarted by Ray (its successor has its own last word), or a stopped run's hub
    assert lastword.watch(str(tmp_path), owner.pid, hub.pid) is False
    assert not (tmp_path / STOP_JSON).exists()


def test_started_as_the_hub_starts_it_it_outlives_its_launcher(tmp_path, procs):
    owner, _ = procs
    # the test process is the hub here: the last word waits on it and on the owner
    launcher = lastword.start(str(tmp_path), owner.pid, grace_s=1.0)
    assert launcher is not None and launcher.wait(timeout=30) == 0   # the launcher ends at once
    _end(owner)
    # this "hub" lives on: the last word waits its grace, then finds no record and writes it
    deadline = time.monotonic() + 30
    while not (tmp_path / STOP_JSON).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert json.loads((tmp_path / STOP_JSON).read_text())["written_by"] == "last-word"
