"""MEMORY_LEAK_SUSPECTED: a runner's RSS that keeps growing, judged on the whole run.

What a user loses is memory over a night, not a slope over a minute: a leak of 10 bytes a
step (RLlib's MemoryLeakingEnv: ~10 KB per 1,000 steps) is 288 MB in 8 hours at 1,000 steps
a second, and it hides below the allocator's noise for the first minutes. So each runner's
(steps, RSS, time) readings are kept over the whole run (bounded: 256 points, every other
one dropped when full, which doubles the spacing), and the trend is judged past the warm-up
(the first quarter of the steps, where a process fills its caches), with a test, not a
threshold on a noisy fit:

* *significant*: Kendall's tau of RSS against steps, p < ``LEAK_P_VALUE``;
* *material*: RSS grew by >= ``LEAK_MIN_GROWTH_MB`` over the judged part (a few allocator
  arenas are not a leak), and the Theil-Sen slope, at the run's own step rate, loses
  >= ``LEAK_NIGHT_MB`` in ``NIGHT_H`` hours;
* *persistent*: RSS rose in at least 3 of the judged part's 4 quarters and the second half's
  slope is at least a third of the whole part's (a warm-up flattens and an allocator's arena
  is one jump; a leak grows all along), over at least ``LEAK_MIN_SECONDS``.

No Ray; :class:`~flow1_ray.checks.run.contention.ContentionCore` feeds it from the lock-file headers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...common import codes as C
from ..rule import Rule

MAX_POINTS = 256
LEAK_MIN_POINTS = 10
LEAK_MIN_STEPS = 5000
LEAK_MIN_SECONDS = 60.0     # a process's first minute (imports, caches, arenas) is never judged a leak
LEAK_MIN_GROWTH_MB = 4.0
LEAK_NIGHT_MB = 256.0
NIGHT_H = 8.0
LEAK_P_VALUE = 1e-3
WARM_UP_SHARE = 0.25

RULES = (
    Rule("MEMORY_LEAK_SUSPECTED", C.MEMORY, C.WARN,
         f"a runner's RSS keeps growing past its warm-up (the first {WARM_UP_SHARE:.0%} of its steps): Kendall's "
         f"tau p < {LEAK_P_VALUE:g}, >= {LEAK_MIN_GROWTH_MB:g} MB grown, and at its own step rate the Theil-Sen "
         f"slope loses >= {LEAK_NIGHT_MB:g} MB in {NIGHT_H:g} h; rising in 3 of 4 quarters, the second half's "
         f"slope >= 1/3 of the whole (>= {LEAK_MIN_POINTS} points, {LEAK_MIN_STEPS:,} steps, "
         f"{LEAK_MIN_SECONDS:g} s)",
         evidence=("mb_per_1000_steps", "mb_per_night", "growth_mb", "p_value", "steps_span")),
)


@dataclass
class LeakVerdict:
    mb_per_1000_steps: float
    mb_per_night: float
    growth_mb: float
    p_value: float
    r2: float
    steps_per_s: float
    rss_first_mb: float
    rss_last_mb: float
    steps_span: int
    judged_from_step: int


def _rising_quarters(s: np.ndarray, m: np.ndarray) -> int:
    """In how many quarters of the steps the RSS rose (median of its last readings against the
    median of its first): a leak grows in all of them, a one-off jump in one."""
    edges = s[0] + np.ptp(s) * np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    rising = 0
    for lo, hi in zip(edges[:-1], edges[1:]):
        q = m[(s >= lo) & (s <= hi)]
        k = max(1, q.size // 4)
        if q.size >= 2 and np.median(q[-k:]) > np.median(q[:k]):
            rising += 1
    return rising


class LeakTrend:
    """One runner's RSS over its whole run, in bounded memory."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self.points: list[tuple[float, float, float]] = []   # (steps, rss bytes, monotonic seconds)
        self._stride = 1
        self._seen = 0

    def add(self, steps: float, rss: float, t: float) -> None:
        self._seen += 1
        if (self._seen - 1) % self._stride:
            return
        self.points.append((float(steps), float(rss), float(t)))
        if len(self.points) >= self.max_points:
            self.points = self.points[::2]
            self._stride *= 2

    def judge(self) -> LeakVerdict | None:
        if len(self.points) < LEAK_MIN_POINTS:
            return None
        p = np.asarray(self.points)
        steps, mb, t = p[:, 0], p[:, 1] / 1e6, p[:, 2]
        if steps[-1] - steps[0] < LEAK_MIN_STEPS or t[-1] - t[0] < LEAK_MIN_SECONDS:
            return None
        part = steps >= steps[0] + WARM_UP_SHARE * (steps[-1] - steps[0])
        s, m, tt = steps[part], mb[part], t[part]
        if s.size < LEAK_MIN_POINTS or np.ptp(s) <= 0:
            return None
        growth = float(np.median(m[-3:]) - np.median(m[:3]))
        if growth < LEAK_MIN_GROWTH_MB:   # the cheap gate first: scipy.stats costs a hub ~0.8 s to import
            return None
        from scipy.stats import kendalltau, theilslopes

        tau, pv = kendalltau(s, m)
        if not (tau > 0 and pv < LEAK_P_VALUE):
            return None
        slope = float(theilslopes(m, s)[0])                 # MB per step
        half = s >= s[0] + 0.5 * np.ptp(s)
        late = float(theilslopes(m[half], s[half])[0]) if half.sum() >= 3 and np.ptp(s[half]) > 0 else 0.0
        rate = float(np.ptp(s) / np.ptp(tt)) if np.ptp(tt) > 0 else float("inf")
        night = slope * rate * NIGHT_H * 3600.0
        if night < LEAK_NIGHT_MB or late < slope / 3 or _rising_quarters(s, m) < 3:
            return None
        fit = np.polyfit(s, m, 1)
        resid = m - np.polyval(fit, s)
        ss = float(np.sum((m - m.mean()) ** 2))
        return LeakVerdict(mb_per_1000_steps=slope * 1000.0, mb_per_night=night, growth_mb=growth,
                           p_value=float(pv), r2=1.0 - float(np.sum(resid ** 2)) / ss if ss > 0 else 0.0,
                           steps_per_s=rate, rss_first_mb=float(mb[0]), rss_last_mb=float(mb[-1]),
                           steps_span=int(steps[-1] - steps[0]), judged_from_step=int(s[0]))
