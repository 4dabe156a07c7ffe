"""Which layer of a wrapped env makes ``reset(seed=s)`` twice differ: the env itself (its RNG not
seeded from reset's seed: NONDETERMINISTIC_RESET, a WARN) or a wrapper that keeps state across
resets by design (gymnasium's ``NormalizeObservation`` and its running statistics: an
advisory naming the wrapper, the env's own reset being deterministic), or a wrapper of the
user's that does not pass the seed through (a WARN naming it).

Each layer of the chain (``env``, ``env.env``, ... ``env.unwrapped``) is reset twice with the
seed, from the inside out; the first layer whose two observations differ while every layer
inside it gave equal ones is the one that keeps state."""

from __future__ import annotations

from typing import Any, Callable

#: the deepest wrapper chain followed (a chain is a handful of layers; a cycle must not loop)
MAX_LAYERS = 32


def layers(env: Any) -> list[Any]:
    """The wrapper chain, outermost first, down to the env that wraps nothing."""
    out, seen = [env], {id(env)}
    while len(out) < MAX_LAYERS:
        inner = getattr(out[-1], "env", None)
        if inner is None or id(inner) in seen or not callable(getattr(inner, "reset", None)):
            break
        out.append(inner)
        seen.add(id(inner))
    return out


def stateful_layer(env: Any, reset: Callable[[Any], tuple[bool, Any]],
                   equal: Callable[[Any, Any], bool]) -> Any | None:
    """The innermost layer whose two seeded resets differ, when every layer inside it is
    deterministic; None when the env itself (the innermost layer) differs, when there is no
    wrapper, or when a layer's reset could not be compared (``reset(layer)`` gives
    ``(ok, observation)``)."""
    chain = layers(env)
    if len(chain) < 2:
        return None
    for depth, layer in enumerate(reversed(chain)):
        ok1, first = reset(layer)
        ok2, second = reset(layer) if ok1 else (False, None)
        if not (ok1 and ok2):
            return None
        if not equal(first, second):
            return None if depth == 0 else layer
    return None


def keeps_state_by_design(layer: Any) -> bool:
    """A wrapper whose state across resets is its documented purpose: gymnasium's own wrappers
    (``NormalizeObservation``, ``NormalizeReward``, ...) and any wrapper holding running
    statistics (an attribute with ``mean``, ``var`` and ``count``, gymnasium's ``RunningMeanStd``
    and the like)."""
    if type(layer).__module__.startswith("gymnasium.wrappers"):
        return True
    try:
        attrs = vars(layer).values()
    except TypeError:
        return False
    return any(all(hasattr(v, a) for a in ("mean", "var", "count")) for v in attrs)


# --- state kept across reset(): the first episode replayed after the run -----------------

#: the first episode's steps recorded for the replay (a longer episode is compared on these),
#: and the bytes their observations may take (a 4 MB image observation: 2 steps)
REPLAY_STEPS = 200
REPLAY_BYTES = 8 * 2**20
#: attributes compared between a fresh reset(seed) and one after the run (simple values only)
MAX_ATTRS = 256
_SIMPLE = (int, float, bool, str, bytes, type(None))


def snapshot(env: Any) -> dict[str, Any]:
    """The innermost env's simple attributes right after a reset: numbers, flags, strings,
    small arrays (by value), and the lengths of lists, dicts and sets (a list that grows across
    episodes); the RNG and everything else is left out. Runs in every check, between env calls
    (no timeout there), so no code of the env's runs: the instance dict is read as it is, and
    only built-in containers are measured (a subclass's ``len()`` could block)."""
    from itertools import islice

    import numpy as np

    base = getattr(env, "unwrapped", env)
    try:
        items = list(islice(vars(base).items(), MAX_ATTRS))
    except TypeError:
        return {}
    out: dict[str, Any] = {}
    for k, v in items:
        if k.startswith("__") or k in ("np_random", "_np_random", "np_random_seed", "_np_random_seed", "spec"):
            continue
        if type(v) in _SIMPLE or isinstance(v, np.generic):
            out[k] = v.item() if isinstance(v, np.generic) else v
        elif isinstance(v, np.ndarray) and v.size <= 64 and v.dtype != object:
            out[k] = ("array", v.dtype.str, v.shape, v.tobytes())
        elif type(v) in (list, dict, set, tuple):
            out[k] = ("len", len(v))
    return out


def _show(v: Any) -> str:
    if isinstance(v, tuple) and v and v[0] == "len":
        return f"{v[1]} items"
    if isinstance(v, tuple) and v and v[0] == "array":
        import numpy as np

        return repr(np.frombuffer(v[3], dtype=np.dtype(v[1])).reshape(v[2]).tolist())[:60]
    return repr(v)[:60]


def kept_fields(fresh: dict, now: dict, equal: Callable[[Any, Any], bool]) -> list[str]:
    """``name: fresh -> now`` for each attribute a reset under the same seed left different."""
    out = []
    for k, v in fresh.items():
        if k in now and not (v == now[k] if type(v) is not float else equal(v, now[k])):
            out.append(f"{k}: {_show(v)} -> {_show(now[k])}")
    return out


class FirstEpisode:
    """The run's first episode from its seeded reset: the reset observation, the attributes
    right after it, and each step's action and outcome (at most :data:`REPLAY_STEPS`)."""

    def __init__(self, reset_obs: Any, attrs: dict) -> None:
        import copy

        self.attrs = attrs
        self.steps: list[tuple[Any, Any, Any, bool, bool]] = []
        self.bytes = _nbytes(reset_obs)
        self.open = self.bytes <= REPLAY_BYTES   # else nothing is recorded: no replay
        self.reset_obs = copy.deepcopy(reset_obs) if self.open else None

    def add(self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any) -> None:
        import copy

        if not self.open:
            return
        self.bytes += _nbytes(obs)
        if self.bytes > REPLAY_BYTES:   # the steps so far are the replay
            self.open = False
            return
        self.steps.append((copy.deepcopy(action), copy.deepcopy(obs), reward, bool(terminated is True),
                           bool(truncated is True)))
        if terminated is True or truncated is True or len(self.steps) >= REPLAY_STEPS:
            self.open = False


def _nbytes(x: Any) -> int:
    """An observation's array bytes (its leaves'), ~64 bytes for anything else."""
    nb = getattr(x, "nbytes", None)
    if isinstance(nb, int):
        return nb
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return 64


def divergence(first: FirstEpisode, reset_obs: Any, step: Callable[[Any], Any],
               equal: Callable[[Any, Any], bool]) -> str | None:
    """Where a replay of the first episode's actions after a new reset(seed) leaves it: the
    reset observation, a step's observation, reward or end, or a step that raises; None when
    it follows the first episode to its end."""
    if not equal(first.reset_obs, reset_obs):
        return "the reset observation differs"
    for i, (action, obs, reward, term, trunc) in enumerate(first.steps, 1):
        try:
            out = step(action)
        except Exception as e:   # noqa: BLE001 -- a step that raises now is what leaked
            return f"step {i} raises {type(e).__name__}: {str(e)[:120]} (it did not in the first episode)"
        if not (isinstance(out, tuple) and len(out) == 5):
            return None
        if (out[2] is True, out[3] is True) != (term, trunc):
            return (f"step {i} ends the episode (terminated={out[2]!r}, truncated={out[3]!r}; the first episode: "
                    f"{term}, {trunc})")
        if not equal(out[0], obs):
            return f"step {i}'s observation differs"
        if not equal(out[1], reward):
            return f"step {i}'s reward is {out[1]!r}, was {reward!r}"
    return None
