"""RLlib MultiAgentEnvs: every contract fault is found with its code; the clean envs raise nothing.

The severities follow what RLlib 2.60 does with each fault, and the last tests check that
against RLlib itself: its own ``MultiAgentEpisode`` (the object a MultiAgentEnvRunner fills)
and pre-check raise on the FAIL faults and accept the clean envs.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from gymnasium import spaces

import zoo_multi_agent as zma
from flow1_ray import check_env
from flow1_ray.common import codes as C
from flow1_ray.checks.env.multi_agent import MultiAgentRolloutChecker

STEPS = 400

# (env, code, status, a fragment of the message): SB3-style "expected X, actual Y".
FAULTS = [
    (zma.AgentObsOutOfBounds, C.OBS_OUT_OF_BOUNDS, C.WARN, "obs[agent b] outside Box(-10.0, 10.0, (3,), float32)"),
    (zma.AgentDtypeDrift, C.OBS_DTYPE_MISMATCH, C.FAIL,
     "obs[agent b] dtype: expected float32, actual float64 (first at step 6)"),
    (zma.RewardMissing, C.MA_REWARD_MISSING, C.FAIL,
     "agent b acted at step 3 and got its next observation but no reward: expected a rewards[agent b] entry, "
     "actual keys ['a']"),
    (zma.RewardBeforeJoining, C.MA_REWARD_LOST, C.WARN, "rewards[agent c] = 1 at step 1: expected rewards only for "
                                                        "agents that acted"),
    (zma.AllNeverSet, C.MA_ALL_DONE_MISSING, C.FAIL, "terminateds: expected an '__all__' key, actual keys ['a', 'b']"),
    (zma.AllStaysFalse, C.MA_ALL_DONE_MISSING, C.FAIL, "every agent of the episode is done at step 20 (['a', 'b']): "
                                                       "expected terminateds['__all__'] or truncateds['__all__'] True"),
    (zma.ActsAfterTerminated, C.MA_AGENT_AFTER_DONE, C.FAIL,
     "agent a got obs[agent a], rewards[agent a], infos[agent a] at step 9 after its own terminated at step 8"),
    (zma.TruncatedWithoutObs, C.MA_TRUNCATED_WITHOUT_OBS, C.FAIL,
     "acted and was truncated at step 30 without a last observation"),
    (zma.UnknownAgentInInfos, C.MA_DICT_INVALID, C.FAIL,
     "infos key 'ghost': expected one of the env's possible_agents ['a', 'b'] or '__common__', actual 'ghost'"),
    (zma.TerminatedInt, C.DONE_NOT_BOOL, C.FAIL, "terminateds[agent a]: expected bool or np.bool_, actual int"),
    (zma.RewardArray, C.REWARD_NOT_SCALAR, C.FAIL,
     "rewards[agent b]: expected a Python/NumPy real scalar, actual ndarray float64 (1,)"),
    (zma.CrashInEpisode2, C.ENV_CRASHED, C.FAIL, "step() raised FloatingPointError: integrator diverged"),
]


@pytest.mark.parametrize("env,code,status,fragment", FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_fault_is_detected(env, code, status, fragment):
    report = check_env(env, steps=STEPS, seed=0)
    hits = [e for e in report.events if e.code == code]
    assert hits, f"{code} not raised; got {sorted(report.codes())}"
    assert hits[0].status == status
    assert any(fragment in e.message for e in hits), [e.message for e in hits]
    assert hits[0].evidence, "every finding carries evidence"
    assert report.summary["multi_agent"] is True


def test_fault_names_only_the_faulty_agent():
    report = check_env(zma.AgentDtypeDrift, steps=STEPS, seed=0)
    (hit,) = [e for e in report.events if e.code == C.OBS_DTYPE_MISMATCH]
    assert hit.evidence["agent"] == "b" and hit.evidence["path"] == "obs[agent b]"
    assert report.codes(C.WARN) == {C.OBS_DTYPE_MISMATCH}


def test_crash_goes_on_to_the_end_of_the_budget():
    report = check_env(zma.CrashInEpisode2, steps=STEPS)
    (hit,) = [e for e in report.events if e.code == C.ENV_CRASHED]
    assert hit.evidence["exception"] == "FloatingPointError" and "step" in hit.evidence["frame"]
    assert report.summary["steps"] >= STEPS - 1 and report.summary["crashes"] == 1


CLEAN = [zma.multi_agent_cartpole, zma.TwoWalkers, zma.TurnBased, zma.JoinAndLeave]


@pytest.mark.parametrize("env", CLEAN, ids=lambda e: e.__name__)
@pytest.mark.parametrize("seed", [0, 1])
def test_clean_env_has_no_false_alarm(env, seed):
    report = check_env(env, steps=1000, seed=seed)
    assert report.codes(C.WARN) == set(), [e.log_line() for e in report.events if e.status != C.PASS]
    assert report.summary["episodes"] >= 10
    passed = {e.module for e in report.events if e.code == C.CHECKS_PASSED}
    assert passed == {C.IMPORT_RESOLVE, C.ENV_SPEC, C.OBS_FLOW, C.ACTION_PIPE, C.REWARD_STATS}


def test_agents_that_join_and_leave_are_each_checked():
    report = check_env(zma.JoinAndLeave, steps=1000, seed=0)
    spec = report.summary["modules"][C.ENV_SPEC]
    assert set(spec["agent_episodes"]) == {"a0", "a1", "a2", "scout"}
    assert min(spec["agent_episodes"].values()) == spec["episodes"]  # each agent once per episode
    leaves = report.summary["modules"][C.ACTION_PIPE]["agents"]["scout"]["leaves"]
    assert leaves == ["MultiBinary int8 (2,)"]  # the scout's own action space


# --- the checker fed directly, as the EnvRunner callbacks would -----------------------------


def _checker() -> MultiAgentRolloutChecker:
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    return MultiAgentRolloutChecker({"p": box, "q": box}, {"p": spaces.Discrete(2), "q": spaces.Discrete(2)})


def _o() -> np.ndarray:
    return np.zeros(2, np.float32)


def test_checker_accepts_a_join_a_hanging_action_and_a_termination_without_obs():
    rc = _checker()
    rc.on_reset({"p": _o()}, {})
    assert rc.agents_to_act() == ["p"]
    # p acts, q joins (its first observation), p's action hangs (no obs, reward paid now)
    assert not rc.on_step({"p": 1}, {"q": _o()}, {"p": 1.0}, {"__all__": False}, {"__all__": False}, {})
    assert rc.agents_to_act() == ["q"]
    # q acts and gets its next obs with a reward; p terminates without a last observation
    assert not rc.on_step({"q": 0}, {"q": _o()}, {"q": 0.5, "p": 0.2}, {"p": True, "__all__": False},
                          {"__all__": False}, {})
    assert rc.agents_to_act() == ["q"]
    assert rc.on_step({"q": 1}, {"q": _o()}, {"q": 0.5}, {"__all__": True}, {"__all__": False}, {"q": {}})
    assert [f.code for f in rc.log.findings()] == []
    assert rc.agents["p"].rc.returns.returns == [pytest.approx(1.2)]  # 1.0 while hanging + 0.2 at termination
    assert rc.episodes == 1 and rc.agents["q"].rc.steps == 2


def test_checker_flags_a_reward_after_done_and_sends_each_finding_once():
    rc = _checker()
    rc.on_reset({"p": _o(), "q": _o()}, {})
    rc.on_step({"p": 0, "q": 0}, {"p": _o(), "q": _o()}, {"p": 1.0, "q": 1.0}, {"p": True, "__all__": False},
               {"__all__": False}, {})
    rc.on_step({"q": 0}, {"q": _o()}, {"p": 0.0, "q": 1.0}, {"__all__": False}, {"__all__": False}, {})
    (new,) = rc.log.pop_new()
    assert new.code == C.MA_AGENT_AFTER_DONE and "agent p got rewards[agent p] at step 2" in new.message
    rc.on_step({"q": 0}, {"q": _o()}, {"p": 0.0, "q": 1.0}, {"__all__": False}, {"__all__": False}, {})
    assert rc.log.pop_new() == [] and rc.log.findings()[0].count == 2


def test_checker_for_env_reads_rllibs_per_agent_spaces():
    rc = MultiAgentRolloutChecker.for_env(zma.JoinAndLeave())
    assert rc.possible_agents == ["a0", "a1", "a2", "scout"]
    assert rc.obs_spaces["scout"].shape == (3,) and rc.act_spaces["scout"] == spaces.MultiBinary(2)


# --- the CLI ---------------------------------------------------------------------------------


def flow1(*args, env=None):
    return subprocess.run([sys.executable, "-m", "flow1_ray", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_fault_exits_1(cli_env):
    r = flow1("check", "--env", "zoo_multi_agent:RewardMissing", "--steps", "100", env=cli_env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| ENV_SPEC | FAIL | MA_REWARD_MISSING agent b acted at step 3" in r.stdout


def test_cli_clean_env_exits_0(cli_env):
    r = flow1("check", "--env", "zoo_multi_agent:multi_agent_cartpole", "--steps", "300", env=cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flow1 check: PASS" in r.stdout


def test_single_agent_check_never_imports_ray(cli_env):
    code = ("import sys; from flow1_ray import check_env; check_env('CartPole-v1', steps=20); "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'ray'], 'ray imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 0, r.stderr


# --- RLlib itself agrees with the severities ---------------------------------------------------


def _rllib_sample(env, steps: int = 300, seed: int = 0) -> float:
    """Step ``env`` as RLlib 2.60's MultiAgentEnvRunner does (pre-check, random actions for
    the agents to act, ``MultiAgentEpisode.add_env_step``, reset only on ``__all__``) and
    return the env rewards no agent's episode received. Raises where RLlib raises."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_multiagent_environments(env)
    obs_spaces = {a: env.get_observation_space(a) for a in env.possible_agents}
    act_spaces = {a: env.get_action_space(a) for a in env.possible_agents}
    for sp in act_spaces.values():
        sp.seed(seed)

    def new_episode(reset_seed=None):
        ep = MultiAgentEpisode(observation_space=obs_spaces, action_space=act_spaces)
        obs, infos = env.reset(seed=reset_seed)
        ep.add_env_reset(observations=obs, infos=infos)
        return ep

    ep, paid, lost = new_episode(seed), 0.0, 0.0
    for _ in range(steps):
        actions = {a: act_spaces[a].sample() for a in ep.get_agents_to_act()}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        paid += sum(float(r) for a, r in rewards.items() if a != "__all__")
        ep.add_env_step(obs, actions, rewards, infos, terminateds=terminateds, truncateds=truncateds)
        env_reset = terminateds["__all__"] or truncateds.get("__all__", False)  # SyncVectorMultiAgentEnv
        if ep.is_done:
            if not env_reset:
                raise RuntimeError("RLlib's episode is done but its vector env does not reset the env")
            lost, paid = lost + paid - ep.get_return(), 0.0
            ep = new_episode()
    return lost


RLLIB_REJECTS = [zma.RewardMissing, zma.AllNeverSet, zma.AllStaysFalse, zma.ActsAfterTerminated,
                 zma.TruncatedWithoutObs, zma.UnknownAgentInInfos, zma.TerminatedInt, zma.RewardArray]


@pytest.mark.parametrize("env", RLLIB_REJECTS, ids=lambda e: e.__name__)
def test_rllib_rejects_every_contract_fail(env):
    with pytest.raises(Exception):
        _rllib_sample(env())


@pytest.mark.parametrize("env", CLEAN, ids=lambda e: e.__name__)
def test_rllib_accepts_the_clean_envs_and_loses_no_reward(env):
    assert _rllib_sample(env()) == pytest.approx(0.0, abs=1e-6)


def test_rllib_silently_drops_a_reward_paid_before_the_first_action():
    assert _rllib_sample(zma.RewardBeforeJoining(), steps=200) == pytest.approx(10 * 1.0 * 10)  # 10 episodes


def test_a_hierarchical_agents_sub_task_reward_is_its_turns_outcome_not_a_spike():
    """RLlib's HierarchicalSixRoomEnv: the low-level agent's +1 for reaching its sub-goal
    (against -0.01 a step) comes on its turn's last step, as a goal ends an episode. Measured
    before: REWARD_SPIKES WARN on the low-level agents. The same env with one +5 paid mid-turn
    still gets it: the rule is not switched off for agents that take turns."""
    clean = check_env(zma.six_rooms, steps=3000, seed=0)
    assert clean.codes() == set(), [(e.code, e.message[:200]) for e in clean.events if e.status != C.PASS]
    planted = check_env(zma.six_rooms_mid_turn_bonus, steps=3000, seed=0)
    spikes = [e for e in planted.events if e.code == C.REWARD_SPIKES]
    assert spikes and all("agent low_level_agent_" in e.message for e in spikes), planted.codes()
    assert "largest 4.99" in spikes[0].message or "largest 5" in spikes[0].message, spikes[0].message
