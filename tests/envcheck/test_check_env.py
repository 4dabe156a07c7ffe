"""check_env's public interface: what it accepts, what it returns, what it leaves behind."""

from __future__ import annotations

import gymnasium as gym
import pytest

import zoo
from flow1_ray import Flow1InputError, Report, check_env
from flow1_ray.common import codes as C


@pytest.mark.parametrize("target", [
    "CartPole-v1", gym.make("CartPole-v1"), "zoo:Base", zoo.Base, lambda: zoo.Base(), "flow1_ray.envcheck.demo:faulty_cartpole",
], ids=["id", "instance", "module:class", "class", "factory", "module:factory"])
def test_accepted_targets(target):
    report = check_env(target, steps=100)
    assert isinstance(report, Report)
    assert report.summary["steps"] == 100
    assert {e.module for e in report.events} >= {C.ENV_SPEC, C.REWARD_STATS}


@pytest.mark.parametrize("target,fragment", [
    ("NoSuchEnv-v0", "unknown env id 'NoSuchEnv-v0'"),
    ("nosuch:Env", "cannot import module 'nosuch'"),
    ("zoo:Missing", "module 'zoo' has no attribute 'Missing'"),
    ("zoo:Base.horizon", "is a int, expected an Env class, instance or factory"),
    (zoo.CastToFloat64, "needs argument(s) env"),
    (42, "expected a gymnasium.Env"),
])
def test_bad_targets_are_input_errors(target, fragment):
    with pytest.raises(Flow1InputError) as e:
        check_env(target, steps=10)
    assert fragment in str(e.value)


def test_user_instance_is_left_as_it_was():
    env = zoo.cast_actions_env()
    base_step = type(env.unwrapped).step
    check_env(env, steps=50)
    assert "step" not in vars(env.unwrapped)  # the action probe is gone
    assert type(env.unwrapped).step is base_step
    env.reset(seed=0)
    env.step(env.action_space.sample())  # still usable: check_env does not close a user's env


def test_report_interface():
    report = check_env(zoo.InfoReused, steps=200)
    assert report.status == C.WARN
    assert report.codes() == {C.INFO_MUTATION_DETECTED}
    assert C.CHECKS_PASSED in report.codes(C.PASS)
    assert report.exit_code() == 0 and report.exit_code(C.WARN) == 1
    assert '"status": "WARN"' in report.to_json()


def test_every_step_is_checked_over_several_episodes():
    report = check_env("CartPole-v1", steps=1000, seed=0)
    s = report.summary
    assert s["steps"] == 1000 and s["episodes"] >= 20
    assert s["modules"][C.ACTION_PIPE]["actions"] == 1000
    assert s["modules"][C.ACTION_PIPE]["cast_checked"] == 1000


def test_constructor_crash_is_env_crashed():
    def broken():
        raise OSError("simulator binary not found")

    report = check_env(broken, steps=10)
    (hit,) = [e for e in report.events if e.code == C.ENV_CRASHED]
    assert "make() raised OSError: simulator binary not found" in hit.message


def test_flow1_internal_error_is_a_finding_not_a_crash():
    report = check_env(zoo.CyclicInfo, steps=100)
    (hit,) = [e for e in report.events if e.code == C.FLOW1_INTERNAL]
    assert hit.status == C.WARN and "RecursionError" in hit.message
    assert report.summary["steps"] == 100


def test_advisories_in_every_rendering(tmp_path):
    report = check_env(zoo.SparseReward, steps=1000)
    assert report.status == C.PASS and report.codes() == set() and report.exit_code(C.WARN) == 0
    assert [e.code for e in report.advisories()] == [C.REWARD_SPARSE]
    assert report.to_dict()["advisories"] == [C.REWARD_SPARSE]
    md = report.to_markdown()
    assert "0 FAIL, 0 WARN" in md and "(1 advisory)" in md and "| PASS | REWARD_SPARSE | advisory: " in md
    import io

    from rich.console import Console

    from flow1_ray.report.render import print_report

    con = Console(file=io.StringIO(), width=300)
    print_report(con, report)
    out = con.file.getvalue()
    assert "| REWARD_STATS | PASS | REWARD_SPARSE advisory: " in out and "REWARD_SPARSE (advisory)" in out
    assert "flow1 check: PASS (0 FAIL, 0 WARN, 1 advisory)" in out


class _NoSampleSpace(gym.spaces.Space):
    """A valid space (it has contains) from which nothing can be sampled."""

    def contains(self, x):
        return isinstance(x, str)


class _Commanded(zoo.Base):
    action_space = _NoSampleSpace()


def test_text_actions_are_sampled_and_a_space_without_sample_stops_cleanly():
    class TextCommands(zoo.Base):
        action_space = gym.spaces.Text(max_length=3, charset="lr")

    report = check_env(TextCommands, steps=200)
    assert report.status == C.PASS and report.summary["steps"] == 200
    report = check_env(_Commanded, steps=200)
    assert report.codes() == set() and report.summary["steps"] == 0
    assert report.summary["stopped_early"].startswith("action_space.sample() raised NotImplementedError")
