"""The live half of ``tests/cli/test_cli_output.py`` (real Ray and RLlib runs). What `flow1 train`
and `flow1 check` print: flow1's lines and a progress line; Ray's own output (its and RLlib's
logging, forwarded worker lines, warnings, C++ lines) in `<run dir>/ray.log`, and on the
terminal too with --verbose. The real CLI on tiny budgets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_lines import flow1_only, run_cli
from flow1_ray.rundir.raylog import RAY_LOG


#: a warning RLlib logs in the driver at each PPO build (ray 2.60)
RLLIB_SAYS = "You are running PPO on the new API stack!"


def _run_dir(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


@pytest.mark.slow
def test_flow1_train_prints_flow1s_lines_and_puts_rays_in_the_run_directory(tmp_path, cli_env, attached_env):
    """Two iterations, one EnvRunner: too short to judge learning (exit 2, said on the end
    screen; --allow-short exits as the findings say); the terminal holds flow1's lines and one
    line per iteration; Ray's start, RLlib's warnings and the EnvRunner's forwarded lines are in
    ray.log. With --verbose the same run shows Ray's lines on stderr (and still logs them); that
    one joins the tests' Ray (RAY_ADDRESS, as in a RayJob), the first starts its own."""
    r = run_cli("train", "--iterations", "2", "--env-runners", "1", "--output-dir", str(tmp_path / "q"),
                env=cli_env)
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert "not enough data to judge learning: 2 iterations" in r.stdout + r.stderr, r.stdout + r.stderr
    print(f"flow1 train --iterations 2: {len(r.stdout.splitlines())} stdout lines, "
          f"{len(r.stderr.splitlines())} stderr lines")
    assert flow1_only(r.stdout) == [] and flow1_only(r.stderr) == [], r.stdout + r.stderr
    assert len(re.findall(r"^iter \d/2 ", r.stdout, re.M)) == 2, r.stdout
    log = _run_dir(tmp_path / "q") / RAY_LOG
    assert log.is_file() and log.stat().st_size > 0
    text = log.read_text()
    assert RLLIB_SAYS in text and "(SingleAgentEnvRunner pid=" in text, text   # the driver's, a worker's
    v = run_cli("train", "--iterations", "1", "--env-runners", "1", "--verbose", "--allow-short", "--output-dir",
                str(tmp_path / "v"), env=attached_env)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
    assert RLLIB_SAYS in v.stderr and "(SingleAgentEnvRunner pid=" in v.stderr and flow1_only(v.stderr), v.stderr
    assert flow1_only(v.stdout) == [] and RLLIB_SAYS in (_run_dir(tmp_path / "v") / RAY_LOG).read_text()
