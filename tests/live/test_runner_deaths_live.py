"""Every runner death says why: an exception that leaves an EnvRunner's ``sample()`` from
anywhere but the env's step (a user's env-to-module or module-to-env connector, the RLModule's
forward pass, a user's callback; single- and multi-agent, one or two sub-envs a runner), one
that leaves the weight sync (the RLModule's ``set_state``) and an ``os._exit`` in env code are
named in the runner's WORKER_DIED with the exception (or the exit code), the component and the user's ``file:line``;
RLlib restarts the runner as before (waited for once per way flow1 is in the runner's path). Unit half: ``tests/liveness/test_crash_site.py``."""

from __future__ import annotations

import json
import re

import pytest

from flow1_ray import Flow1Callbacks
from flow1_ray.common import codes as C
from test_rllib_callbacks import Run

pytestmark = pytest.mark.slow


def _config(tmp_path, case: str):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import faulty_parts as fp

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    # one remote runner: each fault kills every runner it reaches, and a runner's process start
    # (torch and RLlib imported) is ~4 s of CPU, paid again by its restart
    config = (PPOConfig().environment("CartPole-v1").callbacks(cb)
              .env_runners(num_env_runners=1, sample_timeout_s=8)
              .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)
              .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0))
    if case == "env-to-module connector":
        return config.env_runners(env_to_module_connector=fp.feature_lookup)
    if case == "module-to-env connector":
        return config.env_runners(module_to_env_connector=fp.action_remap)
    if case == "RLModule forward":   # and a vectorised runner: two sub-envs a runner
        return (config.rl_module(rl_module_spec=RLModuleSpec(module_class=fp.RareInputModule))
                .env_runners(num_envs_per_env_runner=2))
    if case == "multi-agent env-to-module connector":
        from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

        return (config.environment(MultiAgentCartPole, env_config={"num_agents": 2})
                .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=fp.agent_to_policy)
                .env_runners(env_to_module_connector=fp.feature_lookup))
    if case == "weight sync":
        return config.rl_module(rl_module_spec=RLModuleSpec(module_class=fp.SyncFailingModule))
    if case == "callback":
        return config.callbacks(cb, on_episode_step=fp.raising_on_episode_step)
    if case == "NaN observation":
        return config.environment(fp.NanCartPole, env_config={"nan_at_step": 300})
    if case == "NaN on an episode's last step":
        return config.environment(fp.NanCartPole, env_config={"nan_at_step": 300, "on_last_step": True})
    assert case == "os._exit"
    return config.environment(fp.ExitsCartPole, env_config={"exit_at_step": 300})


#: case -> (what the death's message must say, the user's frame it must name)
CASES = {
    "env-to-module connector": (r"the env-to-module connector FeatureLookup raised ValueError: feature lookup "
                                r"failed: key 'speed' missing in __call__ \(faulty_parts\.py:\d+\)", "__call__"),
    "module-to-env connector": (r"the module-to-env connector ActionRemap raised KeyError: 'left' in __call__ "
                                r"\(faulty_parts\.py:\d+\)", "__call__"),
    "RLModule forward": (r"the RLModule forward \(RareInputModule\) raised RuntimeError: embedding index out of "
                         r"range: observation bucket 97 >= 96 in _forward \(faulty_parts\.py:\d+\)", "_forward"),
    "weight sync": (r"the RLModule \(SyncFailingModule\) raised ValueError: weights for 'pi' do not fit: .* in "
                    r"set_state \(faulty_parts\.py:\d+\) during the weight sync \(set_state\)", "set_state"),
    "callback": (r"a callback raised ZeroDivisionError: reward shaping: division by zero in the user's callback "
                 r"in raising_on_episode_step \(faulty_parts\.py:\d+\)", "raising_on_episode_step"),
    "multi-agent env-to-module connector": (r"the env-to-module connector FeatureLookup raised ValueError: "
                                            r"feature lookup failed: key 'speed' missing in __call__ "
                                            r"\(faulty_parts\.py:\d+\)", "__call__"),
    "os._exit": (r"died: exited with code 3; the env called os._exit\(3\) in step \(faulty_parts\.py:\d+\)", "step"),
    # the death is charged to where it was raised, and linked to the finding that led to it
    "NaN observation": (r"the action sampling \(\w+\) raised \w+Error: .*; the last observation of "
                        r"sub-env 0 held 1 non-finite value; likely origin: OBS_NAN_INF \(FAIL\) of this process", None),
    # the episode it ended was set aside inside the failed call: read from RLlib's sampling frame
    "NaN on an episode's last step": (r"the action sampling \(\w+\) raised \w+Error: .*; likely origin: OBS_NAN_INF "
                                      r"\(FAIL\) of this process", None),
}


#: the cases whose runner's restart is waited for (the others die the same way as one of these)
RESTART_CHECKED = ("env-to-module connector", "weight sync", "os._exit")


@pytest.mark.parametrize("case", list(CASES))
def test_a_runner_killed_by_anything_in_sample_names_the_cause_component_and_frame(ray_session, tmp_path, case):
    algo = _config(tmp_path, case).build_algo()
    try:
        run = Run(algo.train())
        evs = run.wait_events(lambda e: any(x["code"] == C.WORKER_DIED for x in e), timeout=60, algo=algo)
        died = [e for e in evs if e["code"] == C.WORKER_DIED]
        pattern, function = CASES[case]
        assert all(re.search(pattern, d["message"]) for d in died), [d["message"] for d in died]
        assert all(d["status"] == C.FAIL and "cause not seen" not in d["message"] for d in died)
        cause = json.loads(died[0]["evidence"])["exception"]
        assert cause["component"] == {"os._exit": "env", "multi-agent env-to-module connector":
                                      "env-to-module connector", "NaN observation": "action sampling",
                                      "NaN on an episode's last step": "action sampling",
                                      "weight sync": "RLModule forward"}.get(case, case)
        if function:   # the user's own frame (a NaN logit is refused inside torch: no user frame)
            assert cause["user_frame"] is True and cause["frame"].startswith(function)
        assert "SIGKILL" not in died[0]["message"], "an exit code proves it was no SIGKILL"
        # fault tolerance unchanged: RLlib restarts the runner, and the run trains on; checked once
        # for each way flow1 is in the runner's path (an exception recorded on its way out of
        # sample(), the wrapped set_state the restored runner is synced through, an os._exit)
        if case in RESTART_CHECKED:
            run.wait_events(lambda e: any(x["code"] == C.WORKER_RESTARTED for x in e), timeout=60, algo=algo)
    finally:
        algo.stop()
    if case == "NaN observation":   # the sub-env's life up to its NaN went to repro/, and plays to it again
        from flow1_ray.replay import REPRODUCED, play

        (nan,) = [e for e in evs if e["code"] == C.OBS_NAN_INF]
        (entry,) = json.loads(nan["evidence"])["repro"]
        out = play(run.dir / entry)
        assert out["result"] == REPRODUCED and out["nonfinite"].startswith("a NaN or inf observation at step "), out
