"""The traps that look like success (a reward paid for a change the env made itself; an
observation that knows the future): the reward-logic audit (REWARD_UNEARNED) and the
temporal-leakage advisory (OBS_LEAKAGE), each found on its planted env with its code and
silent on the correct look-alikes and on real envs nobody here wrote."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import traps
from test_third_party_envs import _require
from flow1_ray import check_env
from flow1_ray.common import codes as C
from flow1_ray.checks.env.attributes import attribute_snapshot, diff_lines
from flow1_ray.checks.env.reward_logic import RewardLogicAudit

E = "ray.rllib.examples.envs.classes"
TRAP_CODES = {C.REWARD_UNEARNED, C.OBS_LEAKAGE}


def _found(report, code):
    return [e for e in report.events if e.code == code]


# --- the audit on planted envs ------------------------------------------------------------


@pytest.mark.parametrize("env, attribute, period", [
    (traps.MovingGoal, "goal", 100),
    (traps.HiddenRefuel, "fuel", 50),
    (traps.RandomTeleportGoal, "goal", None),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_planted_reward_logic_is_a_fail_with_attribute_period_and_diff(env, attribute, period, seed):
    report = check_env(env, steps=1000, seed=seed, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    ev = f.evidence
    assert f.status == C.FAIL and f.module == C.REWARD_LOGIC and ev["attribute"] == attribute
    assert ev["period"] == period
    assert ev["counterfactual"]["independent"] >= 3 and ev["counterfactual"]["dependent"] == 0
    assert ev["lag"] == 0 and ev["reward_jump"] > 0
    assert f"- {attribute} = " in ev["diff"] and f"+ {attribute} = " in ev["diff"]
    assert f"env attribute {attribute} changes inside step()" in f.message
    assert "the reward rises because the env changes" in f.message
    assert report.exit_code() == 1


def test_an_env_that_cannot_be_copied_is_judged_by_its_period_a_warn():
    """No copy (a lock in the env): the period of the moves is the only evidence, a WARN."""
    import threading

    class Uncopyable(traps.MovingGoal):
        def reset(self, *, seed=None, options=None):
            self.lock = threading.Lock()
            return super().reset(seed=seed, options=options)

    report = check_env(Uncopyable(), steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.WARN and f.evidence["period"] == 100
    assert "every 100 steps, a timer (no copy to test the action: copy.deepcopy(env.unwrapped) raised" in f.message


@pytest.mark.parametrize("env, why", [
    (traps.EarnedGoal, "the agent's move to the goal moves it: another action would not"),
    (traps.ScheduledCurriculum, "the goal moves away: the reward drops, nothing to inflate"),
    (traps.HonestMarket, "nothing moves but the price"),
])
def test_look_alikes_are_silent(env, why):
    report = check_env(env, steps=1000, audit_reward=True)
    loud = [e.log_line() for e in report.events if e.code in TRAP_CODES and e.status != C.PASS]
    assert not loud, why
    row = [e for e in report.events if e.module == C.REWARD_LOGIC and e.code == C.CHECKS_PASSED]
    assert row and "env attributes read on 1000 steps" in row[0].message


def test_a_curriculum_that_moves_the_goal_away_is_at_most_an_advisory():
    report = check_env(traps.ScheduledCurriculum, steps=1000, audit_reward=True)
    assert all(e.status == C.PASS for e in _found(report, C.REWARD_UNEARNED))


def test_the_audit_is_off_unless_asked():
    report = check_env(traps.MovingGoal, steps=1000)
    assert not _found(report, C.REWARD_UNEARNED)
    assert not [e for e in report.events if e.module == C.REWARD_LOGIC]


def test_snapshot_reads_numbers_arrays_and_dicts_and_diffs_them():
    env = traps.MovingGoal()
    env.reset(seed=0)
    env.state = {"target_pos": np.array([1.0, 2.0]), "name": "x", "nested": [1, 2, 3]}
    before = attribute_snapshot(env)
    assert {"goal", "agent", "t", "state['target_pos']", "state['nested']"} <= set(before)
    assert not any("np_random" in k for k in before)
    env.state["target_pos"] = np.array([5.0, 2.0])
    after = attribute_snapshot(env)
    assert diff_lines(before, after) == ["- state['target_pos'] = [1. 2.]", "+ state['target_pos'] = [5. 2.]"]


def test_the_audit_never_raises_on_odd_attributes():
    class Odd(traps.MovingGoal):
        def reset(self, *, seed=None, options=None):
            self.weird = {object(): 1, "n": float("nan"), "big": np.zeros(10_000), "s": "text"}
            return super().reset(seed=seed, options=options)

    audit = RewardLogicAudit(gym.spaces.Discrete(4))
    env = Odd()
    env.reset(seed=0)
    audit.on_reset(env)
    for _ in range(300):
        audit.before_step(env)
        _, r, te, tr, _ = env.step(env.action_space.sample())
        audit.after_step(env, 0, r, te or tr)
    found, said = audit.findings()
    assert "env attributes read on 300 steps" in said["reward_audit"]


def test_cli_audit_reward_names_the_trap_and_exits_1(cli_env, tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "flow1_ray", "check", "--env", "traps:MovingGoal", "--audit-reward",
                        "--json", str(out)], capture_output=True, text=True, env=cli_env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "REWARD_LOGIC" in r.stdout and "REWARD_UNEARNED" in r.stdout and "goal" in r.stdout
    report = json.loads(out.read_text())
    (f,) = [e for e in report["events"] if e["code"] == C.REWARD_UNEARNED]
    assert f["evidence"]["attribute"] == "goal" and "+ goal = " in f["evidence"]["diff"]


# --- temporal leakage --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_field_holding_the_next_price_change_is_a_leakage_advisory(seed):
    report = check_env(traps.LeakyMarket, steps=1000, seed=seed)
    (f,) = _found(report, C.OBS_LEAKAGE)
    assert f.status == C.PASS and f.module == C.OBS_FLOW   # an advisory: the exit code stays 0
    assert f.evidence["field"] == "obs[2]" and f.evidence["predicts"] == "next obs[0]"
    assert f.evidence["partial_r2"] > 0.95 and f.evidence["past_r2"] < 0.1
    assert f.message.startswith("advisory: obs[2] predicts next obs[0]")
    assert report.exit_code() == 0


def test_a_leak_in_a_dict_observation_is_named_by_its_key():
    class DictMarket(traps.LeakyMarket):
        observation_space = gym.spaces.Dict({"price": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
                                             "forecast": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)})

        def _obs(self):
            return {"price": np.array([self.price], np.float32), "forecast": np.array([self.next_change], np.float32)}

    (f,) = _found(check_env(DictMarket, steps=1000), C.OBS_LEAKAGE)
    assert f.evidence["field"] == "obs['forecast']" and f.evidence["predicts"] == "next obs['price']"


def test_physics_with_process_noise_is_not_a_leak():
    """The velocity gets a random kick each step and predicts the next position: physics."""
    for seed in (0, 1):
        report = check_env(traps.NoisyVelocity, steps=1000, seed=seed)
        assert not _found(report, C.OBS_LEAKAGE)
        assert any("observation fields tested" in n for e in report.events if e.module == C.OBS_FLOW
                   for n in (e.evidence.get("notes") or []))


# --- real envs nobody here wrote ----------------------------------------------------------


def _rllib(path, *args):
    mod, cls = path.rsplit(".", 1)
    return lambda: getattr(importlib.import_module(f"{E}.{mod}"), cls)(*args)


REAL = [
    ("CartPole-v1", lambda: gym.make("CartPole-v1")),
    ("Pendulum-v1", lambda: gym.make("Pendulum-v1")),
    ("Acrobot-v1", lambda: gym.make("Acrobot-v1")),
    ("MountainCar-v0", lambda: gym.make("MountainCar-v0")),
    ("Taxi-v3", lambda: gym.make("Taxi-v3")),
    ("SimpleCorridor", _rllib("simple_corridor.SimpleCorridor", {"corridor_length": 10})),
    ("StatelessCartPole", _rllib("stateless_cartpole.StatelessCartPole")),
    ("RepeatAfterMeEnv", _rllib("repeat_after_me_env.RepeatAfterMeEnv", {})),
    ("WindyMazeEnv", _rllib("windy_maze_env.WindyMazeEnv", {})),
    ("LookAndPush", _rllib("look_and_push.LookAndPush")),
    ("DebugCounterEnv", _rllib("debug_counter_env.DebugCounterEnv")),
    ("CartPoleWithDictObservationSpace",
     _rllib("cartpole_with_dict_observation_space.CartPoleWithDictObservationSpace")),
    ("TwoStepGame (multi-agent)", _rllib("multi_agent.two_step_game.TwoStepGame", {})),
    ("RockPaperScissors (multi-agent)", _rllib("multi_agent.rock_paper_scissors.RockPaperScissors", {})),
    ("TicTacToe (multi-agent)", _rllib("multi_agent.tic_tac_toe.TicTacToe")),
]


@pytest.mark.parametrize("name, make", REAL, ids=[r[0] for r in REAL])
def test_real_envs_raise_no_trap_finding(name, make):
    report = check_env(make(), steps=1000, audit_reward=True)
    assert not [e.log_line() for e in report.events if e.code in TRAP_CODES]


#: (env id, package, steps): highway-env steps a traffic simulation (~20 ms a step), so 300
#: steps, enough for the audit's judgement (>= 100 other steps) but not the leakage test's fits
THIRD_PARTY = [("HalfCheetah-v5", "mujoco", 1000), ("Hopper-v5", "mujoco", 1000), ("ALE/Pong-v5", "ale_py", 1000),
               ("MiniGrid-DoorKey-5x5-v0", "minigrid", 1000), ("highway-fast-v0", "highway_env", 300)]


@pytest.mark.parametrize("env_id, module, steps", THIRD_PARTY, ids=[t[0] for t in THIRD_PARTY])
def test_third_party_envs_raise_no_trap_finding(env_id, module, steps):
    _require(module)
    report = check_env(gym.make(env_id), steps=steps, audit_reward=True)
    assert not [e.log_line() for e in report.events if e.code in TRAP_CODES]


# --- live: one runner of a real training run -------------------------------------------------


def test_an_env_behind_gym_make_wrappers_is_audited_without_touching_the_real_env():
    """gym.make puts wrappers (and flow1's action probe on the base env's instance): the copy's
    counterfactual step must run the copy, never the env being checked."""
    gym.register("Flow1MovingGoal-v0", entry_point=traps.MovingGoal, max_episode_steps=400)
    try:
        report = check_env("Flow1MovingGoal-v0", steps=1000, audit_reward=True)
    finally:
        gym.registry.pop("Flow1MovingGoal-v0", None)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.FAIL and f.evidence["counterfactual"]["independent"] >= 3
    # the real episodes kept their length: 400 steps, truncated by TimeLimit
    assert report.summary["episodes"] == 2 and report.summary["modules"][C.ENV_SPEC]["episode_len_mean"] == 400


def test_a_leak_shown_twice_is_found_in_both_fields():
    """A copy of the leaking field must not explain the field away."""
    class TwiceLeaky(traps.LeakyMarket):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)

        def _obs(self):
            return np.array([self.price, self.position, self.next_change, 2 * self.next_change], np.float32)

    found = {f.evidence["field"] for f in _found(check_env(TwiceLeaky, steps=1000), C.OBS_LEAKAGE)}
    assert found == {"obs[2]", "obs[3]"}


def test_a_field_holding_the_steps_random_bonus_leaks_the_reward():
    """The future quantity is the reward: the observation shows the random bonus the next step pays."""
    class Bonus(traps._Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x, self.t = 0.0, 0
            self.bonus = float(self.np_random.normal())
            return np.array([self.x, self.bonus], np.float32), {}

        def step(self, action):
            self.x = float(np.clip(self.x + (1 if action else -1) * 0.1, -1, 1))
            reward, self.bonus = self.bonus - 0.1 * abs(self.x), float(self.np_random.normal())
            self.t += 1
            return np.array([self.x, self.bonus], np.float32), reward, False, self.t >= 100, {}

    (f,) = _found(check_env(Bonus, steps=1000), C.OBS_LEAKAGE)
    assert f.evidence["field"] == "obs[1]" and f.evidence["predicts"] == "the step's reward"


def _copy_computing(env, memo, cpu_s: float):
    """A deep copy of ``env`` that first computes for ``cpu_s`` seconds of this thread's CPU."""
    import copy
    import time

    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass
    out = copy.copy(env)
    out.__dict__ = copy.deepcopy(env.__dict__, memo)
    return out


def test_a_copy_that_waits_is_not_a_slow_copy_and_the_fail_stands():
    """Deepcopies that wait (blocked, as on a busy machine: a CPU or the GIL taken by others)
    cost no CPU: the copies go on and the action test makes the FAIL; a copy over the CPU
    limit once (a collector's pass) does not stop them either."""
    import time

    class WaitingGoal(traps.MovingGoal):
        copies = 0

        def __deepcopy__(self, memo):
            WaitingGoal.copies += 1
            if WaitingGoal.copies <= 5:   # the first copies wait (each over the limit in wall time)
                time.sleep(0.08)
            return _copy_computing(self, memo, 1.05 if WaitingGoal.copies == 2 else 0.0)   # one copy past the limit

    report = check_env(WaitingGoal(), steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.FAIL and f.evidence["counterfactual"]["independent"] >= 3, f.message


def test_an_env_whose_copies_compute_too_long_is_judged_by_its_period():
    """A copy small in objects that computes over a second of CPU (state a C extension copies
    itself, which a deepcopy's memo does not count): the one clock-based stop, twice in a row."""
    class HeavyGoal(traps.MovingGoal):
        def __deepcopy__(self, memo):
            return _copy_computing(self, memo, 1.05)

    report = check_env(HeavyGoal(), steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.WARN and f.evidence["period"] == 100
    assert re.search(r"copying the env took 1\.\d s of CPU \(2 copies in a row over the limit of 1 s\)", f.message)


def test_a_copy_that_shares_the_env_state_voids_the_counterfactuals():
    """A deepcopy that shares state with the env (as a simulator handle would): stepping the
    copy moves the env itself, so its tries say nothing; the period alone is left (a WARN)."""
    import copy

    class SharedGoal(traps.MovingGoal):
        def __deepcopy__(self, memo):
            return copy.copy(self)          # shallow: self.sim is the env's own dict

        def reset(self, *, seed=None, options=None):
            out = super().reset(seed=seed, options=options)
            self.sim = {"ticks": 0}
            return out

        def step(self, action):
            self.sim["ticks"] += 1
            return super().step(action)

    report = check_env(SharedGoal(), steps=1000, audit_reward=True)
    (f,) = _found(report, C.REWARD_UNEARNED)
    assert f.status == C.WARN and f.evidence["period"] == 100
    assert "the copy shares its state" in f.message
