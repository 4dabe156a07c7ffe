"""ENV_SPEC checks: the env's API contract, judged on every value it returns.

Pure functions and small watchers over plain values; nothing here steps an env, so the
same code judges ``flow1 check`` and live EnvRunner samples.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from .. import codes as C
from .findings import Finding
from .spaces import Leaf, UnsupportedSpace, leaves
from .thresholds import Thresholds

# --- spaces -----------------------------------------------------------------------------


def validate_space(space: Any, role: str) -> list[Finding]:
    """SPACE_INVALID findings for one space; ``role`` is "obs" or "action".

    gymnasium's constructors reject most bad specs, but a space can be built otherwise
    (bounds computed and written in afterwards, a non-gymnasium object, an unsupported
    type), and an action Box with infinite bounds cannot be squashed or clipped.
    """
    try:
        lvs = leaves(space, role)
    except UnsupportedSpace as e:
        return [Finding(C.SPACE_INVALID, f"{role} space unsupported: {e}", {"role": role, "space": repr(space)})]
    out: list[Finding] = []
    for lf in lvs:
        sp = lf.space

        def bad(why: str, **ev: Any) -> None:
            out.append(Finding(C.SPACE_INVALID, f"{lf.path} {sp}: {why}", {"path": lf.path, "space": repr(sp), **ev}))

        if isinstance(sp, spaces.Discrete) and int(sp.n) <= 0:
            bad(f"expected n > 0, actual n={int(sp.n)}", n=int(sp.n))
        elif isinstance(sp, spaces.MultiDiscrete) and np.any(np.asarray(sp.nvec) <= 0):
            bad(f"expected every nvec > 0, actual nvec={np.asarray(sp.nvec).tolist()}")
        elif isinstance(sp, spaces.MultiBinary) and np.prod(sp.shape) <= 0:
            bad(f"expected n > 0, actual shape {sp.shape}")
        elif isinstance(sp, spaces.Box):
            low, high = np.asarray(sp.low), np.asarray(sp.high)
            if low.shape != sp.shape or high.shape != sp.shape:
                bad(f"expected bounds of shape {sp.shape}, actual low {low.shape} high {high.shape}")
                continue
            if not (np.issubdtype(sp.dtype, np.number) or sp.dtype == np.bool_):
                bad(f"expected a numeric dtype, actual {sp.dtype}")
                continue
            if np.issubdtype(low.dtype, np.floating) and (np.isnan(low).any() or np.isnan(high).any()):
                bad(f"expected real bounds, actual {int(np.isnan(low).sum() + np.isnan(high).sum())} NaN bound(s)")
            elif np.any(low > high):
                idx = int(np.flatnonzero((low > high).ravel())[0])
                bad(f"expected low <= high, actual low {low.ravel()[idx]} > high {high.ravel()[idx]} at index {idx}",
                    index=idx, low=low.ravel()[idx], high=high.ravel()[idx])
            elif role == "action" and not (np.isfinite(low).all() and np.isfinite(high).all()):
                bad("expected finite action bounds, actual infinite: an unbounded action cannot be clipped "
                    "or squashed (RLlib's normalize_actions/clip_actions need them)")
    return out


# --- per-step values --------------------------------------------------------------------


def leaf_type_error(value: Any, leaf: Leaf) -> tuple[str, str, str] | None:
    """(code, expected, actual) when one leaf value's type, dtype or shape is wrong."""
    sp = leaf.space
    if isinstance(sp, spaces.Discrete):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            if isinstance(value, np.ndarray) and value.ndim == 0 and np.issubdtype(value.dtype, np.integer):
                return None
            return C.OBS_DTYPE_MISMATCH, "int (Discrete)", _describe(value)
        return None
    if type(value) is np.ndarray or (isinstance(value, np.generic) and leaf.shape == ()):
        if value.dtype != leaf.dtype:
            return C.OBS_DTYPE_MISMATCH, str(leaf.dtype), str(value.dtype)
        if value.shape != leaf.shape:
            return C.OBS_SHAPE_MISMATCH, str(leaf.shape), str(value.shape)
        return None
    return C.OBS_DTYPE_MISMATCH, f"ndarray {leaf.dtype} {leaf.shape}", _describe(value)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype} {value.shape}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def reward_type_error(reward: Any) -> str | None:
    """What is wrong with a reward that is not a real Python/NumPy scalar (None if fine)."""
    t = type(reward)
    if t is float or t is int:
        return None
    if isinstance(reward, (bool, np.bool_)):
        return "bool"
    if isinstance(reward, (np.floating, np.integer)):
        return None
    return _describe(reward)


def is_bool(x: Any) -> bool:
    return type(x) is bool or type(x) is np.bool_


# --- info and aliasing ------------------------------------------------------------------


def freeze(x: Any) -> Any:
    """A comparable, immutable snapshot of an info value (NaN-safe; arrays by bytes)."""
    if isinstance(x, dict):
        return ("d", tuple((repr(k), freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return ("l", tuple(freeze(v) for v in x))
    if isinstance(x, np.ndarray):
        return ("a", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, float) and math.isnan(x):
        return ("nan",)
    if isinstance(x, np.generic):
        return ("g", x.dtype.str, x.tobytes())
    return x


class InfoWatch:
    """INFO_MUTATION_DETECTED: the env hands out one dict twice, or edits one it returned.

    Keeps the previous info and a frozen snapshot of it; at the next step the old dict must
    be a different object and still equal to its snapshot.
    """

    __slots__ = ("_prev", "_snap", "_prev_step")

    def __init__(self) -> None:
        self._prev: dict | None = None
        self._snap: Any = None
        self._prev_step = -1

    def observe(self, info: dict, step: int) -> tuple[str, dict] | None:
        prev, problem = self._prev, None
        if prev is not None:
            if info is prev:
                problem = ("the same info dict object was returned at steps "
                           f"{self._prev_step} and {step}; expected a new dict per step",
                           {"first_step": self._prev_step, "second_step": step, "kind": "reused"})
            elif (freeze(prev) if prev else ("d", ())) != self._snap:
                problem = (f"the info dict returned at step {self._prev_step} was modified by the env "
                           f"before step {step}; expected it unchanged after return",
                           {"returned_step": self._prev_step, "seen_changed_step": step, "kind": "modified"})
        self._prev, self._prev_step = info, step
        self._snap = freeze(info) if info else ("d", ())
        return problem

    def reset(self) -> None:
        self._prev = None


class AliasWatch:
    """OBS_ALIASED: an observation array the env returned is later changed in place.

    Keeps a reference and a copy of each returned array leaf; one step later the
    reference must still equal the copy. The copies double as the values the batch
    checks read, so buffered observations never change under the checker.
    """

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: list[tuple[Leaf, np.ndarray, np.ndarray, int]] = []

    def remember(self, leaf: Leaf, ref: np.ndarray, copy: np.ndarray, step: int) -> None:
        self._refs.append((leaf, ref, copy, step))

    def check(self, step: int) -> list[tuple[Leaf, int, float]]:
        """(leaf, step returned, max abs change) for each remembered array that changed."""
        bad = []
        for leaf, ref, copy, at in self._refs:
            # bytes, not values: NaN-safe and ~20x cheaper than np.array_equal on small arrays
            if ref.shape != copy.shape or ref.tobytes() != copy.tobytes():
                try:
                    diff = float(np.max(np.abs(ref.astype(np.float64) - copy.astype(np.float64))))
                except ValueError:
                    diff = float("nan")
                bad.append((leaf, at, diff))
        self._refs.clear()
        return bad


# --- whole-run statistics ---------------------------------------------------------------


def step_time_findings(durations_s: np.ndarray, th: Thresholds) -> list[Finding]:
    """STEP_DURATION_OUTLIER from all step durations (seconds).

    The p95 rule catches periodic slowness (every tenth step slow), the max rule a single
    long stall; each needs the ratio to the median *and* an absolute excess, so that the
    scheduler's few-millisecond preemptions on a busy machine never fire it.
    """
    d = np.asarray(durations_s, dtype=np.float64)
    if d.size < th.step_time_min_steps:
        return []
    med, p95, mx = (float(v) * 1e3 for v in (np.median(d), np.percentile(d, 95), d.max()))
    ev = {"median_ms": round(med, 4), "p95_ms": round(p95, 4), "max_ms": round(mx, 4), "steps": int(d.size),
          "ratio_threshold": th.step_time_ratio}
    if p95 > th.step_time_ratio * med and p95 - med > th.step_time_p95_floor_ms:
        return [Finding(C.STEP_DURATION_OUTLIER,
                        f"step time p95 {p95:.2f} ms vs median {med:.3f} ms: expected <= {th.step_time_ratio:g}x "
                        f"median (and excess <= {th.step_time_p95_floor_ms:g} ms), actual {p95 / med:.1f}x; "
                        f"{int(np.sum(d * 1e3 > th.step_time_ratio * med))} of {d.size} steps slow",
                        {**ev, "rule": "p95", "floor_ms": th.step_time_p95_floor_ms})]
    if mx > th.step_time_ratio * med and mx - med > th.step_time_max_floor_ms:
        return [Finding(C.STEP_DURATION_OUTLIER,
                        f"step time max {mx:.1f} ms vs median {med:.3f} ms: expected <= {th.step_time_ratio:g}x "
                        f"median (and excess <= {th.step_time_max_floor_ms:g} ms), actual {mx / med:.0f}x "
                        f"at step {int(np.argmax(d))}",
                        {**ev, "rule": "max", "floor_ms": th.step_time_max_floor_ms, "step": int(np.argmax(d))})]
    return []


def obs_equal(a: Any, b: Any) -> bool:
    """Deep equality of two observations (NaN-safe), for the reset-determinism check."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(obs_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(obs_equal(x, y) for x, y in zip(a, b))
    try:
        a_, b_ = np.asarray(a), np.asarray(b)
        if a_.shape != b_.shape:
            return False
        return bool(np.array_equal(a_, b_, equal_nan=np.issubdtype(a_.dtype, np.floating)))
    except (TypeError, ValueError):
        return a == b


def crash_finding(call: str, exc: BaseException, step: int, episode: int | None, tail_chars: int = 1500,
                  who: str = "") -> Finding:
    """ENV_CRASHED for an exception raised by the env's reset/step (or constructor)."""
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-tail_chars:]
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].name} ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else "?"
    return Finding(C.ENV_CRASHED,
                   f"{who}{call}() raised {type(exc).__name__}: {exc} in {where} at step {step}"
                   + (f", episode {episode}" if episode is not None else ""),
                   {"call": call, "exception": type(exc).__name__, "error": str(exc)[:500], "frame": where,
                    "first_step": step, "episode": episode, "traceback_tail": tail}, env_step=step)
