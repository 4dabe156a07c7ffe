"""``flow1 replay`` on entries recorded from real gymnasium vector envs (the runner's recorder and
the run directory's format, the CLI in a child process): a crash that depends on earlier
episodes is reproduced at its step, an env whose reset reads global randomness diverges, a hang
is a hang within the step timeout, and a damaged entry is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from flow1_ray.rundir.repro import write_entry
from flow1_ray.runner.flight import FlightRecorder, rng_state, unseeded_first


def _entry(tmp_path, cls_name: str, at: int = 50, steps: int = 400):
    """Runs ``replay_envs.<cls_name>`` in a 1-sub-env vector env with the recorder wired as a
    runner wires it (resets without a seed, as RLlib's after the first), until it raises; the
    entry written as the hub writes it."""
    import replay_envs

    cls = getattr(replay_envs, cls_name)
    env = gym.vector.SyncVectorEnv([lambda: cls({"at": at})])
    rec = FlightRecorder(1)
    sub, in_step = env.envs[0], [False]
    reset = sub.reset

    def wrapped(*args, **kwargs):
        state = rng_state(sub)
        if state is None and kwargs.get("seed") is None and unseeded_first(sub):
            kwargs["seed"] = 1234
        obs, info = reset(*args, **kwargs)
        rec.on_reset(0, kwargs.get("seed"), kwargs.get("options"), state, obs, in_step[0])
        return obs, info
    sub.reset = wrapped
    obs, _ = env.reset()
    rng = np.random.default_rng(5)
    for _ in range(steps):
        a = rng.integers(0, 2, size=1)
        in_step[0] = True
        try:
            obs, r, *_ = env.step(a)
        except ValueError as e:
            d = rec.dump(0)
            d["arrays"]["failed_action"] = a[0]
            man = {"finding": "ENV_CRASHED", "env": {"how": "class", "spec": f"replay_envs:{cls_name}",
                                                      "env_config": {"at": at}, "worker_index": 1},
                   "start": d["meta"], "failure": {"call": "step", "step": d["meta"]["steps"] + 1,
                                                   "exception": f"ValueError: {e}"}}
            return write_entry(tmp_path, "train1-pid1-001-env_crashed", d["arrays"], man).path
        in_step[0] = False
        rec.on_step(a, obs, r)
    raise AssertionError("the env never raised")


def _replay(entry, cli_env, *extra):
    return subprocess.run([sys.executable, "-m", "flow1_ray", "replay", str(entry), "--json", "-", *extra],
                          capture_output=True, text=True, env=cli_env, timeout=120)


def test_a_crash_that_depends_on_earlier_episodes_is_reproduced_at_its_step(tmp_path, cli_env):
    entry = _entry(tmp_path, "CrashesAtLifeStep")
    man = json.loads((tmp_path / "repro" / "train1-pid1-001-env_crashed" / "manifest.json").read_text())
    assert man["start"]["from"] == "creation" and len(man["start"]["episodes"]) >= 2   # episodes before the crash
    p = _replay(entry, cli_env)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout[:p.stdout.rindex("}") + 1])
    assert out["result"] == "reproduced" and out["step"] == 50, out
    assert out["exception"].startswith("ValueError: cart left the track at life step 50 (x=")
    assert out["frame"].startswith("step (replay_envs.py:"), out
    assert "flow1 replay: reproduced at step 50: ValueError: cart left the track" in p.stdout


def test_an_env_whose_reset_reads_global_randomness_diverges_at_its_first_observation(tmp_path, cli_env):
    entry = _entry(tmp_path, "GlobalRandomReset")
    p = _replay(entry, cli_env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "flow1 replay: diverged at step 0 (the observation after the reset of episode 1 differs" in p.stdout


def test_a_step_that_hangs_is_a_hang_within_the_step_timeout(tmp_path, cli_env):
    entry = _entry(tmp_path, "CrashesAtLifeStep", at=30)
    man_path = tmp_path / "repro" / "train1-pid1-001-env_crashed" / "manifest.json"
    man = json.loads(man_path.read_text())
    man["env"]["spec"] = "replay_envs:HangsAtLifeStep"   # the same life, now hanging where it raised
    man_path.write_text(json.dumps(man))
    p = _replay(entry, cli_env, "--step-timeout", "2")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "flow1 replay: hung at step 30 (step 30 did not return within 2 s)" in p.stdout, p.stdout
    assert "time.sleep" in p.stderr or "replay_envs.py" in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("make, says", [
    (lambda p: p / "nowhere", "not a repro entry"),
    (lambda p: (p / "repro" / "e").mkdir(parents=True) or p / "repro" / "e", "no manifest.json"),
])
def test_a_bad_entry_is_one_line_and_exit_2(tmp_path, cli_env, make, says):
    p = _replay(make(tmp_path), cli_env)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_load_hands_back_the_env_one_step_before_the_failure_and_its_action_fails_it(tmp_path):
    """In this process, as in a notebook: the env replayed to just before the failing step; the
    failing action raises the run's exception there."""
    from flow1_ray.replay import failing_action, load

    entry = _entry(tmp_path, "CrashesAtLifeStep")
    env = load(entry, steps_before=1)
    assert env.unwrapped.life == 49
    with pytest.raises(ValueError, match="cart left the track at life step 50"):
        env.step(failing_action(entry))
    assert load(entry, steps_before=10).unwrapped.life == 40
