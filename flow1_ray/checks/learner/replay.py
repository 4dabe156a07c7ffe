"""The replay buffer of DQN and SAC: its capacity against the run and the memory, the fill
learning starts from, and the replay ratio (a buffer too small for the run or the memory,
learning that starts on a near-empty buffer, each stored step replayed too often or too
rarely). No Ray.

RLlib 2.60 reports the buffer in ``result["replay_buffer"]`` once learning has started:
``num_env_steps_stored`` (a mean over the iteration's samples), ``num_env_steps_added_lifetime``,
``num_env_steps_evicted_lifetime`` and ``num_env_steps_sampled_lifetime`` -- the steps
*replayed* into train batches. So the fill, capacity and ratio rules read a plain
``result.json`` too; the memory rule needs the buffer's bytes per step, which Flow1Callbacks
measure in the driver where the buffer lives (``result["flow1"]["replay"]``,
:mod:`flow1_ray.driver.replay_footprint`).

The replay ratio -- steps replayed per step added -- is judged against the algorithm's
published one (DQN, Mnih et al. 2015: a 32-step batch every 4 steps, 8; SAC, Haarnoja et al.
2018: a 256-step batch every step, 256). RLlib's own defaults sit within 4x of it (measured:
DQN CartPole, no remote runner, 25.6; 2 runners, ~11); many runners feeding one learner
divide it (DQN's batch of 32 over 8 runners x 8 envs: 0.44, most samples never trained on).
A transition's mean age when sampled is half the buffer's content; the buffer turns over in
capacity / (steps added per update) updates.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...common import codes as C
from ...common import schema as S
from .. import advice as A
from ..curves import finite, result_section
from ..findings import Finding
from .learner_reading import RunContext, once
from ..rule import Rule
from ..thresholds import DEFAULT, Thresholds

#: the replay ratio (steps replayed per step added) each algorithm was published with
REFERENCE_RATIO = {"DQN": 8.0, "SAC": 256.0}


@dataclass(frozen=True)
class ReplayThresholds:
    """TRAIN_CURVES: the replay buffer of the off-policy learners."""

    replay_min_batches: float = 50.0      # REPLAY_CAPACITY: a full, evicting buffer holding fewer train batches than this ...
    replay_ratio_low: float = 16.0        # REPLAY_RATIO: steps replayed per step added below the algorithm's own / this ...
    replay_ratio_high: float = 32.0       # ... or above it x this ...
    replay_ratio_window: int = 3          # ... over this many learning iterations, with the return stalled
    replay_memory_share: float = 0.8      # REPLAY_MEMORY: filling to capacity needs more than this share of the memory left
    replay_rss_min_steps: int = 5000      # ... (a step's size: its arrays, or the driver's RSS growth per step over this many steps)


RULES = (
    Rule("REPLAY_UNDERFILLED", C.TRAIN_CURVES, C.WARN,
         "learning starts with fewer steps in the buffer than one train batch (num_steps_sampled_before_learning_"
         "starts, or one sampling round if more, or the capacity if less, < the train batch size), seen at the "
         "first learning iteration: each update draws the same few transitions many times",
         evidence=("stored_at_start", "train_batch", "learning_starts", "capacity", "knobs"),
         knobs=("num_steps_sampled_before_learning_starts", "replay_buffer_config")),
    Rule("REPLAY_CAPACITY", C.TRAIN_CURVES, C.WARN,
         "the buffer is full and evicting while it holds fewer than {replay_min_batches:g} train batches, with the "
         "return dropped or stalled: it keeps only the last few updates' samples and the learner forgets what it "
         "saw before", ReplayThresholds,
         evidence=("capacity", "train_batch", "turnover_updates", "sample_age_steps", "knobs"),
         knobs=("replay_buffer_config",)),
    Rule("REPLAY_RATIO", C.TRAIN_CURVES, C.WARN,
         "the steps replayed per step added, over the last {replay_ratio_window} learning iterations, off the "
         "algorithm's published ratio (DQN 8, SAC 256): below it / {replay_ratio_low:g} or above it x "
         "{replay_ratio_high:g}, with the return stalled",
         ReplayThresholds, evidence=("replay_ratio", "reference", "native_ratio", "knobs"),
         knobs=("training_intensity",)),
    Rule("REPLAY_MEMORY", C.TRAIN_CURVES, C.WARN,
         "filling the buffer to its capacity needs more than {replay_memory_share:.0%} of the memory this process "
         "has left (the driver, where RLlib keeps the buffer; the cgroup's limit where lower): the run will be "
         "killed when the buffer fills", ReplayThresholds,
         evidence=("capacity", "stored", "bytes_per_step", "needed", "available", "knobs"),
         knobs=("replay_buffer_config",)),
)


def _algo_key(algo: str | None) -> str | None:
    name = (algo or "").upper()
    for key in REFERENCE_RATIO:
        if key in name:
            return key
    return None


def train_batch(config: Any) -> int | None:
    """The steps one update trains on (RLlib's total_train_batch_size)."""
    v = A._get(config, "total_train_batch_size")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
        per = A._get(config, "train_batch_size_per_learner")
        per = per if isinstance(per, (int, float)) and not isinstance(per, bool) and per > 0 else \
            A._get(config, "train_batch_size")
        if not isinstance(per, (int, float)) or isinstance(per, bool) or per <= 0:
            return None
        v = per * max(1, int(A._get(config, "num_learners") or 0))
    return int(v)


def _round_size(config: Any) -> float:
    """The steps one sampling round adds: rollout_fragment_length x envs x runners (the
    driver's own runner samples when there is no remote one)."""
    frag = A._get(config, "rollout_fragment_length")
    frag = frag if isinstance(frag, (int, float)) and not isinstance(frag, bool) and frag > 0 else 1
    envs = A._get(config, "num_envs_per_env_runner") or 1
    return float(frag * envs * max(int(A._get(config, "num_env_runners") or 0), 1))


def native_ratio(config: Any) -> float | None:
    """RLlib's own replay ratio for this config without training_intensity: one train batch
    per sampling round of rollout_fragment_length x envs x (runners + 1) steps (dqn.py's
    calculate_rr_weights)."""
    batch = train_batch(config)
    frag = A._get(config, "rollout_fragment_length")
    envs = A._get(config, "num_envs_per_env_runner") or 1
    runners = A._get(config, "num_env_runners") or 0
    if not batch or not isinstance(frag, (int, float)) or isinstance(frag, bool) or frag <= 0:
        return None
    return batch / (frag * envs * max(runners + 1, 1))


@dataclass
class ReplayRules:
    """The replay-buffer rules over a run's results; :meth:`add` one result per iteration."""

    config: Any = None
    knobs: A.Knobs = field(default_factory=A.Knobs)
    thresholds: Thresholds = DEFAULT
    online: bool = True
    seen: int = 0
    last: tuple | None = None                    # (replayed, added) lifetime at the previous learning iteration
    ratios: deque = field(default_factory=lambda: deque(maxlen=16))
    armed: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    rss_ref: tuple | None = None                 # (stored, rss) at the second footprint read
    footprints: int = 0

    def add(self, result: Mapping, run: RunContext) -> list[Finding]:
        rb = result_section(result, "replay_buffer")
        if not self.online or not rb:
            return []
        stored = finite(rb.get("num_env_steps_stored"))
        added = finite(rb.get("num_env_steps_added_lifetime"))
        replayed = finite(rb.get("num_env_steps_sampled_lifetime"))
        evicted = finite(rb.get("num_env_steps_evicted_lifetime"))
        self.seen += 1
        ratio = None
        if added is not None and replayed is not None:
            if self.last is not None and added > self.last[1]:
                ratio = (replayed - self.last[0]) / (added - self.last[1])
                self.ratios.append(ratio)
            self.last = (replayed, added)
        batch = train_batch(self.config)
        buf_cfg = A._get(self.config, "replay_buffer_config")
        buf_cfg = buf_cfg if isinstance(buf_cfg, Mapping) else {}
        capacity = finite(buf_cfg.get("capacity"))
        foot = result_section(result_section(result, S.RESULT_KEY), "replay")
        capacity = finite(foot.get("capacity")) or capacity
        self.values = {k: v for k, v in {"replay_stored": stored, "replay_ratio": ratio,
                                         "replay_sample_age_steps": stored / 2 if stored is not None else None,
                                         "replay_bytes_per_step": finite(foot.get("bytes_per_step"))}.items()
                       if v is not None}
        out = [self._underfilled(stored, batch, capacity), self._capacity(stored, evicted, batch, capacity, run),
               self._ratio(batch, run), self._memory(foot, capacity)]
        return [f for f in out if f is not None]

    # -- learning that starts before the buffer holds a batch ------------------------------
    def _underfilled(self, stored: float | None, batch: int | None, capacity: float | None) -> Finding | None:
        """RLlib starts updating once num_steps_sampled_before_learning_starts steps were sampled;
        by then the buffer holds those steps, or one sampling round if that is more (a round:
        rollout_fragment_length x envs x runners), or its capacity if that is less. The result's
        num_env_steps_stored is a mean over the first learning iteration: later, fuller."""
        if self.seen != 1 or not batch:
            return None
        starts = self.knobs.number("num_steps_sampled_before_learning_starts") or 0.0
        first = max(starts, _round_size(self.config))
        if capacity is not None:
            first = min(first, capacity)
        if first >= batch:
            return None
        knobs: list[A.Knob] = []
        if capacity is not None and capacity < batch:
            knobs.append(_capacity_knob(self.config, max(100 * batch, int(capacity) * 10),
                                        "a buffer smaller than one train batch can never fill it"))
        else:
            value = 10 * batch
            knobs.append(A.Knob("num_steps_sampled_before_learning_starts", int(starts), value,
                                f"{value // batch} train batches in the buffer before the first update"))
        reported = "" if stored is None else f"; {stored:.0f} on average over that iteration"
        return Finding(C.REPLAY_UNDERFILLED, (
            f"learning started with {first:.0f} steps in the replay buffer against a train batch of {batch} "
            f"(num_steps_sampled_before_learning_starts={starts:g}"
            f"{'' if capacity is None else f', capacity {capacity:.0f}'}){reported}; expected at least one batch's "
            f"worth: the first updates draw each stored transition ~{batch / max(first, 1):.0f} times and fit a "
            f"handful of random-policy transitions" + A.advice_text(knobs)),
            {"stored_at_start": first, "stored": stored, "train_batch": batch, "learning_starts": starts,
             "capacity": capacity, "knobs": [k.as_dict() for k in knobs]})

    # -- a buffer too small for the run ------------------------------------------------------
    def _capacity(self, stored, evicted, batch, capacity, run: RunContext) -> Finding | None:
        th = self.thresholds
        if capacity is None or not batch or not evicted or evicted <= 0:
            return None
        small = capacity < th.replay_min_batches * batch
        if not once(self.armed, "capacity", small and (run.dropped or run.stalled is True)):
            return None
        per_update = self._added_per_update(batch)
        turnover = capacity / per_update if per_update else None
        value = max(10 * int(capacity), int(100 * batch))
        knobs = [_capacity_knob(self.config, value, f"{value // batch} train batches of past samples")]
        return Finding(C.REPLAY_CAPACITY, (
            f"the replay buffer is full and evicting at capacity {capacity:.0f} steps, {capacity / batch:.3g} train "
            f"batches of {batch}"
            f"{'' if turnover is None else f'; it turns over every {turnover:.3g} updates'}, while the return "
            f"{'dropped' if run.dropped else 'stalled below its best'}; expected >= {th.replay_min_batches:g} "
            f"batches: the learner replays only the samples of its last updates and forgets the states it no "
            f"longer visits" + A.advice_text(knobs)),
            {"capacity": capacity, "train_batch": batch, "stored": stored, "evicted": evicted,
             "turnover_updates": turnover, "sample_age_steps": stored / 2 if stored is not None else None,
             "threshold_batches": th.replay_min_batches, "return_dropped": run.dropped,
             "knobs": [k.as_dict() for k in knobs]})

    def _added_per_update(self, batch: int) -> float | None:
        window = list(self.ratios)[-self.thresholds.replay_ratio_window:]
        med = statistics.median(window) if window else None
        return batch / med if med else None

    # -- the replay ratio ------------------------------------------------------------------
    def _ratio(self, batch: int | None, run: RunContext) -> Finding | None:
        th = self.thresholds
        key = _algo_key(self.knobs.algo)
        window = list(self.ratios)[-th.replay_ratio_window:]
        if key is None or len(window) < th.replay_ratio_window:
            return None
        ref, ratio = REFERENCE_RATIO[key], statistics.median(window)
        low, high = ratio < ref / th.replay_ratio_low, ratio > ref * th.replay_ratio_high
        if not once(self.armed, "ratio", (low or high) and run.stalled is True):
            return None
        native = native_ratio(self.config)
        intensity = A._get(self.config, "training_intensity")
        knobs = [A.Knob("training_intensity", intensity, ref,
                        f"{key}'s published ratio: {ref:g} steps replayed per step sampled")]
        why = ("most sampled steps are never trained on (many runners or envs feeding one train batch a round)"
               if low else "each transition is replayed so often that the networks overfit the early buffer")
        native_text = (f"; RLlib's ratio for this config is {native:.3g} (train batch / (rollout_fragment_length "
                       f"x envs x (runners + 1)))" if native is not None and intensity in (None, 0) else "")
        return Finding(C.REPLAY_RATIO, (
            f"the learner replays {ratio:.3g} steps per step added to the buffer (median of the last {len(window)} "
            f"learning iterations){native_text}, with the return stalled; expected {ref / th.replay_ratio_low:.3g}-"
            f"{ref * th.replay_ratio_high:.3g} around {key}'s published {ref:g}: {why}" + A.advice_text(knobs)),
            {"replay_ratio": ratio, "window": window, "reference": ref, "algo": key, "native_ratio": native,
             "training_intensity": intensity, "band": [ref / th.replay_ratio_low, ref * th.replay_ratio_high], "return_stalled": run.stalled,
             "knobs": [k.as_dict() for k in knobs]})

    # -- a buffer that will not fit ------------------------------------------------------------
    def _memory(self, foot: Mapping, capacity: float | None) -> Finding | None:
        th = self.thresholds
        per, avail = finite(foot.get("bytes_per_step")), finite(foot.get("available"))
        stored, rss = finite(foot.get("stored")), finite(foot.get("rss"))
        if per is None or avail is None or stored is None or capacity is None or per <= 0:
            return None
        # the arrays are a lower bound (small observations cost more in Python's objects than in
        # their numbers): the driver's RSS growth per stored step, once the buffer grew enough to
        # see it past the first iteration's own allocations, raises it
        self.footprints += 1
        if self.footprints == 2 and rss is not None:
            self.rss_ref = (stored, rss)
        arrays, slope = per, None
        if self.rss_ref is not None and rss is not None and stored - self.rss_ref[0] >= th.replay_rss_min_steps:
            slope = (rss - self.rss_ref[1]) / (stored - self.rss_ref[0])
            per = max(per, slope)
        self.values["replay_bytes_per_step"] = per
        needed = max(0.0, capacity - stored) * per
        if not once(self.armed, "memory", needed > th.replay_memory_share * avail):
            return None
        basis = "the driver's memory growth per stored step" if per != arrays else "its newest episodes' arrays"
        fits = int((stored * per + 0.5 * avail) / per)
        value = _floor2(max(1000, fits))
        knobs = [_capacity_knob(self.config, value, "what half the memory left holds, with the steps stored now")]
        full_at = stored + avail / per
        where = "the container's memory limit" if foot.get("cgroup_limited") else "this host's available memory"
        return Finding(C.REPLAY_MEMORY, (
            f"the replay buffer holds {stored:.0f} of its {capacity:.0f} steps at >= {_size(per)} a step ("
            f"{basis}): filling it takes {_size(needed)} more, against {_size(avail)} left in "
            f"{where}; expected the full buffer to fit: the driver, which holds it, will run out of memory at "
            f"~{full_at:.3g} steps stored, {full_at / capacity:.0%} full" + A.advice_text(knobs)),
            {"capacity": capacity, "stored": stored, "bytes_per_step": per, "array_bytes_per_step": arrays,
             "rss_bytes_per_step": slope, "needed": needed, "available": avail,
             "cgroup_limited": bool(foot.get("cgroup_limited")), "share": th.replay_memory_share,
             "knobs": [k.as_dict() for k in knobs]})


def _capacity_knob(config: Any, value: int, why: str) -> A.Knob:
    cfg = A._get(config, "replay_buffer_config")
    cfg = dict(cfg) if isinstance(cfg, Mapping) else {}
    current = dict(cfg)
    cfg["capacity"] = value
    return A.Knob("replay_buffer_config", current, cfg, why)


def _floor2(n: int) -> int:
    """``n`` rounded down to two significant digits (a capacity that still fits)."""
    scale = 10 ** max(0, len(str(int(n))) - 2)
    return int(n) // scale * scale


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
