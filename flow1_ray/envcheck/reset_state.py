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
