"""RolloutChecker: every contract check, fed one env interaction at a time.

``flow1 check`` drives an env and feeds each reset and step here; the EnvRunner callbacks
feed the sampled steps of live episodes to the same object. Per step it does only what
must be done per step (type/shape/dtype, reward and done types, info and aliasing
watches, timing); value checks (bounds, NaN, precision) run vectorised on buffered
batches, and distribution rules (reward, step time, reset drift, return drop) at the end.

What it keeps is bounded by bytes, whatever the observation size or the step count: a
batch buffer is judged when it reaches ``batch_max_bytes`` (a 4 MB observation is judged
16 steps at a time, still every step), and each series (rewards, step times, reset
features, returns) is a :class:`~flow1_ray.checks.series.Series` of at most
``series_max_bytes``, a uniform sample beyond that.

Size (~430 lines): one class, the single-agent checker with its per-step hot path; its
rules already live in their own files (env_spec, obs_flow, action_pipe, reward).
"""

from __future__ import annotations
# long module: RolloutChecker holds one stream's state for every per-step contract rule at once; its PASS-row summaries are in rollout_summary.py, the info and alias watches in info_alias.py

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gymnasium import spaces

from ...common import codes as C
from . import env_spec as es
from .action_mask import NO_VALID_ACTION, mask_key, mask_message, mask_of, valid_actions
from .action_map import ActionMapWatch
from .action_pipe import action_cast_error, check_action_batch
from ..findings import Finding, FindingLog
from .obs_flow import check_obs_batch, drift_features, reset_drift
from .reward import Episodes, reward_findings
from .info_alias import AliasWatch, InfoWatch
from .rollout_summary import checker_summary, unjudged_notes
from ..learner.reward_drop import ReturnTracker
from ..rule import Rule
from ..series import Series
from ..spaces import Leaf, UnsupportedSpace, get, leaves, structure_error
from ..thresholds import DEFAULT, Thresholds


@dataclass(frozen=True)
class CheckerMemory:
    """What a contract checker keeps is bounded by bytes, not by a count of steps.
    Observation and action values wait in a buffer for the vectorised OBS_FLOW and
    ACTION_PIPE checks; a buffer that reaches ``batch_max_bytes`` is judged at once (every
    step is still judged, in smaller batches: a 4 MB observation every 16 steps). Each
    per-step or per-episode series (rewards, step times, reset features, returns) keeps every
    row (16 bytes a value) up to ``series_max_bytes``, then a uniform sample of that size plus
    the exact count, extremes and first non-finite value."""

    batch_max_bytes: int = 64 * 2**20
    series_max_bytes: int = 16 * 2**20


THRESHOLDS = (CheckerMemory,)

RULES = (
    Rule("OBS_SHAPE_MISMATCH", C.ENV_SPEC, C.FAIL, "a reset/step observation's shape differs from observation_space"),
    Rule("OBS_DTYPE_MISMATCH", C.ENV_SPEC, C.FAIL,
         "a reset/step observation's type or dtype differs from observation_space"),
    Rule("REWARD_NOT_SCALAR", C.ENV_SPEC, C.FAIL, "reward is not a Python/NumPy real scalar"),
    Rule("DONE_NOT_BOOL", C.ENV_SPEC, C.FAIL, "terminated/truncated is not bool or np.bool_"),
    Rule("INFO_NOT_DICT", C.ENV_SPEC, C.FAIL, "reset/step info is not a dict"),
    Rule("INFO_MUTATION_DETECTED", C.ENV_SPEC, C.WARN,
         "the same info dict is returned twice, or a returned info changes later"),
    Rule("OBS_ALIASED", C.ENV_SPEC, C.WARN, "a returned observation array is later modified in place by the env"),
    Rule("ACTION_CAST_WARNING", C.ACTION_PIPE, C.WARN,
         "action dtype, shape or value changed between the sender and env.step"),
)


class _Buffer:
    """Values of one leaf since the last flush, with the env step of each."""

    __slots__ = ("values", "steps")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.steps: list[int] = []


def _truthy(flag: Any) -> bool:
    """A done flag as RLlib would read it; False for one that has no truth value."""
    if flag is True or flag is False:
        return flag
    try:
        return bool(np.any(flag))
    except (TypeError, ValueError):
        return False


def step_time_findings(durations: Series, waits: Series, load_probe: Any, th: Thresholds, live: bool) -> list[Finding]:
    """STEP_DURATION_OUTLIER over a checker's step times, the machine's share told apart: each
    step's own run-queue wait where the driver measured it (aligned with the durations), else
    the window's share from ``load_probe`` (live)."""
    d, d_steps = durations.rows()
    w, w_steps = waits.rows()
    aligned = w if len(w) == len(d) and np.array_equal(w_steps, d_steps) else None
    load = load_probe() if load_probe is not None and aligned is None else None
    return es.step_time_findings(d, th, min_stalls=3 if live else 1, steps=d_steps, waits_s=aligned,
                                 window_load=load)


class RolloutChecker:
    """Judges a stream of resets and steps against the env's spaces.

    Call :meth:`on_reset` after each reset, :meth:`on_step` after each step and
    :meth:`finish` once; :attr:`log` holds the aggregated findings.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 thresholds: Thresholds = DEFAULT, *, flush_every: int = 256, window: int | None = None,
                 log: FindingLog | None = None, obs_path: str = "obs", action_path: str = "action",
                 live: bool = False) -> None:
        """``window`` bounds the per-step series (rewards, durations, reset observations)
        for live runs; None keeps all of them (a ``flow1 check`` budget is bounded).
        ``log`` lets several checkers (one per sub-env of a vector env) share findings.
        ``obs_path``/``action_path`` name the values in paths and messages (one checker
        per agent of a multi-agent env says ``obs[agent 1]``). ``live=True`` is a training
        run's checker, judged again and again over hours: REWARD_DROP is left to the driver
        (the return of the whole run, not one sub-env's dip), the reset-drift test spends its
        false-alarm rate over looks taken as the episodes double (alpha/2, alpha/4, ...), so
        the run as a whole keeps it, and a single long step is not a stall (3 must repeat)."""
        self.th = thresholds
        self.live = live
        self.pipeline_of: Any = None   # live: () -> (the runner's pipeline normalises, its connectors): OBS_UNSCALED
        self.drift_judged = True       # live: one checker per runner tests its resets' drift (its false alarms add up)
        self._drift_looks = 0            # live: reset-drift tests taken so far
        self._next_drift_at = 2 * thresholds.drift_min_episodes
        self.obs_space = observation_space
        self.action_space = action_space
        self.mask_key = mask_key(observation_space, action_space)
        self.flush_every = flush_every
        self.log = log if log is not None else FindingLog()
        self.obs_path = obs_path
        self.obs_leaves = self._leaves(observation_space, obs_path, thresholds.image_min_side)
        self.act_leaves = self._leaves(action_space, action_path, thresholds.image_min_side)
        self._flat_obs = isinstance(observation_space, spaces.Space) and not isinstance(
            observation_space, (spaces.Dict, spaces.Tuple))
        self._flat_act = not isinstance(action_space, (spaces.Dict, spaces.Tuple))
        # spaces that define no contains(): their values pass through, with a note
        self._no_contains = {lf.path for lf in self.obs_leaves + self.act_leaves
                             if lf.opaque and not es.has_contains(lf.space)}
        self._obuf = [_Buffer() for _ in self.obs_leaves]
        self._abuf = [_Buffer() for _ in self.act_leaves]
        # rows a batch buffer holds before it is judged, whatever the episode: the rows of
        # every array leaf together stay within batch_max_bytes (flush_every rows of an
        # episode, or its end, flush it earlier as before)
        row_bytes = sum(_leaf_bytes(lf) for lf in self.obs_leaves + self.act_leaves)
        self.batch_rows = max(1, thresholds.batch_max_bytes // max(row_bytes, 1))
        self._buffered = 0               # rows in the buffers since the last flush
        self.batch_judged = 0            # observations judged by the batch checks so far, in this leaf:
        self._counted_leaf = next((i for i, lf in enumerate(self.obs_leaves) if not lf.opaque), None)
        self._info = InfoWatch()
        self._alias = AliasWatch()
        cap = thresholds.series_max_bytes
        self.returns = ReturnTracker(thresholds, max_bytes=cap)
        self.rewards = Series(cap, window, seed=1)
        self.durations = Series(cap, window, seed=2)
        self.reset_features = Series(cap, window, seed=3)
        self.action_map = ActionMapWatch()        # actions whose values a wrapper changed: a map or a loss
        self.ends = Series(cap, window, seed=4)        # each episode's end: 1.0 terminated, 0.0 truncated, at its step
        self.turn_ends = Series(cap, window, seed=5)   # a multi-agent env's agent handing control on: its turn's last step
        self.waits = Series(cap, window, seed=2)       # each step's run-queue wait, where the driver measured it
        self.load_probe: Any = None                    # live: the stepping thread's run-queue share per window
        self.steps = self.episodes = 0
        self._ep_len_total = 0
        self._ep_return = 0.0
        self._ep_len = 0
        self.cast_checked = 0

    @staticmethod
    def _leaves(space: Any, role: str, image_min_side: int) -> list[Leaf]:
        try:
            return leaves(space, role, image_min_side)
        except UnsupportedSpace:
            return []  # validate_space reports it; the values cannot be judged leaf by leaf

    # -- observations --------------------------------------------------------------------
    def _observe(self, obs: Any, step: int, reset: bool) -> None:
        if not self.obs_leaves:
            return
        if self._flat_obs:
            values = [obs]
        else:
            err = structure_error(obs, self.obs_space, self.obs_path)
            if err is not None:
                path, expected, actual = err
                self.log.hit(C.OBS_SHAPE_MISMATCH, path, lambda: (
                    f"{path} structure: expected {expected}, actual {actual} (first at step {step})",
                    {"path": path, "expected": expected, "actual": actual, "first_step": step}), env_step=step)
                return
            values = [get(obs, lf.keys) for lf in self.obs_leaves]
        ok_values = []
        for leaf, buf, v in zip(self.obs_leaves, self._obuf, values):
            if leaf.opaque:
                self._check_member(leaf, v, step, C.OBS_OUT_OF_BOUNDS)
                ok_values.append(v)
                continue
            err = es.leaf_type_error(v, leaf)
            if err is not None:
                code, expected, actual = err
                self.log.hit(code, leaf.path + ":" + actual, lambda: (
                    f"{leaf.path} {'dtype' if code == C.OBS_DTYPE_MISMATCH else 'shape'}: expected {expected}, "
                    f"actual {actual} (first at step {step})",
                    {"path": leaf.path, "expected": expected, "actual": actual, "first_step": step}), env_step=step)
                ok_values.append(None)
                continue
            if type(v) is np.ndarray:
                c = v.copy()
                self._alias.remember(leaf, v, c, step)
                v = c
            buf.values.append(v)
            buf.steps.append(step)
            ok_values.append(v)
        self._buffered += 1
        if reset and all(v is not None for v in ok_values):
            arrays = [(v, lf) for v, lf in zip(ok_values, self.obs_leaves) if not lf.opaque]
            f = drift_features([v for v, _ in arrays], [lf for _, lf in arrays])
            if f is not None:
                self.reset_features.append(f, step)

    def _check_member(self, leaf: Leaf, value: Any, step: int, code: str) -> None:
        """A value of an opaque leaf (Text, Sequence, Graph, a custom space): the space's
        own ``contains`` is the whole contract flow1 can judge."""
        if leaf.path in self._no_contains or es.is_member(value, leaf.space):
            return

        def build() -> tuple[str, dict]:
            expected, actual = es.membership_error(value, leaf.space)
            return (f"{leaf.path} not in its space: expected {expected}, actual {actual} (first at step {step})",
                    {"path": leaf.path, "expected": expected, "actual": actual, "first_step": step})

        self.log.hit(code, leaf.path + ":contains", build, env_step=step)

    def _flush(self, contiguous: bool = True) -> None:
        self._buffered = 0
        for i, (leaf, buf) in enumerate(zip(self.obs_leaves, self._obuf)):
            if buf.values:
                batch = np.asarray(buf.values) if leaf.shape == () else _stack(buf.values)
                if i == self._counted_leaf:
                    self.batch_judged += batch.shape[0]
                self.log.extend(check_obs_batch(leaf, batch, np.asarray(buf.steps), self.th, contiguous,
                                                self.pipeline_of))
                buf.values, buf.steps = [], []
        for leaf, buf in zip(self.act_leaves, self._abuf):
            if buf.values:
                try:
                    batch = np.asarray(buf.values) if leaf.shape == () else _stack(buf.values)
                except ValueError:  # ragged actions: the cast check reports them
                    batch = None
                if batch is not None:
                    self.log.extend(check_action_batch(leaf, batch, np.asarray(buf.steps)))
                buf.values, buf.steps = [], []

    # -- the stream ----------------------------------------------------------------------
    def _check_mask(self, obs: Any, step: int, terminated: Any = False, truncated: Any = False) -> None:
        """ACTION_MASK_INVALID: an observation carrying RLlib's action mask that cannot mask
        (an episode's last observation, which no action follows, may mask every action)."""
        mask = mask_of(obs, self.mask_key)
        if mask is None:
            return
        _, problem = valid_actions(mask, self.action_space)
        if problem is not None and not (problem == NO_VALID_ACTION and (_truthy(terminated) or _truthy(truncated))):
            self.log.hit(C.ACTION_MASK_INVALID, problem[:40], lambda: mask_message(
                problem, mask, self.action_space, step, self.obs_path, self.mask_key), env_step=step)

    def on_reset(self, obs: Any, info: Any) -> None:
        """After each reset: the reset observation and info."""
        self._flush()
        self._info.reset()
        self._check_alias(self.steps)
        self._observe(obs, self.steps, reset=True)
        self._check_mask(obs, self.steps)
        self._check_info(info, self.steps)
        if self._buffered >= self.batch_rows:
            self._flush()

    def on_step(self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any,
                duration_s: float | None = None, received_action: Any = None, wait_s: float | None = None) -> bool:
        """After each step; True when it ended the episode. ``received_action`` is what
        reached the base env, when known; ``wait_s`` the step's run-queue wait (the machine's
        share of its duration, :mod:`.machine_load`)."""
        step = self.steps + 1  # steps are counted from 1; a reset observation sits at the count so far
        self.steps = step
        self._check_alias(step)
        self._record_action(action, received_action, step)
        self._observe(obs, step, reset=False)
        self._check_mask(obs, step, terminated, truncated)
        self._record_reward(reward, step)
        if not (es.is_bool(terminated) and es.is_bool(truncated)):
            bad = terminated if not es.is_bool(terminated) else truncated
            which = "terminated" if not es.is_bool(terminated) else "truncated"
            self.log.hit(C.DONE_NOT_BOOL, which, lambda: (
                f"{which}: expected bool or np.bool_, actual {type(bad).__name__} {bad!r} (first at step {step})",
                {"field": which, "actual": type(bad).__name__, "first_step": step}), env_step=step)
        self._check_info(info, step)
        if duration_s is not None:
            self.durations.append(duration_s, step)
            if wait_s is not None:
                self.waits.append(wait_s, step)
        self._ep_len += 1
        if terminated is True or truncated is True or not (terminated is False and truncated is False) and (
                bool(np.any(terminated)) or bool(np.any(truncated))):
            self.end_episode(terminated=_truthy(terminated))
            return True
        if self._ep_len % self.flush_every == 0 or self._buffered >= self.batch_rows:
            self._flush()
        return False

    def _check_alias(self, step: int) -> None:
        for leaf, at, diff in self._alias.check(step):
            self.log.hit(C.OBS_ALIASED, leaf.path, lambda: (
                f"{leaf.path} returned at step {at} was modified in place by step {step} (max change {diff:.4g}): "
                f"expected returned arrays to stay unchanged; return a copy",
                {"path": leaf.path, "returned_step": at, "modified_by_step": step, "max_change": diff}), env_step=at)

    def _record_action(self, action: Any, received: Any, step: int) -> None:
        for leaf, buf in zip(self.act_leaves, self._abuf):
            try:
                v = action if self._flat_act else get(action, leaf.keys)
            except (KeyError, IndexError, TypeError):
                continue
            if leaf.opaque:
                self._check_member(leaf, v, step, C.ACTION_OUT_OF_BOUNDS)
            else:
                buf.values.append(v)
                buf.steps.append(step)
        if received is not None:
            self.cast_checked += 1
            err = None if received is action else action_cast_error(
                action, received, on_values=lambda path, a, b: self.action_map.add(path, a, b, step))
            if err is not None:
                msg, ev = err
                self.log.hit(C.ACTION_CAST_WARNING, ev["path"], lambda: (
                    f"{msg} (first at step {step})", {**ev, "first_step": step}), env_step=step)

    def _record_reward(self, reward: Any, step: int) -> None:
        t = type(reward)
        if t is not float and t is not int:
            err = es.reward_type_error(reward)
            if err is not None:
                self.log.hit(C.REWARD_NOT_SCALAR, "", lambda: (
                    f"reward: expected a Python/NumPy real scalar, actual {err} (first at step {step})",
                    {"expected": "real scalar", "actual": err, "first_step": step}), env_step=step)
            try:
                reward = float(np.asarray(reward, dtype=np.float64).reshape(-1)[0])
            except (TypeError, ValueError, IndexError):
                return
        self.rewards.append(reward, step)
        self._ep_return += reward

    def _check_info(self, info: Any, step: int) -> None:
        if type(info) is not dict and not isinstance(info, dict):
            self.log.hit(C.INFO_NOT_DICT, "", lambda: (
                f"info: expected dict, actual {type(info).__name__} (first at step {step})",
                {"expected": "dict", "actual": type(info).__name__, "first_step": step}), env_step=step)
            return
        problem = self._info.observe(info, step)
        if problem is not None:
            msg, ev = problem
            self.log.hit(C.INFO_MUTATION_DETECTED, ev["kind"], lambda: (msg, ev), env_step=step)

    def end_episode(self, terminated: bool = False) -> None:
        """An episode ended: ``terminated`` (its outcome, a goal or a loss) or truncated."""
        self.ends.append(1.0 if terminated else 0.0, self.steps)
        self.episodes += 1
        self._ep_len_total += self._ep_len
        self.returns.add(self._ep_return)
        self._ep_return, self._ep_len = 0.0, 0
        self._flush()

    def end_turn(self) -> None:
        """The step just taken ended the agent's turn (a multi-agent env handed control to
        another agent: a hierarchical env's sub-task done): its reward is that turn's outcome."""
        self.turn_ends.append(1.0, self.steps)

    def record(self, finding: Finding, key: str = "") -> None:
        """A finding made by the driver (a crash, an API mismatch)."""
        self.log.add(finding, key)

    def judge(self) -> None:
        """Run the rules over the whole stream (or the live window) so far."""
        self._flush(contiguous=True)
        r, r_steps = self.rewards.rows()
        sampled = self.rewards.sampled
        self.log.extend(reward_findings(r, self.th, r_steps, seen=self.rewards.seen if sampled else None,
                                        non_finite=self.rewards.non_finite if sampled else None,
                                        episodes=self._episodes()))
        self.log.extend(step_time_findings(self.durations, self.waits, self.load_probe, self.th, self.live))
        feats = self.reset_features
        if len(feats) and not feats.ragged:
            f = self._drift(feats.values().reshape(len(feats.values()), -1))
            if f is not None:
                self.log.add(f)
        for f in self.action_map.findings(self.cast_checked):
            self.log.put(f, f"map:{f.evidence.get('path')}")
        drop = None if self.live else self.returns.check()
        if drop is not None:
            self.log.add(drop)

    def _episodes(self) -> Episodes | None:
        """Where the episodes of the reward rows ended; None where the ends were sampled (a
        reward could then not be placed in its episode)."""
        if self.ends.sampled:
            return None
        v, e_steps = self.ends.rows()
        turns = None if self.turn_ends.sampled else self.turn_ends.rows()[1]
        return Episodes(e_steps, v > 0.5, turns)

    def _drift(self, feats: np.ndarray) -> Finding | None:
        """OBS_DISTRIBUTION_DRIFT: once over the whole stream (``flow1 check``), or, live, at
        each doubling of the reset episodes with the p-value threshold halved each time
        (alpha spending: the looks of a whole run together keep ``drift_p_value``)."""
        if not self.live:
            return reset_drift(feats, self.th)
        if not self.drift_judged or len(feats) < self._next_drift_at:
            return None
        self._drift_looks += 1
        self._next_drift_at = 2 * len(feats)
        th = replace(self.th, drift_p_value=self.th.drift_p_value / 2 ** self._drift_looks)
        return reset_drift(feats, th)

    def finish(self, expect_episode_end: bool = True) -> list[Finding]:
        """Run the whole-stream rules and return every finding. ``expect_episode_end``:
        no episode end in all the steps seen is EPISODE_NEVER_ENDS (a driver that extends
        its budget first, like ``check_env``'s, judges that itself and passes False)."""
        self.judge()
        if expect_episode_end and self.steps > 0 and self.episodes == 0:
            self.log.add(es.never_ends_finding(self.steps, self.steps, "steps", None, False))
        return self.log.findings()

    def notes(self) -> list[str]:
        """What was passed through unjudged, said once in the ENV_SPEC summary."""
        return unjudged_notes(self)

    def summary(self) -> dict[str, dict]:
        """The numbers behind each module's PASS row (:func:`checker_summary`)."""
        return checker_summary(self)

    def _row_bytes(self) -> int:
        return sum(_leaf_bytes(lf) for lf in self.obs_leaves + self.act_leaves)


def _leaf_bytes(leaf: Leaf) -> int:
    """Bytes one value of an array leaf takes in a batch (opaque leaves are not buffered)."""
    if leaf.opaque:
        return 0
    return int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize if leaf.shape else leaf.dtype.itemsize


def _stack(values: list[np.ndarray]) -> np.ndarray:
    """Values stacked on axis 0; one value as a view (a 100 MB observation is not copied again)."""
    return values[0][np.newaxis] if len(values) == 1 else np.stack(values)

