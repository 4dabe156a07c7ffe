"""Hostile input on the command line: each is one line on stderr and exit 2, never a traceback,
a hang or a memory blow-up. Measured before the guards: ``flow1 diagnose`` on JSON nested
100,000 deep ended in a RecursionError traceback, on a 100,000-digit integer in a ValueError
traceback; on a named pipe without a writer it hung; on ``/dev/zero`` it read until
MemoryError."""

from __future__ import annotations

import json
import os

import pytest

from flow1_ray.cli.main import main


def _one_line_error(capsys, args: list[str]) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("flow1: error: ") and "Traceback" not in err, err
    return err


def _result_line(extra: str = "") -> str:
    return ('{"training_iteration": 1, "learners": {"default_policy": {"entropy": 0.5}}' + extra + "}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("content, says", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    (_result_line(', "x": ' + "9" * 100_000), "unreadable JSON value"),
    ("{not json", "not JSON"),
], ids=["nested-100000-deep", "integer-of-100000-digits", "not-json"])
def test_diagnose_refuses_json_it_cannot_read_in_one_line(tmp_path, capsys, content, says):
    p = tmp_path / "result.json"
    p.write_text(_result_line() + "\n" + content + "\n")
    err = _one_line_error(capsys, ["diagnose", str(p)])
    assert f"{p}:2" in err and says in err, err


@pytest.mark.timeout(60)
def test_diagnose_refuses_a_named_pipe_without_a_writer_and_a_device(tmp_path, capsys):
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    assert "is a named pipe; expected a regular file" in _one_line_error(capsys, ["diagnose", str(fifo)])
    assert "is a character device" in _one_line_error(capsys, ["diagnose", "/dev/zero"])


@pytest.mark.timeout(60)
def test_a_thresholds_file_that_is_a_device_or_too_deep_is_one_line(tmp_path, capsys):
    assert "is a character device" in _one_line_error(capsys, ["check", "--env", "CartPole-v1", "--thresholds",
                                                                "/dev/zero"])
    deep = tmp_path / "t.json"
    deep.write_text("{" + '"a": {' * 50_000 + "}" * 50_001)
    assert "nested too deep" in _one_line_error(capsys, ["check", "--env", "CartPole-v1", "--thresholds", str(deep)])
    small = tmp_path / "ok.json"
    small.write_text(json.dumps({"_comment": "x"}))
    code = main(["check", "--env", "CartPole-v1", "--steps", "50", "--thresholds", str(small)])
    assert code == 0, capsys.readouterr().err   # a good file still works
