"""An env's attributes read as plain values, for the reward-logic audit: a bounded snapshot
of ``env.unwrapped``'s numbers (scalars, small arrays, nested dicts/lists up to a depth), what
changed between two snapshots, and those changes as lines a person reads. Used by
:mod:`flow1_ray.checks.env.reward_logic` in ``flow1 check --audit-reward`` and in the live audit.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

AUDIT_MAX_LEAVES = 256            # attributes read per snapshot
AUDIT_MAX_ARRAY = 1024            # an array with more elements is not read (an image, a map)
AUDIT_MAX_DEPTH = 3               # dicts/lists/tuples inside an attribute, this deep
SKIPPED_ATTRIBUTES = frozenset({"np_random", "_np_random", "_np_random_seed", "spec", "metadata", "render_mode",
                                "observation_space", "action_space", "reward_range"})


def _leaves(value: Any, path: str, depth: int) -> Iterator[tuple[str, Any]]:
    """(path, value) of the numbers and small numeric arrays inside one attribute."""
    if isinstance(value, (bool, np.bool_)):
        yield path, bool(value)
    elif isinstance(value, (int, float, np.integer, np.floating)):
        yield path, value.item() if isinstance(value, np.generic) else value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" and value.size <= AUDIT_MAX_ARRAY:
            yield path, value.copy()
    elif depth < AUDIT_MAX_DEPTH and isinstance(value, (list, tuple)) and len(value) <= 64:
        if value and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in value):
            yield path, np.asarray(value, dtype=np.float64)
        else:
            for i, v in enumerate(value):
                yield from _leaves(v, f"{path}[{i}]", depth + 1)
    elif depth < AUDIT_MAX_DEPTH and isinstance(value, dict) and len(value) <= 64:
        for k, v in value.items():
            if isinstance(k, (str, int)):
                yield from _leaves(v, f"{path}[{k!r}]", depth + 1)


def attribute_snapshot(env: Any) -> dict[str, Any]:
    """The numeric attributes of ``env.unwrapped`` (at most ``AUDIT_MAX_LEAVES``), copied."""
    base = getattr(env, "unwrapped", env)
    try:
        items = list(vars(base).items())
    except TypeError:
        return {}
    out: dict[str, Any] = {}
    for name, value in items:
        if name in SKIPPED_ATTRIBUTES or name.startswith("__"):
            continue
        for path, v in _leaves(value, name, 0):
            out[path] = v
            if len(out) >= AUDIT_MAX_LEAVES:
                return out
    return out


def change(old: Any, new: Any) -> Any:
    """A hashable summary of one step's change: the difference of a number (rounded, so
    float noise does not split a counter's +1), else whether it changed."""
    if isinstance(old, np.ndarray) or isinstance(new, np.ndarray):
        a, b = np.asarray(old), np.asarray(new)
        return "same" if a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") else "changed"
    if isinstance(old, bool) or isinstance(new, bool):
        return "same" if old == new else "changed"
    d = float(new) - float(old)
    if not math.isfinite(d):
        return "same" if (old == new or (old != old and new != new)) else "changed"
    return float(f"{d:.9g}")


def show(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return np.array2string(v, precision=4, threshold=16, max_line_width=120)
    return repr(v)


def diff_lines(before: dict[str, Any], after: dict[str, Any], limit: int = 12) -> list[str]:
    """A unified-diff-like view of what one step changed in the env's attributes."""
    out: list[str] = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k, "<absent>"), after.get(k, "<absent>")
        if isinstance(b, str) or isinstance(a, str):
            changed = b != a
        else:
            changed = change(b, a) not in ("same", 0.0)
        if changed:
            out += [f"- {k} = {show(b)}", f"+ {k} = {show(a)}"]
            if len(out) >= 2 * limit:
                out.append("...")
                break
    return out


def moved(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether any attribute differs between two snapshots of one env."""
    return before.keys() != after.keys() or any(change(before[k], after[k]) not in ("same", 0.0) for k in before)


def same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:
        return False
