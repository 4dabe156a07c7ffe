"""The reward-logic audit's reach and bounds (issue 45, item 5): it finds an env's state where
the env keeps it (dataclasses, namespaces, nested objects, the task of a dm_control env behind
shimmy, a multi-agent env, PettingZoo behind RLlib's wrappers); one value it cannot read is
skipped and named, not the end of the audit; a read or a copy of its own that hangs or kills
the process is named as the audit's (never ENV_HUNG / ENV_CRASHED), and the env is judged
again without it; an audit that read nothing, nothing that moved, or too few steps says so
and is never a plain PASS; whether it copies the env depends on the env's size, not the clock."""

from __future__ import annotations

import re

import pytest

import audit_envs as A
import pettingzoo_envs
from flow1_ray import check_env
from flow1_ray.checks.env.attributes import AUDIT_MAX_VISITS, AttributeReader
from flow1_ray.common import codes as C


def _found(report, code):
    return [e for e in report.events if e.code == code]


def _audit_note(report) -> str:
    rows = [e for e in report.events if e.module == C.REWARD_LOGIC and e.code == C.CHECKS_PASSED]
    return rows[0].message if rows else ""


def _the_trap(report, attribute):
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.FAIL and f.evidence["attribute"] == attribute, f.message
    assert f.evidence["counterfactual"]["independent"] >= 3
    return f


# --- reach -------------------------------------------------------------------------------------


@pytest.mark.parametrize("env, attribute", [
    (A.DataclassGoal, "pos.goal"),
    (A.NamespaceGoal, "ns.goal"),
    (A.NestedGoal, "world.target.goal"),
])
def test_state_held_in_an_object_is_found(env, attribute):
    _the_trap(check_env(env, steps=1000, audit_reward=True), attribute)


def test_a_dm_control_task_behind_shimmy_is_read_and_its_trap_found():
    """Real dm_control (MuJoCo) cartpole behind shimmy: the fuel of the task is two objects
    down (the shimmy env's dm_control Environment's task); the copy is the shimmy env's."""
    pytest.importorskip("shimmy")
    report = check_env(lambda: A.dm_cartpole(trap=True), steps=1000, audit_reward=True)
    f = _the_trap(report, "_env._task.fuel")
    assert f.evidence["period"] == 50


def test_dm_control_cartpole_behind_shimmy_is_silent():
    pytest.importorskip("shimmy")
    report = check_env(lambda: A.dm_cartpole(trap=False), steps=1000, audit_reward=True)
    loud = [e.log_line() for e in report.events if e.module == C.REWARD_LOGIC and e.status != C.PASS]
    assert not loud and not _found(report, C.WATCHER_OFF), loud
    env = A.dm_cartpole(trap=False)
    env.reset(seed=0)
    assert "_env._step_count" in AttributeReader().snapshot(env)


def test_a_multi_agent_trap_in_a_dataclass_is_found_and_its_earned_twin_silent():
    _the_trap(check_env(A.TeamRefuel, steps=1500, audit_reward=True), "tank.fuel")
    twin = check_env(A.TeamRefuelEarned, steps=1500, audit_reward=True)
    assert not [e.log_line() for e in twin.events if e.module == C.REWARD_LOGIC and e.status != C.PASS]
    assert not _found(twin, C.WATCHER_OFF)


def test_pettingzoo_behind_rllibs_wrapper_is_read_through_its_wrappers():
    """tictactoe: PettingZooEnv -> OrderEnforcing -> AssertOutOfBounds -> TerminateIllegal ->
    raw_env: the board's squares, four objects down, move inside step()."""
    env = pettingzoo_envs.tictactoe()
    env.reset(seed=0)
    snap = AttributeReader().snapshot(env)
    assert any(k.startswith("env.env.env.env.board") for k in snap), sorted(snap)
    report = check_env(pettingzoo_envs.tictactoe, steps=1000, audit_reward=True)
    assert not _found(report, C.WATCHER_OFF) and not _found(report, C.REWARD_UNEARNED)


# --- one bad value ----------------------------------------------------------------------------


def test_a_value_that_cannot_be_read_is_skipped_and_named_and_the_trap_still_found():
    report = check_env(A.BadAttributesGoal, steps=1000, audit_reward=True)
    f = _the_trap(report, "goal")
    note = " ".join(report.summary["modules"][C.REWARD_LOGIC]["notes"])
    assert "lazy (reading it raised RuntimeError: no length for you)" in note, note
    assert "weird" not in note   # an array subclass is read as a plain array: its copy() is never called
    assert not _found(report, C.FLOW1_INTERNAL)
    assert f.evidence["skipped"] == {"lazy": "reading it raised RuntimeError: no length for you"}


def test_an_env_with_more_values_than_the_budget_is_read_up_to_it_and_says_so():
    env = A.ManyNumbers()
    env.reset(seed=0)
    reader = AttributeReader()
    snap = reader.snapshot(env)
    assert reader.truncated and len(snap) <= AUDIT_MAX_VISITS
    report = check_env(A.ManyNumbers, steps=300, audit_reward=True)
    assert f"only the first {AUDIT_MAX_VISITS:,} values of the env's attributes are read" in _audit_note(report)


# --- the audit's own hang or crash, in the isolated check ----------------------------------------


@pytest.mark.parametrize("env, doing, how", [
    (A.BlockingReadGoal, "reading the env's attributes", "did not return within 3 s"),
    (A.HangingCopyGoal, "copying the env", "did not return within 3 s"),
    (A.SegfaultCopyGoal, "copying the env", "was killed by SIGSEGV"),
])
def test_the_audits_own_hang_or_crash_is_named_as_the_audits_and_the_env_judged_without_it(env, doing, how):
    report = check_env(env, steps=1000, audit_reward=True, isolate=True, step_timeout_s=3)
    assert not _found(report, C.ENV_HUNG) and not _found(report, C.ENV_CRASHED)
    (off,) = _found(report, C.WATCHER_OFF)
    assert off.message.startswith(f"the reward-logic audit is off for a reward the env pays for a change it made "
                                  f"itself: {doing}"), off.message
    assert how in off.message and "the env was checked again without the audit" in off.message
    assert report.summary["steps"] == 1000 and report.summary.get("reward_audit_off")
    assert report.verdict.startswith("PASS, but not watched"), report.verdict


# --- blind or too little: said, never PASS --------------------------------------------------------


@pytest.mark.parametrize("env, steps, says", [
    (A.ClosureState, 1000, "it read no numbers in the env's attributes on 1000 steps"),
    ("CartPole-v1", 150, "it read 150 steps, fewer than the 200 it needs to judge"),
])
def test_an_audit_that_could_not_judge_says_so_and_is_not_a_pass(env, steps, says):
    report = check_env(env, steps=steps, audit_reward=True)
    (off,) = _found(report, C.WATCHER_OFF)
    assert says in off.message and "REWARD_UNEARNED is not judged on this env" in off.message, off.message
    assert report.verdict != "PASS" and "not watched" in report.verdict


def test_state_that_never_moves_where_the_audit_reads_is_said():
    """MuJoCo's Hopper keeps its state in MjData (C): the env's Python attributes are constants."""
    pytest.importorskip("mujoco")
    import gymnasium as gym

    report = check_env(gym.make("Hopper-v5"), steps=300, audit_reward=True)
    (off,) = _found(report, C.WATCHER_OFF)
    assert "changed inside step()" in off.message and "where the audit cannot read it" in off.message


# --- copies by size, not by the clock -------------------------------------------------------------


def test_an_env_too_large_to_copy_is_judged_by_its_period_whatever_the_load():
    report = check_env(A.BigCopyGoal, steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.WARN and f.evidence["period"] == 100
    assert re.search(r"a copy of the env is \d\d,\d{3} values \(objects and the items of its containers\) and "
                     r"0\.0 MB of arrays, over the limit of 20,000 values", f.message), f.message


def test_an_env_of_200000_attributes_keeps_its_trap_found_at_a_bounded_cost():
    """Before: every step read all 200,000 and every copy copied them (1,000 steps: 147 s).
    Now the strings are passed over, the goal is found, and the copy's size stops the copies:
    the trap is judged by its period."""
    report = check_env(A.ManyAttributes, steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.WARN and f.evidence["attribute"] == "goal" and f.evidence["period"] == 100
    assert "over the limit of 20,000 values" in f.message
