"""ContentionDetector: slow steps across workers (RESOURCE_CONTENTION) and growing RSS
(MEMORY_LEAK_SUSPECTED), from the numbers every runner already writes into its lock file.

No runner sends anything for this: its watchdog writes its step-time average and RSS into
the lock-file header, the node probe reads them with the heartbeat, and the monitor hands
each node summary to :class:`ContentionCore`, which it hosts in its own process (one
Python process fewer on the node than a separate actor would cost).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from .. import codes as C
from ..checks.rule import Rule
from ..checks.thresholds import DEFAULT, Thresholds
from ..events import Event


@dataclass(frozen=True)
class ContentionThresholds:
    """RESOURCE_CONTENTION across a node's workers."""

    contention_ratio: float = 3.0            # a worker's step time > this x its own baseline is slow ...
    contention_min_workers: int = 3          # ... on at least this many workers (fewer is never contention)
    contention_floor_ms: float = 1.0         # ... each costing at least this much more per step ...
    contention_sustain_s: float = 10.0       # ... for at least this long


BASELINE_POINTS = 5        # first observations of a worker that make its baseline
LEAK_MB_PER_1000_STEPS = 1.0
LEAK_MIN_R2 = 0.8
LEAK_MIN_POINTS = 10
LEAK_MIN_STEPS = 5000
RSS_POINTS = 120

RULES = (
    Rule("RESOURCE_CONTENTION", C.RESOURCE, C.WARN,
         ">= {contention_min_workers} workers (or all) with step time > {contention_ratio:g}x their own baseline, "
         "each at least {contention_floor_ms:g} ms a step slower, for {contention_sustain_s:g} s",
         ContentionThresholds),
    Rule("MEMORY_LEAK_SUSPECTED", C.MEMORY, C.WARN,
         f"RSS slope > {LEAK_MB_PER_1000_STEPS:g} MB per 1000 env steps (a linear fit with R^2 >= {LEAK_MIN_R2:g} "
         f"over >= {LEAK_MIN_POINTS} points and {LEAK_MIN_STEPS:,} steps)"),
)


def node_load() -> dict[str, Any]:
    """CPU load average, memory use and (where pynvml finds a GPU) GPU utilisation here."""
    out: dict[str, Any] = {}
    try:
        out["cpu_load_avg_1m"] = round(os.getloadavg()[0], 2)
        out["cpu_count"] = os.cpu_count()
    except OSError:
        pass
    try:
        import psutil
        out["mem_usage_percent"] = psutil.virtual_memory().percent
    except Exception:
        pass
    nvml = _nvml()
    if nvml is not None:
        try:
            out["gpu_util_percent"] = [nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu
                                       for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:
            pass
    return out


_NVML: list = []


def _nvml():
    """pynvml, initialised once; None without the package or a GPU (asked only once)."""
    if not _NVML:
        try:
            import pynvml
            pynvml.nvmlInit()
            _NVML.append(pynvml)
        except Exception:
            _NVML.append(None)
    return _NVML[0]


class ContentionCore:
    """The rule: >= 3 workers each stepping > 3x slower than their own baseline is
    contention (the node, not one runner, is short of CPU, memory or GPU). Three
    refinements make it a claim a user can act on: fewer than ``contention_min_workers``
    judged workers is never contention (one slow runner out of one or two is that runner,
    not the node); the slowdown must also cost at least
    ``contention_floor_ms`` per step (0.05 -> 0.2 ms on a CartPole step is invisible beside
    RLlib's own ~1 ms per step); and it must last ``contention_sustain_s`` (a runner restarting
    beside the others slows them for a few seconds, which is no node-level problem)."""

    def __init__(self, run_id: str, thresholds: Thresholds = DEFAULT) -> None:
        self.run_id = run_id
        self.th = thresholds
        self.slow_since: float | None = None
        self.baseline_points: dict[str, list[float]] = defaultdict(list)
        self.baseline: dict[str, float] = {}
        self.current: dict[str, float] = {}
        self.last_steps: dict[str, int] = {}
        self.rss: dict[str, deque] = defaultdict(lambda: deque(maxlen=RSS_POINTS))
        self.where: dict[str, dict] = {}
        self.in_contention = False
        self.leak_reported: set[str] = set()

    def observe(self, node_id: str, summary: dict, now: float | None = None) -> list[Event]:
        """One node summary (``workers`` with steps, step_time_ema, rss; ``load``);
        ``now`` (monotonic seconds) is for tests that replay summaries."""
        for w in summary.get("workers", []):
            key, steps = w.get("key"), w.get("steps") or 0
            if key is None or steps <= self.last_steps.get(key, 0):
                continue  # no progress since last time: idle, nothing to judge
            self.last_steps[key] = steps
            self.where[key] = {"worker_index": w.get("worker_index"), "pid": w.get("pid"), "node_id": node_id}
            st = w.get("step_time_ema") or 0.0
            if st > 0:
                if key not in self.baseline:
                    pts = self.baseline_points[key]
                    pts.append(st)
                    if len(pts) >= BASELINE_POINTS:
                        self.baseline[key] = float(np.median(pts))
                else:
                    self.current[key] = st
            if w.get("rss"):
                self.rss[key].append((steps, w["rss"]))
        out = self._contention(node_id, summary.get("load", {}), now)
        out += self._leaks()
        return out

    def _slow(self, key: str) -> bool:
        cur, base = self.current[key], self.baseline[key]
        return cur > self.th.contention_ratio * base and (cur - base) * 1e3 >= self.th.contention_floor_ms

    def _contention(self, node_id: str, load: dict, now: float | None = None) -> list[Event]:
        judged = [k for k in self.baseline if k in self.current]
        need = self.th.contention_min_workers
        slow = [k for k in judged if self._slow(k)]
        if len(slow) < need:
            self.in_contention, self.slow_since = False, None
            return []
        now = time.monotonic() if now is None else now
        if self.slow_since is None:
            self.slow_since = now
        if self.in_contention or now - self.slow_since < self.th.contention_sustain_s:
            return []
        self.in_contention = True
        ratio = self.th.contention_ratio
        detail = [{"worker_index": self.where[k]["worker_index"], "baseline_ms": round(self.baseline[k] * 1e3, 3),
                   "current_ms": round(self.current[k] * 1e3, 3),
                   "ratio": round(self.current[k] / self.baseline[k], 2)} for k in slow]
        worst = max(detail, key=lambda d: d["ratio"])
        msg = (f"{len(slow)} of {len(judged)} workers step > {ratio:g}x slower than their own baseline for "
               f"{now - self.slow_since:.0f} s (worst: worker {worst['worker_index']} {worst['current_ms']} ms vs "
               f"{worst['baseline_ms']} ms; expected < {ratio:g}x, or < {self.th.contention_floor_ms:g} ms "
               f"more per step); "
               f"cpu load avg {load.get('cpu_load_avg_1m', '?')} on {load.get('cpu_count', '?')} cpus, "
               f"memory {load.get('mem_usage_percent', '?')}%"
               + (f", GPU util {load['gpu_util_percent']}%" if "gpu_util_percent" in load else ""))
        return [Event(C.RESOURCE_CONTENTION, msg,
                      {"slow_workers": detail, "threshold_ratio": ratio, "min_slow": need,
                       "floor_ms": self.th.contention_floor_ms, "sustained_s": round(now - self.slow_since, 1),
                       "threshold_sustain_s": self.th.contention_sustain_s, **load},
                      run_id=self.run_id, node_id=node_id, ts=datetime.now(timezone.utc))]

    def _leaks(self) -> list[Event]:
        out = []
        for key, pts in self.rss.items():
            if key in self.leak_reported or len(pts) < LEAK_MIN_POINTS:
                continue
            steps = np.array([p[0] for p in pts], dtype=np.float64)
            rss_mb = np.array([p[1] for p in pts], dtype=np.float64) / 1e6
            if steps[-1] - steps[0] < LEAK_MIN_STEPS:
                continue
            slope, icpt = np.polyfit(steps, rss_mb, 1)
            resid = rss_mb - (slope * steps + icpt)
            ss_tot = float(np.sum((rss_mb - rss_mb.mean()) ** 2))
            r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else 0.0
            per_1000 = slope * 1000.0
            if per_1000 > LEAK_MB_PER_1000_STEPS and r2 >= LEAK_MIN_R2:
                self.leak_reported.add(key)
                w = self.where.get(key, {})
                out.append(Event(C.MEMORY_LEAK_SUSPECTED,
                                 f"worker {w.get('worker_index')} (pid {w.get('pid')}) RSS grows {per_1000:.2f} MB per "
                                 f"1000 env steps (R^2 {r2:.2f}), expected <= {LEAK_MB_PER_1000_STEPS:g}: "
                                 f"{rss_mb[0]:.0f} -> {rss_mb[-1]:.0f} MB over {int(steps[-1] - steps[0])} steps",
                                 {"mb_per_1000_steps": per_1000, "threshold": LEAK_MB_PER_1000_STEPS, "r2": r2,
                                  "r2_threshold": LEAK_MIN_R2, "rss_first_mb": rss_mb[0], "rss_last_mb": rss_mb[-1],
                                  "steps_span": int(steps[-1] - steps[0])},
                                 run_id=self.run_id, worker_index=w.get("worker_index"), pid=w.get("pid"),
                                 node_id=w.get("node_id"), ts=datetime.now(timezone.utc)))
        return out
