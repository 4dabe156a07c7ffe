"""flow1 check on real third-party envs: a correct env gets no FAIL and no WARN.

These envs are correct by any reasonable standard, so any WARN or FAIL flow1 raises on
them is a false claim about the user's env. Advisories (PASS, documented in the README)
are allowed and printed. Each env needs its package (the ``test`` extra installs them);
without it the test is skipped and says which package is missing.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time

import gymnasium as gym
import pytest

from flow1_ray import check_env
from advisories import CLEAN_ENV_ADVISORIES, env_advisories
from flow1_ray.common import codes as C


#: (env id, the module that registers it, steps). highway-env steps a traffic simulation
#: (~30 ms a step), so it gets the smallest budget that still judges the reward rules.
ENVS = [
    ("HalfCheetah-v5", "mujoco", 1000),
    ("Hopper-v5", "mujoco", 1000),
    ("Ant-v5", "mujoco", 1000),
    ("ALE/Pong-v5", "ale_py", 1000),
    ("MiniGrid-DoorKey-5x5-v0", "minigrid", 1000),
    ("highway-fast-v0", "highway_env", 100),
]


def _require(module: str) -> None:
    """Import the env's package (importing registers its ids), or skip saying why."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} is not installed ({e}); pip install -e '.[test]' brings it")
    if module == "ale_py":
        gym.register_envs(mod)


def _outcome(env_id: str, report, seconds: float) -> str:
    ads = ", ".join(sorted({e.code for e in report.advisories()})) or "none"
    s = report.summary
    return (f"{env_id}: {report.status}, advisories: {ads}; {s['steps']} steps, {s['episodes']} episodes, "
            f"{seconds:.1f} s")


#: Two seeds each, one for the slow highway-env.
CASES = [(e, m, n, seed) for e, m, n in ENVS for seed in ((0,) if m == "highway_env" else (0, 1))]


@pytest.mark.parametrize("env_id,module,steps,seed", CASES, ids=[f"{c[0]}-seed{c[3]}" for c in CASES])
def test_correct_env_gets_no_fail_and_no_warn(env_id, module, steps, seed, record_property):
    _require(module)
    t0 = time.perf_counter()
    report = check_env(env_id, steps=steps, seed=seed)
    line = _outcome(env_id, report, time.perf_counter() - t0)
    record_property("outcome", line)
    print(line)
    assert report.codes(C.WARN) == set(), [e.log_line() for e in report.events if e.status != C.PASS]
    assert env_advisories(report) <= CLEAN_ENV_ADVISORIES, [e.log_line() for e in report.advisories()]
    assert report.summary["steps"] >= steps and report.summary["episodes"] >= 1


def test_pong_frames_get_the_image_advisory():
    _require("ale_py")
    report = check_env("ALE/Pong-v5", steps=300, seed=0)
    (hit,) = [e for e in report.events if e.code == C.OBS_UNNORMALIZED_IMAGE]
    assert hit.advisory and hit.evidence["path"] == "obs"


def test_minigrid_mission_space_is_checked_not_refused():
    """MissionSpace is a custom Space subclass: judged by its own contains() on every step."""
    _require("minigrid")
    report = check_env("MiniGrid-DoorKey-5x5-v0", steps=300, seed=0)
    assert "obs['mission']: MissionSpace, checked by contains()" in report.summary["modules"][C.ENV_SPEC]["notes"]

    class WrongMission(gym.ObservationWrapper):
        def observation(self, obs):
            return {**obs, "mission": "dance with the ghost"}

    report = check_env(lambda: WrongMission(gym.make("MiniGrid-DoorKey-5x5-v0")), steps=300, seed=0)
    (hit,) = [e for e in report.events if e.code == C.OBS_OUT_OF_BOUNDS]
    assert hit.status == C.WARN and "actual str 'dance with the ghost'" in hit.message


def test_cli_on_minigrid_exits_0_even_with_fail_on_warn(cli_env):
    _require("minigrid")
    r = subprocess.run([sys.executable, "-m", "flow1_ray", "check", "--env", "minigrid:MiniGrid-DoorKey-5x5-v0",
                        "--steps", "500", "--fail-on", "WARN"], capture_output=True, text=True, env=cli_env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flow1 check: PASS (0 FAIL, 0 WARN" in r.stdout and "SPACE_INVALID" not in r.stdout
