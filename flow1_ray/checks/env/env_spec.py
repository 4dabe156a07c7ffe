"""ENV_SPEC checks: the env's API contract, judged on every value it returns.

Pure functions and small watchers over plain values; nothing here steps an env, so the
same code judges ``flow1 check`` and live EnvRunner samples.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from ..findings import Finding, advisory
from ..rule import Rule
from ..spaces import Leaf
from ..thresholds import Thresholds


@dataclass(frozen=True)
class EpisodeBudget:
    """EPISODE_NEVER_ENDS: when no episode ended within the budget, step on (same checks)
    until one does, up to ``episode_extension_factor`` x budget steps, at most
    ``episode_extension_max_steps``, at most ``episode_extension_max_s`` seconds."""

    episode_extension_factor: int = 20
    episode_extension_max_steps: int = 100_000
    episode_extension_max_s: float = 30.0


@dataclass(frozen=True)
class StepTiming:
    """STEP_DURATION_OUTLIER: both a ratio to the median and an absolute excess are needed,
    or a busy machine's scheduler hiccups read as a slow env."""

    step_time_ratio: float = 3.0
    step_time_p95_floor_ms: float = 5.0      # p95 - median must exceed this
    step_time_max_floor_ms: float = 100.0    # max - median must exceed this
    step_time_min_steps: int = 20


RULES = (
    Rule("NONDETERMINISTIC_RESET", C.ENV_SPEC, C.WARN,
         "reset(seed=s) twice gives different observations, or reset() after reset(seed=s) does in two runs"),
    Rule("RESET_KEEPS_STATE", C.ENV_SPEC, C.WARN,
         "after the run, reset(seed=s) and the first episode's actions replayed leave the first episode (a reset "
         "observation, a step's observation, reward or end, a step that raises) while attributes of the env kept "
         "values of earlier episodes", evidence=("seed", "diverges", "kept", "episodes")),
    Rule("EPISODE_NEVER_ENDS", C.ENV_SPEC, C.WARN,
         "no terminated/truncated within the budget extended {episode_extension_factor}x (at most "
         "{episode_extension_max_steps:,} steps, {episode_extension_max_s:g} s); an advisory when one ended after "
         "the budget", EpisodeBudget),
    Rule("STEP_DURATION_OUTLIER", C.ENV_SPEC, C.WARN,
         "p95 or max step time > {step_time_ratio:g}x the median and more than {step_time_p95_floor_ms:g} ms "
         "(p95) / {step_time_max_floor_ms:g} ms (max) above it, over at least {step_time_min_steps} steps",
         StepTiming),
    Rule("ENV_CRASHED", C.ENV_SPEC, C.FAIL,
         "reset/step raised an exception, or the env's process died (signal, exit) inside it"),
    Rule("ENV_HUNG", C.ENV_SPEC, C.FAIL,
         "make/reset/step did not return within its timeout (flow1 check), with the env's stack"),
)

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


def has_contains(space: spaces.Space) -> bool:
    """Whether a space defines ``contains`` (the base class only raises NotImplementedError)."""
    return getattr(type(space), "contains", None) is not spaces.Space.contains


def is_member(value: Any, space: spaces.Space) -> bool:
    """``space.contains(value)``, where a contains() that raises on the value means no."""
    try:
        return bool(space.contains(value))
    except Exception:
        return False


def membership_error(value: Any, space: spaces.Space) -> tuple[str, str] | None:
    """(expected, actual) when ``space.contains(value)`` says no, SB3-style; None when the
    value is a member. The space's own ``contains`` is the contract: a Text checks charset
    and length, MiniGrid's MissionSpace its mission template."""
    try:
        if space.contains(value):
            return None
        reason = ""
    except Exception as e:  # a value so far off that contains() cannot even look at it
        reason = f" (contains() raised {type(e).__name__}: {e})"
    expected = f"a value in {space!r}"[:200]
    if isinstance(space, spaces.Text) and isinstance(value, str):
        return expected, _text_mismatch(value, space)
    return expected, f"{_short(value)}{reason}"


def _text_mismatch(value: str, space: spaces.Text) -> str:
    bad = sorted(set(value) - set(space.character_set))
    parts = []
    if not space.min_length <= len(value) <= space.max_length:
        parts.append(f"length {len(value)} outside [{space.min_length}, {space.max_length}]")
    if bad:
        parts.append(f"characters not in the charset: {''.join(bad)[:20]!r}")
    return f"{_short(value)} ({'; '.join(parts) or 'rejected by contains()'})"


def _short(value: Any, limit: int = 60) -> str:
    r = repr(value)
    return f"{type(value).__name__} {r[:limit] + '...' if len(r) > limit else r}"


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


# --- whole-run statistics ---------------------------------------------------------------


def step_time_findings(durations_s: np.ndarray, th: Thresholds, min_stalls: int = 1,
                       steps: np.ndarray | None = None, waits_s: np.ndarray | None = None,
                       window_load: dict | None = None) -> list[Finding]:
    """STEP_DURATION_OUTLIER from all step durations (seconds); ``steps``, when given, are
    their env steps (else a duration's index stands for its step).

    The p95 rule catches periodic slowness (every tenth step slow), the max rule a long
    stall; each needs the ratio to the median *and* an absolute excess, so that the
    scheduler's few-millisecond preemptions on a busy machine never fire it. ``min_stalls``:
    how many steps must be past the max rule's line -- a live run over hours meets the odd
    100 ms pause of its own process (a garbage collection of a large heap, the OS preempting
    it), which says nothing about the env; a stall that repeats does.

    The machine's load is not the env's (:mod:`.machine_load`): ``waits_s``, each step's
    run-queue wait (``flow1 check``), or ``window_load``, the stepping thread's run-queue
    share over the live window. When the wait covers half the slow steps' excess (live: the
    thread waited >= 10 % of the window, or for at least half the slow steps' excess), the finding
    is an advisory that says so.
    """
    d = np.asarray(durations_s, dtype=np.float64)
    if d.size < th.step_time_min_steps:
        return []
    med, p95, mx = (float(v) * 1e3 for v in (np.median(d), np.percentile(d, 95), d.max()))
    ev = {"median_ms": round(med, 4), "p95_ms": round(p95, 4), "max_ms": round(mx, 4), "steps": int(d.size),
          "ratio_threshold": th.step_time_ratio}
    if p95 > th.step_time_ratio * med and p95 - med > th.step_time_p95_floor_ms:
        found = Finding(C.STEP_DURATION_OUTLIER,
                        f"step time p95 {p95:.2f} ms vs median {med:.3f} ms: expected <= {th.step_time_ratio:g}x "
                        f"median (and excess <= {th.step_time_p95_floor_ms:g} ms), actual {p95 / med:.1f}x; "
                        f"{int(np.sum(d * 1e3 > th.step_time_ratio * med))} of {d.size} steps slow",
                        {**ev, "rule": "p95", "floor_ms": th.step_time_p95_floor_ms})
        return [_machine_or_env(found, d, d * 1e3 > th.step_time_ratio * med, med, waits_s, window_load)]
    line = max(th.step_time_ratio * med, med + th.step_time_max_floor_ms)
    at = int(steps[int(np.argmax(d))]) if steps is not None and len(steps) == d.size else int(np.argmax(d))
    stalls = int(np.sum(d * 1e3 > line))
    if mx > th.step_time_ratio * med and mx - med > th.step_time_max_floor_ms and stalls >= min_stalls:
        found = Finding(C.STEP_DURATION_OUTLIER,
                        f"step time max {mx:.1f} ms vs median {med:.3f} ms: expected <= {th.step_time_ratio:g}x "
                        f"median (and excess <= {th.step_time_max_floor_ms:g} ms), actual {mx / med:.0f}x "
                        f"at step {at}",
                        {**ev, "rule": "max", "floor_ms": th.step_time_max_floor_ms, "step": at,
                         "stalls": stalls, "min_stalls": min_stalls})
        return [_machine_or_env(found, d, d * 1e3 > line, med, waits_s, window_load)]
    return []


def _machine_or_env(found: Finding, d: np.ndarray, slow: np.ndarray, med_ms: float, waits_s: np.ndarray | None,
                    window_load: dict | None) -> Finding:
    """The finding as it is when the slow steps ran; an advisory naming the machine's load when
    they waited for a CPU instead."""
    from .machine_load import LOAD_SHARE

    share = None
    if waits_s is not None and len(waits_s) == len(d) and slow.any():
        excess = np.maximum(d[slow] - med_ms / 1e3, 0.0)
        waited = np.minimum(np.asarray(waits_s, dtype=np.float64)[slow], excess)
        share = float(waited.sum() / excess.sum()) if excess.sum() > 0 else None
        found.evidence["runqueue_share_of_excess"] = share
        loaded = share is not None and share >= LOAD_SHARE
    elif window_load and window_load.get("runqueue_share") is not None:
        found.evidence.update({"window_" + k: v for k, v in window_load.items()})
        share = window_load["runqueue_share"]
        # a few preempted steps in a long window: the thread's wait over the window covers
        # their excess (measured: IMPALA's runner beside an actor importing RLlib, 7 of 47
        # checked steps ~6 ms slow, a 2 % share of the window)
        excess = float(np.maximum(d[slow] - med_ms / 1e3, 0.0).sum()) if slow.any() else 0.0
        waited = float(window_load.get("runqueue_wait_s") or 0.0)
        covers = excess > 0 and waited >= LOAD_SHARE * excess
        loaded = share >= 0.1 or covers
    else:
        return found
    if not loaded:
        return found
    what = (f"{share:.0%} of the slow steps' excess was spent waiting for a CPU (run-queue wait, or the "
            "host's steal of the VM's CPU)"
            if waits_s is not None else f"the stepping thread waited for a CPU {share:.0%} of the time"
            if share >= 0.1 else f"the stepping thread waited for a CPU {waited * 1e3:.0f} ms in this window, at "
            f"least half the slow steps' excess ({excess * 1e3:.0f} ms)")
    return advisory(C.STEP_DURATION_OUTLIER, f"{found.message}; but {what}: the machine's load, not the env "
                    f"(RESOURCE_CONTENTION judges a node's load across its runners)",
                    {**found.evidence, "cause": "machine_load"}, env_step=found.env_step)


def long_episode_advisory(budget: int, first_end_step: int, steps: int) -> Finding:
    """EPISODE_NEVER_ENDS as an advisory: no episode ended within the budget, but one did
    within the extension. Episodes longer than the budget say nothing against the env
    (Pong, a 3,000-step locomotion task); they only mean few episodes were judged."""
    suggest = -(-10 * first_end_step // 1000) * 1000  # ~10 episodes, rounded up to 1000s
    return advisory(C.EPISODE_NEVER_ENDS,
                    f"episodes are longer than the {budget}-step budget: the first ended at step {first_end_step}, "
                    f"and the checks judged all {steps} steps; pass --steps {suggest} (about 10 episodes) so that "
                    f"the per-episode rules (return drop, reset drift) see enough episodes",
                    {"budget": budget, "first_end_step": first_end_step, "steps": steps, "suggested_steps": suggest},
                    env_step=first_end_step)


def never_ends_finding(steps: int, budget: int, stopped_by: str, time_limit: int | None,
                       has_time_limit: bool) -> Finding:
    """EPISODE_NEVER_ENDS WARN: not one terminated/truncated even within the extension.

    ``stopped_by`` says which cap ended the search ("steps" or "time"); ``time_limit`` is
    the env's ``spec.max_episode_steps`` (None if unset), ``has_time_limit`` whether a
    TimeLimit wrapper is on the env."""
    if has_time_limit or time_limit is not None:
        hint = (f"it has a time limit of {time_limit} steps, longer than the {steps} tried: check that it can "
                f"terminate, or lower max_episode_steps")
    else:
        hint = "it has no TimeLimit and no spec.max_episode_steps: add one (gymnasium.wrappers.TimeLimit)"
    cap = "the wall-clock cap" if stopped_by == "time" else "the step cap"
    return Finding(C.EPISODE_NEVER_ENDS,
                   f"no terminated/truncated in {steps} steps (the {budget}-step budget, extended until {cap}): "
                   f"expected episodes to end; {hint}",
                   {"steps": steps, "budget": budget, "stopped_by": stopped_by, "has_time_limit": has_time_limit,
                    "max_episode_steps": time_limit})



def crash_finding(call: str, exc: BaseException, step: int, episode: int | None, tail_chars: int = 1500,
                  who: str = "") -> Finding:
    """ENV_CRASHED for an exception raised by the env's reset/step (or constructor), or a
    ``sys.exit(n)`` called inside it (SystemExit, with its code)."""
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-tail_chars:]
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].name} ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else "?"
    exited = isinstance(exc, SystemExit)
    what = f"called sys.exit({exc.code!r})" if exited else f"raised {type(exc).__name__}: {exc}"
    return Finding(C.ENV_CRASHED,
                   f"{who}{call}() {what} in {where} at step {step}"
                   + (f", episode {episode}" if episode is not None else ""),
                   {"call": call, "exception": type(exc).__name__, "error": str(exc)[:500], "frame": where,
                    "first_step": step, "episode": episode, "traceback_tail": tail,
                    **({"exit_code": exc.code} if exited else {})}, env_step=step)
