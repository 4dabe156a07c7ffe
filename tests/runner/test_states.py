"""The runner's state sampling on the observations RLlib's episodes really hold: RLlib's
``FlattenObservations`` connector writes the flattened observation back into the episode,
so a Dict env's episodes carry flat vectors in the RLModule's space, not the env's."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray.runner.sender import Sender
from flow1_ray.runner.states import StateSampler


def _dict_env_episodes(flat: bool, n_episodes: int = 3):
    """RLlib's CartPoleWithDictObservationSpace rolled out at random, its episodes holding
    the env's Dict observations or, as FlattenObservations leaves them, flat vectors."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.examples.envs.classes.cartpole_with_dict_observation_space import (
        CartPoleWithDictObservationSpace)
    from ray.rllib.utils.numpy import flatten_inputs_to_1d_tensor
    from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space

    env = CartPoleWithDictObservationSpace()
    struct = get_base_struct_from_space(env.observation_space)
    rng = np.random.default_rng(0)
    eps, raw = [], []
    for i in range(n_episodes):
        o, _ = env.reset(seed=i)
        obs, acts, done = [o], [], False
        while not done and len(acts) < 60:
            a = int(rng.integers(2))
            o, _, term, trunc, _ = env.step(a)
            obs.append(o)
            acts.append(a)
            done = term or trunc
        raw.append(obs)
        held = [flatten_inputs_to_1d_tensor(x, spaces_struct=struct, batch_axis=False) for x in obs] if flat else obs
        eps.append(SingleAgentEpisode(observations=held, actions=acts, rewards=[1.0] * len(acts), terminated=done,
                                      len_lookback_buffer=0).to_numpy())
    return env, eps, raw


def _module(obs_space):
    """A real RLModule of the flattened space (what the EnvRunner builds behind the connector)."""
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    return DefaultPPOTorchRLModule(observation_space=obs_space, action_space=spaces.Discrete(2), model_config={})


@pytest.mark.parametrize("flat", [False, True], ids=["dict-in-episodes", "flattened-by-the-connector"])
def test_a_dict_env_is_sampled_whether_or_not_a_connector_flattened_its_episodes(flat):
    from ray.rllib.connectors.env_to_module import FlattenObservations

    env, eps, raw = _dict_env_episodes(flat)
    flat_space = FlattenObservations(input_observation_space=env.observation_space,
                                     input_action_space=env.action_space).observation_space
    module = _module(flat_space)
    sampler = StateSampler(env.observation_space, env.action_space, 1.0, Sender("r/states", lambda: None, 1),
                           module_of=lambda: module)
    assert sampler.add(eps) == sum(len(e) for e in eps)
    assert not sampler.failed and not sampler.unsupported
    b = sampler.batch()["modules"]["default_policy"]
    names = [n for n, _ in b["features"]]
    # the env's feature names, on either path, each column holding the value it names
    assert len(names) == b["x"].shape[1] == flat_space.shape[0]
    steps = [o for obs in raw for o in obs[:-1]]
    assert np.allclose(b["x"][:, names.index("x-pos")], [o["x-pos"][0] for o in steps])
    assert np.allclose(b["x"][:, names.index("velocs[1]")], [o["velocs"][1] for o in steps])
    k = [o["angular-pos"]["some_random_stuff"] for o in steps]
    assert np.array_equal(b["x"][:, names.index("angular-pos.some_random_stuff=1")], np.equal(k, 1))


def test_rows_that_fit_no_space_stop_the_maps_as_a_failure_not_a_note():
    env, eps, _ = _dict_env_episodes(flat=True)
    wrong = _module(spaces.Box(-1.0, 1.0, (3,), np.float32))   # a module whose space is not what the episodes hold
    sampler = StateSampler(env.observation_space, env.action_space, 1.0, Sender("r/states", lambda: None, 1),
                           module_of=lambda: wrong)
    assert sampler.add(eps) == 0
    assert not sampler.unsupported
    assert "fit neither the env's observation space" in str(sampler.failed["default_policy"])
