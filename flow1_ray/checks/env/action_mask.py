"""Action masks: RLlib's convention of an observation dict that carries ``"action_mask"`` (one
entry per action of a Discrete space, 1 valid, 0 not: ``ActionMaskEnv``,
``ParametricActionsCartPole``, and the action-masking RLModule that reads them), or under
another key whose name says mask and whose space is such a vector (RLlib's
``ParametricActionsCartPoleNoEmbeddings``: ``valid_avail_actions_mask``). An env that
publishes one rejects the actions it masks out, by design; so a check that drives it draws its
random actions from the valid ones, as the masked policy would, and checks the mask itself:
its shape, its values, and that it leaves at least one action. No Ray.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common import codes as C
from ..rule import Rule

#: the observation key RLlib's action-masking examples and RLModule read
MASK_KEY = "action_mask"

RULES = (
    Rule("ACTION_MASK_INVALID", C.ENV_SPEC, C.FAIL,
         "the observation's action_mask cannot mask the Discrete(n) action space: not n entries, values outside "
         "[0, 1] or not finite, or no valid action at all (every entry 0) on an observation an action is taken "
         "from (an episode's last observation is never acted on: a finished board may mask every move)",
         evidence=("problem", "shape", "expected_shape", "step")),
)


def mask_key(observation_space: Any, action_space: Any) -> str:
    """The key of the observation that carries the action mask: ``action_mask`` where the
    observation space has it (or is not a Dict: the key is then looked for in each
    observation); else the one key whose name contains "mask" and whose space is a 0/1
    vector of one entry per action of the Discrete action space (a Box within [0, 1] or a
    MultiBinary of that size). A key that merely says mask (an image's segmentation mask) is
    not taken for one; two such keys leave the choice to ``action_mask``, which is absent."""
    import gymnasium as gym

    if not isinstance(observation_space, gym.spaces.Dict) or MASK_KEY in observation_space.spaces:
        return MASK_KEY
    if not isinstance(action_space, gym.spaces.Discrete):
        return MASK_KEY
    n = int(action_space.n)

    def shaped(sp: Any) -> bool:
        if isinstance(sp, gym.spaces.MultiBinary):
            return tuple(np.shape(sp.n)) in ((), (1,)) and int(np.prod(sp.n)) == n
        return (isinstance(sp, gym.spaces.Box) and sp.shape == (n,)
                and bool(np.all(sp.low >= 0)) and bool(np.all(sp.high <= 1)))

    found = [str(k) for k, sp in observation_space.spaces.items() if "mask" in str(k).lower() and shaped(sp)]
    return found[0] if len(found) == 1 else MASK_KEY


def mask_of(obs: Any, key: str = MASK_KEY) -> Any | None:
    """The observation's action mask under ``key`` (:func:`mask_key`), or None."""
    return obs.get(key) if isinstance(obs, Mapping) else None


def valid_actions(mask: Any, space: Any) -> tuple[np.ndarray | None, str | None]:
    """``(mask for space.sample(mask=...), problem)``: an int8 0/1 array of the space's n
    actions (entries > 0.5 are valid: RLlib's example rounds a float mask so), or None and
    what is wrong with it. (None, None) for a space this convention does not cover."""
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Discrete):
        return None, None
    n = int(space.n)
    try:
        arr = np.asarray(mask, dtype=float)
    except (TypeError, ValueError):
        return None, f"expected {n} numbers, actual {type(mask).__name__} that is not numeric"
    if arr.shape != (n,):
        return None, f"expected shape ({n},), one entry per action of Discrete({n}), actual {arr.shape}"
    if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
        return None, f"expected values in [0, 1], actual min {np.nanmin(arr):g}, max {np.nanmax(arr):g}" + (
            " and non-finite entries" if not np.all(np.isfinite(arr)) else "")
    valid = (arr > 0.5).astype(np.int8)
    if not valid.any():
        return None, NO_VALID_ACTION
    return valid, None


#: the one problem a mask may have where no action follows (an agent's terminated or truncated
#: observation: PettingZoo's classic games mask every move of a finished board, and RLlib never
#: acts on an episode's last observation)
NO_VALID_ACTION = "expected at least one valid action, actual every entry 0: no action can be taken"


def mask_message(problem: str, mask: Any, space: Any, step: int, obs_path: str = "obs",
                 key: str = MASK_KEY) -> tuple[str, dict]:
    """ACTION_MASK_INVALID's message and evidence."""
    shape = list(np.shape(mask)) if mask is not None else None
    return (f"{obs_path}['{key}'] at step {step}: {problem}; RLlib's action-masking module cannot pick an "
            f"action from it",
            {"problem": problem, "shape": shape, "expected_shape": [int(getattr(space, "n", 0))],
             "step": step, "mask": repr(mask)[:200], "key": key})
