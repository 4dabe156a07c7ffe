"""An env's state read as plain values, for the reward-logic audit: bounded snapshots of the
numbers inside ``env.unwrapped`` (scalars and small arrays in its attributes, and in the
objects, dataclasses, namespaces, dicts, lists and inner envs they hold), what changed between
two snapshots, and those changes as lines a person reads. Used by
:mod:`flow1_ray.checks.env.reward_logic` in ``flow1 check --audit-reward`` and in the live audit.

A snapshot is breadth-first from the env (its own attributes before those of what it holds:
a wrapper's inner env, a simulator's task object) and bounded: ``AUDIT_MAX_VISITS`` values
looked at, ``AUDIT_MAX_LEAVES`` numbers kept, ``AUDIT_MAX_DEPTH`` levels, containers of at most
``AUDIT_MAX_ITEMS`` items, arrays of at most ``AUDIT_MAX_ARRAY`` elements. Only an object's
instance dict and slots are read, never a property, so reading runs no code of the env's but
that of its containers (a list subclass's ``len()``, a dict subclass's ``items()``). One value
whose read raises or takes longer than ``AUDIT_MAX_READ_S`` is skipped from then on and named
(:attr:`AttributeReader.skipped`); the others are still read. A read that never returns is
bounded from outside: ``flow1 check`` runs the audit's reads under the step timeout of its
check process (:mod:`flow1_ray.envcheck.supervise`).
"""

from __future__ import annotations

import math
import time
import types
from collections import deque
from itertools import islice
from typing import Any

import numpy as np

AUDIT_MAX_LEAVES = 256            # numbers (and small arrays) kept per snapshot
AUDIT_MAX_ARRAY = 1024            # an array with more elements is not read (an image, a map)
AUDIT_MAX_DEPTH = 8               # objects and containers inside the env, this deep (a wrapper's inner env's state)
AUDIT_MAX_ITEMS = 64              # a list, tuple or dict with more items is not read
AUDIT_MAX_VISITS = 4096           # values read per discovery (numbers, containers, objects)
AUDIT_MAX_SCAN = 1_000_000        # attributes of one object looked over for those (strings, None: passed over)
AUDIT_MAX_READ_S = 0.25           # one value taking longer to read is skipped from then on
AUDIT_MAX_SNAPSHOT_S = 2.0        # a snapshot taking longer: the reader stops (the audit says so)
SKIPPED_ATTRIBUTES = frozenset({"np_random", "_np_random", "_np_random_seed", "spec", "metadata", "render_mode",
                                "observation_space", "action_space", "reward_range", "observation_spaces",
                                "action_spaces", "_ezpickle_args", "_ezpickle_kwargs"})
#: values never looked into: code, types, random generators (their state is not the env's logic), spaces
_OPAQUE: tuple[type, ...] = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                             types.MethodType, str, bytes, bytearray, np.random.Generator, np.random.RandomState,
                             np.random.BitGenerator)
#: attribute values passed over without a read: they hold no number
_NOT_STATE = frozenset({str, bytes, type(None), types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                        type, types.ModuleType})


def _opaque() -> tuple[type, ...]:
    try:
        from gymnasium.spaces import Space
    except ImportError:   # pragma: no cover -- gymnasium is a dependency
        return _OPAQUE
    return _OPAQUE + (Space,)


class AttributeReader:
    """Snapshots of one env's numeric state (module docstring). A *discovery* (the first
    snapshot, and each one asked for with ``discover=True``: the audit asks at every reset)
    walks the env breadth-first and keeps the paths of the numbers it found; the snapshots in
    between follow those paths only (by name: an object replaced at every step is still read),
    a few attribute and item reads per number. ``skipped``: the values that could not be read
    (path -> why), each named once; ``truncated``: a discovery stopped at ``AUDIT_MAX_VISITS``;
    ``off``: the reader stopped (a snapshot took longer than ``AUDIT_MAX_SNAPSHOT_S``), every
    snapshot is empty from then on."""

    def __init__(self) -> None:
        self.skipped: dict[str, str] = {}
        self.truncated = False
        self.off = ""
        self._opaque = _opaque()
        self._plan: list[tuple[str, tuple]] | None = None   # (path, how to get there) per number

    def snapshot(self, env: Any, discover: bool = False) -> dict[str, Any]:
        """The numbers inside ``env.unwrapped`` by path (``goal``, ``state['pos']``,
        ``_env._task.fuel``), copied."""
        if self.off:
            return {}
        t0 = time.perf_counter()
        try:
            base = getattr(env, "unwrapped", env)
        except Exception as e:   # an `unwrapped` property of the env's that raises: the env itself
            self._skip("unwrapped", f"reading it raised {_error(e)}")
            base = env
        out = self._discover(base) if discover or self._plan is None else self._follow(base)
        total = time.perf_counter() - t0
        if total > AUDIT_MAX_SNAPSHOT_S:
            self.off = (f"one read of the env's attributes took {total:.1f} s (the limit is "
                        f"{AUDIT_MAX_SNAPSHOT_S:g} s)")
        return out

    def _discover(self, base: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        plan: list[tuple[str, tuple]] = []
        queue: deque[tuple[Any, str, tuple, int]] = deque([(base, "", (), 0)])
        seen: set[int] = set()
        visits = 0
        while queue and len(out) < AUDIT_MAX_LEAVES:
            value, path, route, depth = queue.popleft()
            if path in self.skipped:
                continue
            visits += 1
            if visits > AUDIT_MAX_VISITS:
                self.truncated = True
                break
            t = time.perf_counter()
            try:
                if self._read(value, path, route, depth, out, queue, seen):
                    plan.append((path, route))
            except Exception as e:
                self._skip(path or "(the env)", f"reading it raised {_error(e)}")
            self._timed(path, t, out)
        self._plan = [(p, r) for p, r in plan if p in out]
        return out

    def _follow(self, base: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, route in self._plan or ():
            if path in self.skipped:
                continue
            t = time.perf_counter()
            try:
                value = _walk(base, route)
            except (KeyError, IndexError, AttributeError, TypeError):
                continue   # not there at this step (an agent gone, a list shorter)
            except Exception as e:
                self._skip(path, f"reading it raised {_error(e)}")
                continue
            try:
                leaf = _leaf(value)
            except Exception as e:
                self._skip(path, f"reading it raised {_error(e)}")
                continue
            if leaf is not None:
                out[path] = leaf
            self._timed(path, t, out)
        return out

    def _timed(self, path: str, t: float, out: dict[str, Any]) -> None:
        dt = time.perf_counter() - t
        if dt > AUDIT_MAX_READ_S and path:
            self._skip(path, f"reading it took {dt:.2f} s (the limit is {AUDIT_MAX_READ_S:g} s)")
            out.pop(path, None)

    def _skip(self, path: str, why: str) -> None:
        if len(self.skipped) < AUDIT_MAX_LEAVES:
            self.skipped[path] = why[:200]

    def _read(self, value: Any, path: str, route: tuple, depth: int, out: dict[str, Any],
              queue: deque[tuple[Any, str, tuple, int]], seen: set[int]) -> bool:
        """One value: a number or small array into ``out`` (True); what a container or an
        object holds onto the queue."""
        leaf = _leaf(value)
        if leaf is not None:
            out[path] = leaf
            return True
        if isinstance(value, np.ndarray) or depth >= AUDIT_MAX_DEPTH or id(value) in seen or \
                isinstance(value, self._opaque):
            return False
        if isinstance(value, (list, tuple)):
            if len(value) > AUDIT_MAX_ITEMS:
                return False
            seen.add(id(value))
            queue.extend((v, f"{path}[{i}]", route + ((_ITEM, i),), depth + 1) for i, v in enumerate(list(value)))
        elif isinstance(value, dict):
            if len(value) > AUDIT_MAX_ITEMS:
                return False
            seen.add(id(value))
            queue.extend((v, f"{path}[{k!r}]", route + ((_ITEM, k),), depth + 1) for k, v in list(value.items())
                         if isinstance(k, (str, int)))
        else:
            members = _members(value, AUDIT_MAX_VISITS if not path else AUDIT_MAX_ITEMS)
            if members:
                seen.add(id(value))
                queue.extend((v, f"{path}.{k}" if path else k, route + ((_ATTR, k),), depth + 1) for k, v in members)
        return False


_ATTR, _ITEM = 0, 1


def _leaf(value: Any) -> Any:
    """A number (a Python one), a bool, or a copy of a small numeric array (a list or tuple
    of numbers as a float64 array); None for anything else."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" and value.size <= AUDIT_MAX_ARRAY:
            return np.array(value, copy=True, subok=False)   # the plain array: no subclass's copy()
        return None
    if isinstance(value, (list, tuple)) and 0 < len(value) <= AUDIT_MAX_ITEMS:
        items = list(value)
        if all(isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)) for v in items):
            return np.asarray(items, dtype=np.float64)
    return None


def _walk(obj: Any, route: tuple) -> Any:
    """The value at ``route`` from ``obj``: instance attributes (dict or slot, never a
    property) and items."""
    for kind, key in route:
        if kind == _ATTR:
            try:
                d = object.__getattribute__(obj, "__dict__")
            except AttributeError:
                d = None
            obj = d[key] if isinstance(d, dict) and key in d else object.__getattribute__(obj, key)
        else:
            obj = obj[key]
    return obj


def _members(obj: Any, limit: int) -> list[tuple[str, Any]]:
    """An object's instance attributes and slots that may hold state (no properties: no code
    of the object's runs; no strings, None, functions or types), at most ``limit``, looked for
    among at most ``AUDIT_MAX_SCAN`` attributes; flow1's skip list and dunder names aside."""
    out: list[tuple[str, Any]] = []
    try:
        d = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        d = None
    if isinstance(d, dict):
        for k, v in islice(d.items(), AUDIT_MAX_SCAN):
            if type(v) in _NOT_STATE or not isinstance(k, str) or k in SKIPPED_ATTRIBUTES or k.startswith("__"):
                continue
            out.append((k, v))
            if len(out) >= limit:
                return out
    for cls in type(obj).__mro__[:-1]:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if len(out) >= limit:
                return out
            if isinstance(name, str) and name not in ("__dict__", "__weakref__") and name not in SKIPPED_ATTRIBUTES:
                try:
                    out.append((name, object.__getattribute__(obj, name)))
                except AttributeError:
                    pass
    return out


def _error(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0][:120]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def attribute_snapshot(env: Any) -> dict[str, Any]:
    """One snapshot by a fresh reader (what a one-off look needs; the audit keeps its reader)."""
    return AttributeReader().snapshot(env)


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


def skipped_text(skipped: dict[str, str], limit: int = 3) -> str:
    """``" (2 values skipped: weird (reading it raised RuntimeError: no); ...)"``, or ""."""
    if not skipped:
        return ""
    named = "; ".join(f"{k} ({why})" for k, why in list(skipped.items())[:limit])
    more = f"; {len(skipped) - limit} more" if len(skipped) > limit else ""
    return f" ({len(skipped)} value{'s' * (len(skipped) != 1)} skipped: {named}{more})"
