"""RLlib's own set-ups, unchanged, as config functions for ``flow1 check --config``: the
defaults of PPO, DQN, SAC and APPO on gymnasium's CartPole, Pendulum, MuJoCo's Hopper, and
RLlib's Atari set-up for Pong (its wrapper, 64x64 grey frames, four stacked by its
FrameStackingEnvToModule connector, as RLlib's tuned Atari examples do)."""

from __future__ import annotations

from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.sac import SACConfig


def ppo_cartpole() -> PPOConfig:
    return PPOConfig().environment("CartPole-v1")


def dqn_cartpole() -> DQNConfig:
    return DQNConfig().environment("CartPole-v1")


def ppo_pendulum() -> PPOConfig:
    return PPOConfig().environment("Pendulum-v1")


def sac_pendulum() -> SACConfig:
    return SACConfig().environment("Pendulum-v1")


def ppo_hopper() -> PPOConfig:
    return PPOConfig().environment("Hopper-v5")


def _pong(env_config: dict):
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    return wrap_atari_for_new_api_stack(gym.make("ale_py:ALE/Pong-v5", **env_config), framestack=None, dim=64)


def appo_pong() -> APPOConfig:
    from ray import tune
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

    tune.register_env("flow1-pong", _pong)
    return (APPOConfig().environment("flow1-pong", env_config={"frameskip": 1, "full_action_space": False,
                                                               "repeat_action_probability": 0.0})
            .env_runners(env_to_module_connector=lambda env, *a: FrameStackingEnvToModule(num_frames=4)))


def ppo_multi_agent() -> PPOConfig:
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}"))


def _highway(env_config: dict):
    import gymnasium as gym
    import highway_env

    gym.register_envs(highway_env)
    return gym.make("highway-fast-v0")


def ppo_highway() -> PPOConfig:
    """PPO's defaults on highway-env's kinematics observation (a 5x5 Box): RLlib has no default
    encoder for it."""
    from ray import tune

    tune.register_env("flow1-highway", _highway)
    return PPOConfig().environment("flow1-highway")
