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
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ...common import codes as C
from .leak import LEAK_NIGHT_MB, NIGHT_H, LeakTrend, attribute, where_text
from ..rule import Rule
from ..thresholds import DEFAULT, Thresholds
from ...common.events import Event


@dataclass(frozen=True)
class ContentionThresholds:
    """RESOURCE_CONTENTION across a node's workers."""

    contention_ratio: float = 3.0            # a worker's step time > this x its own baseline is slow ...
    contention_min_workers: int = 3          # ... on at least this many workers (fewer is never contention)
    contention_floor_ms: float = 1.0         # ... each costing at least this much more per step ...
    contention_sustain_s: float = 10.0       # ... for at least this long


BASELINE_POINTS = 5        # first observations of a worker that make its baseline
#: how often a runner's RSS trend is judged (MEMORY_LEAK_SUSPECTED, :mod:`flow1_ray.checks.run.leak`)
LEAK_JUDGE_EVERY_S = 10.0

RULES = (
    Rule("RESOURCE_CONTENTION", C.RESOURCE, C.WARN,
         ">= {contention_min_workers} workers (or all) with step time > {contention_ratio:g}x their own baseline, "
         "each at least {contention_floor_ms:g} ms a step slower, for {contention_sustain_s:g} s",
         ContentionThresholds),
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
        self.rss: dict[str, LeakTrend] = defaultdict(lambda: LeakTrend(min_seconds=thresholds.leak_min_seconds))
        self.leak_judged: dict[str, float] = {}
        self.where: dict[str, dict] = {}
        self.in_contention = False
        self.leak_reported: set[str] = set()
        self.leak_since: dict[str, float] = {}
        self.sites: dict[str, dict] = {}

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
                self.rss[key].add(steps, w["rss"], time.monotonic() if now is None else now)
        out = self._contention(node_id, summary.get("load", {}), now)
        out += self._leaks(time.monotonic() if now is None else now)
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

    def add_sites(self, key: str, summary: dict) -> None:
        """A runner's latest allocation-site window (runner/alloc_sites.py), by its key."""
        self.sites[key] = summary

    def _leaks(self, now: float) -> list[Event]:
        out = []
        for key, trend in self.rss.items():
            if key in self.leak_reported or now - self.leak_judged.get(key, -1e9) < LEAK_JUDGE_EVERY_S:
                continue
            self.leak_judged[key] = now
            v = trend.judge()
            if v is None:
                self.leak_since.pop(key, None)
                continue
            a = attribute(v, self.sites.get(key), now - self.leak_since.setdefault(key, now))
            if a is None:
                continue   # a window of allocation sites is on its way
            self.leak_reported.add(key)
            out.append(self._leak_event(key, v, a))
        return out

    def _leak_event(self, key: str, v: Any, a: Any) -> Event:
        w = self.where.get(key, {})
        code = C.MEMORY_LEAK_SUSPECTED if a.blames_env else C.MEMORY_GROWTH_NOT_ENV
        trend = (f"worker {w.get('worker_index')} (pid {w.get('pid')}) RSS keeps growing past its warm-up: "
                 f"{v.mb_per_1000_steps:.3g} MB per 1000 env steps (Theil-Sen; Kendall p {v.p_value:.1g}), "
                 f"{v.growth_mb:.0f} MB since step {v.judged_from_step:,}, {v.rss_first_mb:.0f} -> "
                 f"{v.rss_last_mb:.0f} MB over {v.steps_span:,} steps; at {v.steps_per_s:.0f} steps/s that "
                 f"is {v.mb_per_night:.0f} MB in {NIGHT_H:g} h")
        if code == C.MEMORY_LEAK_SUSPECTED:
            tail = (f": expected < {LEAK_NIGHT_MB:g} MB -- {where_text(a)}"
                    + ("; look for what it keeps per step (a list appended to, a cache never cleared)"
                       if a.owner else "; look for what the env or a callback keeps per step (tracemalloc)"))
        else:
            tail = (f"; {where_text(a)}. Not counted against the env; if {v.mb_per_night:.0f} MB a night matters "
                    f"at your step rate, restart the runners (RLlib's restart_failed_env_runners) or report it "
                    f"upstream with the site")
        return Event(code, trend + tail,
                     {"mb_per_1000_steps": v.mb_per_1000_steps, "mb_per_night": v.mb_per_night,
                      "night_threshold_mb": LEAK_NIGHT_MB, "growth_mb": v.growth_mb, "p_value": v.p_value,
                      "r2": v.r2, "steps_per_s": v.steps_per_s, "rss_first_mb": v.rss_first_mb,
                      "rss_last_mb": v.rss_last_mb, "steps_span": v.steps_span,
                      "judged_from_step": v.judged_from_step, "owner": a.owner, "site": a.site,
                      "grown_bytes_per_step": {k: round(b, 3) for k, b in a.per_step.items()},
                      "rss_bytes_per_step": round(a.rss_per_step, 3), "not_sampled": a.why or None,
                      "sites": self.sites.get(key)},
                     run_id=self.run_id, worker_index=w.get("worker_index"), pid=w.get("pid"),
                     node_id=w.get("node_id"), ts=datetime.now(timezone.utc))
