"""What `flow1 train` and `flow1 check` print: flow1's lines and a progress line; Ray's own
output (its and RLlib's logging, forwarded worker lines, warnings, C++ lines) in
`<run dir>/ray.log`, and on the terminal too with --verbose. The real CLI on tiny budgets."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cli_lines import flow1_only, run_cli
from flow1_ray.rundir.raylog import RAY_LOG

PROGRESS = r"flow1 check: \S+: [\d,]+/[\d,]+ steps, [\d,]+ episodes, \d+ s( \(\w+\))?$"


PROBE = """
import logging, os, sys, threading, warnings
from flow1_ray.rundir.raylog import RayLog

with RayLog(sys.argv[1], verbose=sys.argv[2] == "1") as log:
    print("flow1 line on stdout")
    print("flow1: a line on stderr", file=sys.stderr)
    logging.getLogger("flow1_ray").warning("flow1: a flow1 warning")
    logging.getLogger("ray.rllib").warning("an RLlib warning")
    logging.getLogger("ray").warning("a Ray warning")
    logging.getLogger("somelib").warning("a library warning")
    warnings.warn("a library's UserWarning")
    os.write(2, b"a C++ line on fd 2\\n")
    t = threading.Thread(target=lambda: print("(pid=1) a worker line", file=sys.stderr), name="ray_print_logs")
    t.start()
    t.join()
    print("flow1: after a worker line")
    lone = logging.getLogger("ray.lonely")   # as ray.init leaves "ray": no handler, no propagation
    lone.propagate = False
    lone.warning("a handler-less Ray logger")
    late = logging.getLogger("ray.late")     # a handler bound after the streams changed
    late.propagate = False
    late.addHandler(logging.StreamHandler())
    assert log.adopt() == 1
    late.warning("a handler bound late")
    with log.ray_speaks():                   # ray.shutdown() printing the lines it held back
        print("(pid=2) a held-back worker line", file=sys.stderr)
print("flow1: after the log is closed")
"""
RAYS = ["an RLlib warning", "a Ray warning", "a library warning", "UserWarning: a library's UserWarning",
        "a C++ line on fd 2", "(pid=1) a worker line", "a handler-less Ray logger", "a handler bound late",
        "(pid=2) a held-back worker line"]


@pytest.mark.parametrize("verbose", [False, True])
def test_ray_log_takes_each_road_of_rays_output_and_leaves_flow1s_lines(tmp_path, cli_env, verbose):
    """Each road Ray's output takes (its loggers' handlers, a library's logger, warnings,
    fd 2, the thread that prints forwarded worker lines, a logger left without a handler, a
    handler bound late, ray.shutdown()'s held-back lines) ends in the file; flow1's prints
    and its logger stay on the terminal. --verbose: Ray's lines on stderr too."""
    log = tmp_path / RAY_LOG
    r = subprocess.run([sys.executable, "-c", PROBE, str(log), "1" if verbose else "0"], capture_output=True,
                       text=True, env=cli_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["flow1 line on stdout", "flow1: after a worker line",
                                     "flow1: after the log is closed"]
    flow1_err = ["flow1: a line on stderr", "flow1: a flow1 warning"]
    assert [line for line in r.stderr.splitlines() if line.startswith("flow1")] == flow1_err
    text = log.read_text()
    assert all(ray in text for ray in RAYS) and "flow1" not in text, text
    if verbose:
        assert all(ray in r.stderr for ray in RAYS), r.stderr
    else:
        assert r.stderr.splitlines() == flow1_err


def test_a_long_check_prints_a_progress_line_and_only_flow1s_lines(cli_env):
    """zoo:RunsSlowly (1 ms steps): a 3,000-step check runs for about 4 s, past the 2 s
    after which the progress line shows (appended: stderr is not a terminal); --verbose
    is accepted and shows it from the start."""
    r = run_cli("check", "--env", "zoo:RunsSlowly", "--steps", "3000", env=cli_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert flow1_only(r.stdout) == [] and "flow1 check: PASS" in r.stdout
    progress = r.stderr.splitlines()
    assert progress and all(re.match(PROGRESS, line) for line in progress), r.stderr
    v = run_cli("check", "--env", "zoo:RunsSlowly", "--steps", "300", "--verbose", env=cli_env, timeout=120)
    assert v.returncode == 0, v.stderr
    assert flow1_only(v.stdout) == [] and re.match(PROGRESS, v.stderr.splitlines()[0]), v.stderr
    quick = run_cli("check", "--env", "CartPole-v1", "--steps", "200", env=cli_env, timeout=120)
    assert quick.returncode == 0 and quick.stderr == "" and flow1_only(quick.stdout) == []


