"""`flow1 whatif` refuses what it cannot test before any Ray starts: one line, exit 2. Measured
before the guards: a 10 KB ``--set`` value ended in a MemoryError traceback, ``--seeds
1000000000`` grew memory without bound, ``lr=-1`` and ``lr=1e309`` ran (the -1 written into the
optimizer) and exited 0, an unknown knob, ``lr=nan`` or a corrupt checkpoint started Ray, ran
the baseline and failed 17-40 s later, and a DQN checkpoint under a PPO run's directory was
branched silently with its verdicts filed under the PPO run.

The checkpoints here are what ``Algorithm.save_to_path`` writes for the config
(``class_and_ctor_args.pkl``: the config's state), built from RLlib's own config classes."""

from __future__ import annotations

import json
import pickle
import time

import pytest

from flow1_ray.cli.main import main
from flow1_ray.whatif.run import verdicts


def _checkpoint(path, config_cls: str = "PPO"):
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (PPOConfig() if config_cls == "PPO" else DQNConfig()).environment("CartPole-v1")
    path.mkdir(parents=True)
    with open(path / "class_and_ctor_args.pkl", "wb") as f:
        pickle.dump({"class": config.algo_class, "ctor_args_and_kwargs": ((config.get_state(),), {})}, f)
    return path


def _refused(capsys, args: list[str], whatif_dir) -> str:
    """Refused in one line, and before anything ran: the what-if's folder, made just before Ray
    is joined or started, does not exist."""
    t0 = time.monotonic()
    code = main(["whatif", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("flow1: error: ") and "Traceback" not in err, err
    assert time.monotonic() - t0 < 30, "refused only after a run"
    assert not whatif_dir.exists(), "the what-if began before the input was checked"
    return err


@pytest.mark.parametrize("args, says", [
    (["--set", "lr=-1"], "lr expects a number > 0, actual -1"),
    (["--set", "lr=1e309"], "holds inf; expected finite numbers"),
    (["--set", "lr=nan"], "lr expects a number > 0, actual str 'nan'"),
    (["--set", "gamma=1.5"], "gamma expects a number in (0, 1], actual 1.5"),
    (["--set", "num_epochs=2.5"], "num_epochs expects a number a whole number >= 1"),
    (["--set", "lr=[[0,0.001],[1000,-0.5]]"], "lr expects a number > 0, actual -0.5"),
    (["--set", "lr=" + "1" * 10_000], "the value is 10,000 characters"),
    (["--set", "lr=" + "[" * 5_000 + "]" * 5_000], "characters"),
    (["--set", "lr2=0.001"], "PPOConfig.training() has no knob 'lr2' (close: lr"),
    (["--set", "nosuch.lr=0.001"], "has no method nosuch()"),
    (["--set", "lr=0.001", "--seeds", "1000000000"], "--seeds must be in 1..100, got 1000000000"),
    (["--set", "lr=0.001", "--iterations", "0"], "--iterations must be in 1..10,000"),
    (["--set", "lr=0.001", "--cpus-per-branch", "nan"], "--cpus-per-branch must be a finite number > 0"),
], ids=["negative-lr", "infinite-lr", "nan-lr", "gamma-above-1", "fractional-epochs", "negative-schedule",
        "10-KB-value", "deep-literal", "unknown-knob", "unknown-method", "a-billion-seeds", "no-iterations",
        "nan-cpus"])
def test_bad_knobs_and_budgets_are_refused_before_ray(tmp_path, capsys, args, says):
    ck = _checkpoint(tmp_path / "ck")
    err = _refused(capsys, [str(ck), *args], tmp_path / "whatif")
    assert says in err, err


def test_a_corrupt_checkpoint_is_refused_before_ray(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "class_and_ctor_args.pkl").write_bytes(b"\x80\x05not a pickle at all")
    assert "cannot read the checkpoint's config in" in _refused(capsys, [str(ck), "--set", "lr=0.001"],
                                                                tmp_path / "whatif")


def test_another_algorithms_checkpoint_under_a_run_is_refused(tmp_path, capsys):
    run = tmp_path / "20261206-000000-abcdef"
    (run / "events").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "kind": "run", "algorithm": "PPO"}))
    dqn = _checkpoint(run / "checkpoints" / "iter000001", "DQN")
    err = _refused(capsys, [str(dqn), "--set", "lr=0.001"], run / "whatif")
    assert "is a DQN's" in err and "trained PPO" in err, err


def test_a_branch_that_never_ran_has_no_verdict():
    from flow1_ray.whatif.branch import BranchResult, change
    from flow1_ray.whatif.plan import Branch

    branches = [Branch("baseline"), Branch("lr=0.001", (change("lr", 0.001),))]
    failed = [BranchResult("lr=0.001", s, error="ValueError: boom") for s in range(2)]
    baseline = [BranchResult("baseline", s, curves=[{"iteration": 1, "episode_return_mean": 1.0}]) for s in range(2)]
    assert verdicts(branches, baseline + failed) == []
    assert verdicts(branches, [BranchResult("baseline", 0, error="x")] + failed) == []
