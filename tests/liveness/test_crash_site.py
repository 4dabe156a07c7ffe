"""Where an exception left an EnvRunner's sample() (or a Learner's update), read from its
traceback with RLlib's real component classes; an os._exit recorded with its code and caller by a real exiting process.
Live half: ``tests/live/test_runner_deaths_live.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from flow1_ray.checks.run import death_cause as D
from flow1_ray.liveness.crash_site import crash_site


def _raised(fn):
    try:
        fn()
    except BaseException as e:   # noqa: BLE001 - SystemExit too
        return e
    raise AssertionError("did not raise")


class _Runner:
    """What crash_site reads of an EnvRunner: its two connector pipelines."""

    def __init__(self):
        from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2

        self._env_to_module = ConnectorPipelineV2(connectors=[_Lookup()])
        self._module_to_env = ConnectorPipelineV2(connectors=[])


def _lookup_class():
    from ray.rllib.connectors.connector_v2 import ConnectorV2

    class Lookup(ConnectorV2):
        def __call__(self, *, batch=None, **kwargs):
            return {}["speed"]

    return Lookup


_Lookup = _lookup_class()


def test_a_connector_inside_its_pipeline_is_named_with_the_pipeline_and_the_users_frame():
    runner = _Runner()
    e = _raised(lambda: runner._env_to_module(rl_module=None, batch={}, episodes=[], explore=True, shared_data={}))
    site = crash_site(e, runner)
    assert site["component"] == D.ENV_TO_MODULE and site["component_class"] == "Lookup"
    assert site["exception"] == "KeyError" and site["frame"].startswith("__call__ (test_crash_site.py:")
    assert D.describe(site).startswith("the env-to-module connector Lookup raised KeyError: 'speed' in __call__")
    # the same connector called outside any pipeline of the runner: a connector, no pipeline claimed
    alone = crash_site(_raised(lambda: _Lookup()(batch={})), runner)
    assert alone["component"] == D.CONNECTOR


def test_a_connector_behind_flow1s_pipeline_tap_is_still_named_with_its_pipeline():
    from flow1_ray.pipeline.tap import Tap

    runner = _Runner()
    Tap(runner)   # as a live runner carries it (runner/pipe_watch.py): a stand-in in front of each pipeline
    e = _raised(lambda: runner._env_to_module(rl_module=None, batch={}, episodes=[], explore=True, shared_data={}))
    site = crash_site(e, runner)
    assert site["component"] == D.ENV_TO_MODULE and site["component_class"] == "Lookup", site


def test_non_finite_logits_are_the_action_sampling_not_the_module():
    from ray.rllib.models.torch.torch_distributions import TorchCategorical

    logits = torch.tensor([[float("nan"), 0.0]])
    site = crash_site(_raised(lambda: TorchCategorical(logits=logits).sample()))
    assert site["component"] == D.SAMPLING and site["exception"] in ("ValueError", "RuntimeError")


def test_a_torch_layer_inside_an_rlmodule_is_charged_to_the_rlmodule():
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    class Module(TorchRLModule):
        def setup(self):
            self.net = torch.nn.Linear(4, 2)

        def _forward(self, batch, **kwargs):
            return {"logits": self.net(batch["obs"])}   # a shape the layer refuses

    m = Module(observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
    site = crash_site(_raised(lambda: m.forward_exploration({"obs": torch.zeros(1, 5)})))
    assert site["component"] == D.RL_MODULE and site["component_class"] == "Module"
    assert site["frame"].startswith("_forward (test_crash_site.py:") and "linear" in site["raised_at"].lower()


def test_an_env_a_callback_and_rllibs_own_code_are_told_apart():
    class Env(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Discrete(2)

        def step(self, action):
            raise OverflowError("physics")

    assert crash_site(_raised(lambda: Env().step(0)))["component"] == D.ENV
    from ray.rllib.callbacks.utils import make_callback

    def user_cb(**kwargs):
        return 1 / 0

    site = crash_site(_raised(lambda: make_callback("on_episode_step", callbacks_functions=[user_cb], kwargs={})))
    assert site["component"] == D.CALLBACK and site["frame"].startswith("user_cb (")
    rllib = crash_site(_raised(lambda: np.asarray([1, 2]).reshape(3)))
    assert rllib["component"] == D.RLLIB, "no component's frame: charged to RLlib's code, never to a guess"


def test_sys_exit_is_an_exit_with_its_code():
    site = crash_site(_raised(lambda: sys.exit(4)))
    assert site["exit_call"] == "sys.exit" and site["exit_code"] == 4
    assert D.describe({**site, "component": D.USER}).startswith("code outside the env called sys.exit(4) in ")


def test_an_os_exit_is_recorded_with_its_code_and_caller_before_the_process_ends(tmp_path):
    script = textwrap.dedent(f"""
        import json, os
        import gymnasium as gym
        from flow1_ray.liveness.crash_site import watch_os_exit
        watch_os_exit(lambda ev: open({str(tmp_path / 'cause.json')!r}, 'w').write(json.dumps(ev)))

        class Sim(gym.Env):
            def step(self, action):
                os._exit(3)

        Sim().step(0)
    """)
    (tmp_path / "user_sim.py").write_text(script)
    p = subprocess.run([sys.executable, str(tmp_path / "user_sim.py")], timeout=60)
    assert p.returncode == 3, "the exit goes on, with its own code"
    cause = json.loads((tmp_path / "cause.json").read_text())
    assert cause["exit_call"] == "os._exit" and cause["exit_code"] == 3 and cause["component"] == D.ENV
    assert cause["frame"].startswith("step (user_sim.py:") and cause["user_frame"] is True


def _learner_class():
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    class ClippedValueLearner(PPOTorchLearner):
        def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
            raise FloatingPointError("value target scale 0: division by zero")

    return ClippedValueLearner


def test_a_learners_loss_and_its_learner_connector_are_told_apart():
    from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2

    cls = _learner_class()
    learner = cls.__new__(cls)   # only its class and its pipeline are read
    learner._learner_connector = ConnectorPipelineV2(connectors=[_Lookup()])
    loss = crash_site(_raised(lambda: learner.compute_loss_for_module(module_id="p", config=None, batch={},
                                                                      fwd_out={})), learner)
    assert loss["component"] == D.LEARNER and loss["component_class"] == "ClippedValueLearner"
    assert D.describe(loss).startswith("the Learner (ClippedValueLearner) raised FloatingPointError: value target "
                                       "scale 0: division by zero in compute_loss_for_module (test_crash_site.py:")
    conn = crash_site(_raised(lambda: learner._learner_connector(rl_module=None, batch={}, episodes=[],
                                                                 shared_data={})), learner)
    assert conn["component"] == D.LEARNER_CONNECTOR and conn["component_class"] == "Lookup"


def test_an_os_exit_in_a_learner_is_the_learners(tmp_path):
    script = textwrap.dedent(f"""
        import json, os
        from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
        from flow1_ray.liveness.crash_site import watch_os_exit
        watch_os_exit(lambda ev: open({str(tmp_path / 'cause.json')!r}, 'w').write(json.dumps(ev)))

        class AbortingLearner(PPOTorchLearner):
            def compute_loss_for_module(self, **kwargs):
                os._exit(3)

        AbortingLearner.__new__(AbortingLearner).compute_loss_for_module()
    """)
    (tmp_path / "user_learner.py").write_text(script)
    p = subprocess.run([sys.executable, str(tmp_path / "user_learner.py")], timeout=120)
    assert p.returncode == 3
    cause = json.loads((tmp_path / "cause.json").read_text())
    assert cause["component"] == D.LEARNER and cause["component_class"] == "AbortingLearner"
    assert D.describe(cause).startswith("the Learner (AbortingLearner) called os._exit(3) in compute_loss_for_module "
                                        "(user_learner.py:")


@pytest.mark.parametrize("age, said", [(60.0, False), (600.0, True)])
def test_a_cause_recorded_long_before_the_death_is_said_with_its_age(age, said):
    site = {"component": D.ENV, "call": "reset", "exception": "OSError", "error": "disk", "frame": "reset (e.py:3)",
            "ts": 100.0}
    text = D.cause_clause(site, 100.0 + age)
    assert text.endswith("env.reset raised OSError: disk in reset (e.py:3)")
    assert ("600 s before the death" in text) is said


def test_rllibs_runtime_error_from_a_parts_exception_is_charged_to_that_part():
    """RLlib's ``raise RuntimeError from e`` (an env step that failed with no sub-env restart)."""
    class Env(gym.Env):
        def step(self, action):
            raise ValueError("injected")

    def rllib_like():
        try:
            Env().step(0)
        except Exception as e:
            raise RuntimeError from e

    site = crash_site(_raised(rllib_like))
    assert site["component"] == D.ENV and site["exception"] == "ValueError"
    assert site["wrapped_by"].startswith("RuntimeError in rllib_like (test_crash_site.py:")


def test_a_digest_says_what_an_observation_held_without_carrying_it():
    from flow1_ray.liveness.crash_site import digest

    d = digest(np.array([0.1, float("nan"), -2.0], dtype=np.float32))
    assert d["shape"] == [3] and d["dtype"] == "float32" and d["non_finite"] == 1
    assert d["first_non_finite_at"] == [1] and (d["min"], d["max"]) == (-2.0, pytest.approx(0.1))
    assert d["hash"] != digest(np.array([0.1, 0.0, -2.0], dtype=np.float32))["hash"]
    nested = digest({"image": np.zeros((84, 84, 3), np.uint8), "speed": 3.5})
    assert nested["image"]["shape"] == [84, 84, 3] and nested["speed"]["dtype"] == "float64"


def test_where_sampling_reads_each_sub_envs_episode_and_its_last_observation():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from flow1_ray.liveness.crash_site import where_sampling

    ok, bad = SingleAgentEpisode(), SingleAgentEpisode()
    for ep, last in ((ok, [0.0, 1.0]), (bad, [0.0, float("inf")])):
        ep.add_env_reset(observation=np.zeros(2, np.float32))
        ep.add_env_step(observation=np.array(last, np.float32), action=0, reward=1.0)

    class Runner:
        _ongoing_episodes = [ok, None, bad]

    subs = where_sampling(Runner())
    assert [s["sub_env"] for s in subs] == [0, 2] and subs[1]["env_step"] == 1
    assert subs[0]["last_observation"]["non_finite"] == 0 and subs[1]["last_observation"]["non_finite"] == 1
    text = D.sampling_clause({"sub_envs": subs})
    assert text.startswith("sampling 2 sub-envs (episodes ")
    assert text.endswith("the last observation of sub-env 2 held 1 non-finite value")


def test_an_exception_in_the_weight_sync_is_recorded_as_the_rlmodules_during_set_state():
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    from flow1_ray.liveness.crash_site import wrap_state_sync

    class Drifted(TorchRLModule):
        def setup(self):
            self.net = torch.nn.Linear(4, 2)

        def set_state(self, state):
            raise ValueError("weights for 'pi' do not fit")

    runner = _Runner()
    runner.module = Drifted(observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
    records = []
    assert wrap_state_sync(runner, records.append) == 3, "the module and both connector pipelines"
    assert wrap_state_sync(runner, records.append) == 0, "never wrapped twice"
    with pytest.raises(ValueError, match="do not fit"):   # re-raised untouched
        runner.module.set_state({})
    (site,) = records
    assert site["during"] == "set_state" and site["component"] == D.RL_MODULE and site["component_class"] == "Drifted"
    assert D.describe(site).startswith("the RLModule (Drifted) raised ValueError: weights for 'pi' do not fit in "
                                       "set_state (test_crash_site.py:")
    assert D.describe(site).endswith(" during the weight sync (set_state)")
    runner._env_to_module.set_state({})   # a sync that works records nothing
    assert len(records) == 1
