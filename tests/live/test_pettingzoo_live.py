"""The live half of ``tests/envcheck/test_pettingzoo.py``: PPO on PettingZoo envs through RLlib's
wrappers, every agent mapped to one shared policy, flow1's contract checks on every step of the
local EnvRunner. Correct by design, so silent; and not blind: the checks saw the agents' steps."""

from __future__ import annotations

from pathlib import Path

import pytest

import pettingzoo_envs as pz
from flow1_ray import Flow1Callbacks, load_events
from flow1_ray.common import codes as C

pytestmark = pytest.mark.slow


def test_ppo_on_mpe_simple_spread_through_parallel_pettingzoo_env_is_silent(ray_session, tmp_path):
    """Measured before the fix: INFO_MUTATION_DETECTED WARN, one row per agent (PettingZoo hands
    each agent the same empty info dict every step)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    register_env("flow1_pz_spread", lambda cfg: pz.simple_spread())
    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False,
                                     sample_rate=1.0)
    config = (PPOConfig().environment("flow1_pz_spread").callbacks(cb).debugging(seed=0)
              .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, *a, **k: "shared")
              .env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=600, minibatch_size=200, num_epochs=1))
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        runner = algo.env_runner   # the local EnvRunner: its flow1 agent, in this process
        agent = next(a for c in runner._callbacks for a in getattr(c, "_agents", {}).values())
        checked = {str(aid): ag.rc.steps for rc in agent.checkers for aid, ag in rc.agents.items()}
    finally:
        algo.stop()
    events = load_events(Path(results[-1]["flow1"]["run_dir"])).to_pylist()
    loud = [(e["code"], e["message"][:200]) for e in events if e["status"] != C.PASS]
    assert loud == []
    assert results[-1]["flow1"]["internal_errors"] == 0
    # not blind: every agent's own checker saw its steps (the first episode of a sub-env is always
    # checked; 25 steps an episode)
    assert set(checked) == {"agent_0", "agent_1", "agent_2"} and min(checked.values()) >= 25, checked
