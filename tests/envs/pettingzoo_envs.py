"""PettingZoo envs through RLlib's own wrappers (``PettingZooEnv`` for turn-based AEC games,
``ParallelPettingZooEnv`` for simultaneous ones), as an RLlib user builds them; nobody here
wrote the envs. Beside them two planted faults made on top of a real one: an info dict handed
out again with new contents, and a mask that leaves no move in the middle of a game.

Importable as ``pettingzoo_envs:NAME`` by ``flow1 check --env``."""

from __future__ import annotations

import numpy as np
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv


def tictactoe():
    from pettingzoo.classic import tictactoe_v3

    return PettingZooEnv(tictactoe_v3.env())


def connect_four():
    from pettingzoo.classic import connect_four_v3

    return PettingZooEnv(connect_four_v3.env())


def simple_spread():
    from mpe2 import simple_spread_v3

    return ParallelPettingZooEnv(simple_spread_v3.parallel_env())


def pistonball():
    from pettingzoo.butterfly import pistonball_v6

    return ParallelPettingZooEnv(pistonball_v6.parallel_env())


class InfoRewritten(ParallelPettingZooEnv):
    """simple_spread whose agents' info dicts are one dict per agent, rewritten each step
    (the step count written into the dict returned before): what a buffer stored changes."""

    def __init__(self, config=None):
        from mpe2 import simple_spread_v3

        super().__init__(simple_spread_v3.parallel_env())
        self._infos: dict = {}

    def step(self, action_dict):
        obs, rew, term, trunc, infos = super().step(action_dict)
        for aid in infos:
            d = self._infos.setdefault(aid, {})
            d["t"] = d.get("t", 0) + 1
            infos[aid] = d
        return obs, rew, term, trunc, infos


class MaskEmptiedMidGame(PettingZooEnv):
    """tictactoe whose mover's mask is all zeros at the game's third move: the agent must act on
    an observation that allows no action."""

    def __init__(self, config=None):
        from pettingzoo.classic import tictactoe_v3

        super().__init__(tictactoe_v3.env())
        self._moves = 0

    def reset(self, *, seed=None, options=None):
        self._moves = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, rew, term, trunc, info = super().step(action)
        self._moves += 1
        if self._moves == 3 and not term.get("__all__"):
            for o in obs.values():
                o["action_mask"] = np.zeros_like(o["action_mask"])
        return obs, rew, term, trunc, info
