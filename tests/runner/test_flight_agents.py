"""The multi-agent flight recorder on RLlib's own vector multi-agent env (SyncVectorMultiAgentEnv,
as a MultiAgentEnvRunner steps it): per sub-env and agent, the actions of the agents that act, the
digests of those that observe, the rewards; a dump replays each sub-env's life to the same
observations, agent by agent, and a crash on one agent's action is reproduced at its step by
``flow1 replay`` (the CLI in a child process)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from flow1_ray.rundir.repro import read_entry, write_entry
from flow1_ray.runner.flight import rng_state, unseeded_first
from flow1_ray.runner.flight_agents import MultiAgentFlightRecorder

pytest.importorskip("ray.rllib")


def _vector(cls, n: int, config: dict):
    from ray.rllib.env.vector.sync_vector_multi_agent_env import SyncVectorMultiAgentEnv

    return SyncVectorMultiAgentEnv([lambda: cls(dict(config)) for _ in range(n)])


def _record(env, rec: MultiAgentFlightRecorder, steps: int, seed: int | None = 3):
    """Steps ``env`` with random actions for the agents that observe, the recorder wired as the
    runner wires it (each sub-env's reset, the vector step); the exception a step raised, with
    the vector step's actions, or None."""
    in_step = [False]
    for i, sub in enumerate(env.envs):
        reset = sub.reset

        def wrapped(*args, _i=i, _sub=sub, _reset=reset, **kwargs):
            state = rng_state(_sub)
            if state is None and kwargs.get("seed") is None and not args and unseeded_first(_sub):
                kwargs["seed"] = 99 + _i
            obs, info = _reset(*args, **kwargs)
            rec.on_reset(_i, kwargs.get("seed"), kwargs.get("options"), state, obs, in_step[0])
            return obs, info
        sub.reset = wrapped
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        actions = [{aid: int(rng.integers(0, 2)) for aid in o} for o in obs]
        in_step[0] = True
        try:
            obs, rew, *_ = env.step(actions)
        except RuntimeError as e:
            return e, actions
        in_step[0] = False
        rec.on_step(actions, obs, rew)
    return None, None


def test_each_sub_envs_life_replays_agent_by_agent_to_the_same_observations():
    """Two MultiAgentCartPole sub-envs of two agents, autoreset by RLlib's vector env: each
    agent's episode ends on its own (it stops acting and observing), the sub-env's life replays
    with every observing agent's digest equal to the run's."""
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    from flow1_ray.replay import NOT_REPRODUCED, steps

    env = _vector(MultiAgentCartPole, 2, {"num_agents": 2})
    rec = MultiAgentFlightRecorder(2)
    assert _record(env, rec, 150) == (None, None)
    for i in range(2):
        d = rec.dump(i)
        meta, arrays = d["meta"], d["arrays"]
        assert meta["multi_agent"] and meta["agents"] == [0, 1] and meta["from"] == "creation"
        assert len(meta["episodes"]) >= 2 and meta["episodes"][0]["seed"] == 3 + i
        assert arrays["actions"].shape == (meta["steps"], 2, 1) and arrays["acted"].shape == (meta["steps"], 2)
        assert arrays["acted"].all() and arrays["observed"].all()   # both agents act on every step here
        man = {"start": meta, "failure": {"call": "step", "step": meta["steps"] + 1, "exception": "never"}}
        out = steps(man, arrays, MultiAgentCartPole({"num_agents": 2}))
        assert out == {"result": NOT_REPRODUCED, "step": meta["steps"],
                       "why": f"all {meta['steps']} steps replayed without the failure"}, (i, out)
        # one agent's digest changed: the replay names that agent and the step
        bad = dict(arrays, digests=arrays["digests"].copy())
        row = int(np.flatnonzero(arrays["observed"][:, 1])[5])
        bad["digests"][row, 1] += 1.0
        out = steps(man, bad, MultiAgentCartPole({"num_agents": 2}))
        assert out["result"] == "diverged" and out["why"].startswith("agent 1's observation after step"), out


def test_a_crash_on_one_agents_action_is_reproduced_at_its_step(tmp_path, cli_env):
    """AgentPushCrash raises on agent 1's push right from its life's 120th step: the dump (the
    crashing sub-env's life since creation and the vector step's action dict) replays in
    ``flow1 replay``'s child to the same exception at the same step; ``failing_action`` is the
    dict."""
    import replay_envs

    from flow1_ray.replay import failing_action

    env = _vector(replay_envs.AgentPushCrash, 1, {"at": 120})
    rec = MultiAgentFlightRecorder(1)
    exc, actions = _record(env, rec, 400, seed=None)
    assert exc is not None and actions[0][1] == 1
    d = rec.dump(0)
    d["arrays"].update(rec.failed_arrays(actions[0]))
    man = {"finding": "ENV_CRASHED", "env": {"how": "class", "spec": "replay_envs:AgentPushCrash",
                                              "env_config": {"at": 120}, "worker_index": 1},
           "start": d["meta"], "failure": {"call": "step", "step": d["meta"]["steps"] + 1,
                                           "exception": f"RuntimeError: {exc}"}}
    entry = write_entry(tmp_path, "train1-pid1-001-env_crashed", d["arrays"], man).path
    assert read_entry(entry)[0]["start"]["agents"] == [0, 1]
    assert failing_action(entry) == {aid: a for aid, a in actions[0].items()}
    p = subprocess.run([sys.executable, "-m", "flow1_ray", "replay", str(entry), "--json", "-"],
                       capture_output=True, text=True, env=cli_env, timeout=120)
    out = json.loads(p.stdout[:p.stdout.rindex("}") + 1])
    assert p.returncode == 0 and out["result"] == "reproduced", p.stdout + p.stderr[-2000:]
    assert out["step"] == man["failure"]["step"] and "agent 1's push right broke the joint" in out["exception"]


def test_turns_are_kept_per_agent_and_an_agent_first_seen_late_gets_a_column():
    """A turn-based step order ("a" acts while "b" observes, then the other way round) and a
    third agent joining late: each row says who acted and who observed; rows recorded before
    the newcomer are padded (no action, no observation), and a wider action widens every row."""
    rec = MultiAgentFlightRecorder(1)
    rec.on_reset(0, 5, None, None, {"a": np.zeros(3)}, False)
    for t in range(70):
        who, other = ("a", "b") if t % 2 == 0 else ("b", "a")
        rec.on_step([{who: t % 3}], [{other: np.full(3, float(t))}], [{who: 1.0}])
    rec.on_step([{"c": np.array([0.5, -0.5])}], [{"c": np.ones(3)}], [{"c": 2.0}])
    d = rec.dump(0)
    a = d["arrays"]
    assert d["meta"]["agents"] == ["a", "b", "c"] and d["meta"]["episodes"][0]["first_digest"].keys() == {"0"}
    assert d["meta"]["action_kinds"] == {"0": [[], "<i8"], "1": [[], "<i8"], "2": [[2], "<f8"]}
    assert a["actions"].shape == (71, 3, 2) and a["acted"].shape == (71, 3)
    assert a["acted"][:4].tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0]]
    assert a["observed"][:2].tolist() == [[0, 1, 0], [1, 0, 0]]
    assert a["acted"][70].tolist() == [0, 0, 1] and a["actions"][70, 2].tolist() == [0.5, -0.5]
    assert np.isnan(a["actions"][0, 0, 1]) and a["actions"][2, 0, 0] == 2.0   # padded to the widest action
    assert a["rewards"][70].tolist() == [0.0, 0.0, 2.0]
    assert rec.first_nonfinite(0) is None
    rec.on_step([{"a": 1}], [{"b": np.array([0.0, np.nan, 0.0])}], [{"a": 0.0}])
    assert rec.first_nonfinite(0) == 71   # only an observed agent's digest counts


def test_actions_that_are_not_numbers_stop_the_recorder_with_a_reason():
    rec = MultiAgentFlightRecorder(1)
    with pytest.raises(TypeError, match="agent 'a''s action is a dict, not numbers"):
        rec.on_step([{"a": {"move": 1}}], [{"a": np.zeros(2)}], [{"a": 0.0}])
