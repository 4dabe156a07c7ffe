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
  is one jump; a leak grows all along), over at least ``leak_min_seconds`` (a threshold).

Then *where*: a trend alone cannot tell the env's growth from the framework's (a plain RLlib
runner creeps too), so each runner samples its allocation sites when its own RSS grows
(:mod:`flow1_ray.runner.alloc_sites`: tracemalloc windows, each growing site told as the env's,
the user's, flow1's or the framework's) and :func:`attribute` sets the latest window against
the trend: a WARN only when the env's (or the user's own) code accounts for at least
``BLAME_SHARE`` of the RSS growth per step, or alone loses ``LEAK_NIGHT_MB`` a night, naming
the site; a growth in RLlib's, Ray's or flow1's code, or outside Python's allocator (native
memory no traceback shows), is MEMORY_GROWTH_NOT_ENV, an advisory that says whose and how much.
A runner that could not sample (tracemalloc already on, or no window within ``SITES_WAIT_S`` of
the verdict) gets the WARN unattributed, saying so.

No Ray; :class:`~flow1_ray.checks.run.contention.ContentionCore` feeds it from the lock-file
headers and the runners' site windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...common import codes as C
from ..rule import Rule

MAX_POINTS = 256
LEAK_MIN_POINTS = 10
LEAK_MIN_STEPS = 5000
LEAK_MIN_GROWTH_MB = 4.0
LEAK_NIGHT_MB = 256.0
NIGHT_H = 8.0
LEAK_P_VALUE = 1e-3
WARM_UP_SHARE = 0.25
BLAME_SHARE = 0.25          # the env's (or user's) traced growth per step, as a share of the RSS growth per step
SITES_WAIT_S = 120.0        # a verdict waits this long for a runner's allocation-site window



@dataclass(frozen=True)
class LeakThresholds:
    """MEMORY_LEAK_SUSPECTED: a runner's RSS trend."""

    leak_min_seconds: float = 60.0   # a process's first this many seconds (imports, caches, arenas) are never judged, nor traced


LEAK_MIN_SECONDS = LeakThresholds.leak_min_seconds

RULES = (
    Rule("MEMORY_LEAK_SUSPECTED", C.MEMORY, C.WARN,
         f"a runner's RSS keeps growing past its warm-up (the first {WARM_UP_SHARE:.0%} of its steps): Kendall's "
         f"tau p < {LEAK_P_VALUE:g}, >= {LEAK_MIN_GROWTH_MB:g} MB grown, and at its own step rate the Theil-Sen "
         f"slope loses >= {LEAK_NIGHT_MB:g} MB in {NIGHT_H:g} h; rising in 3 of 4 quarters, the second half's "
         f"slope >= 1/3 of the whole (>= {LEAK_MIN_POINTS} points, {LEAK_MIN_STEPS:,} steps, "
         "{leak_min_seconds:g} s); and the runner's sampled allocation sites put >= "
         f"{BLAME_SHARE:.0%} of the growth per step (or {LEAK_NIGHT_MB:g} MB a night) in the env's or the user's code",
         LeakThresholds,
         evidence=("mb_per_1000_steps", "mb_per_night", "growth_mb", "p_value", "steps_span", "owner", "site")),
    Rule("MEMORY_GROWTH_NOT_ENV", C.MEMORY, C.PASS,
         f"advisory: the RSS trend of MEMORY_LEAK_SUSPECTED holds, but the runner's sampled allocation sites put "
         f"less than {BLAME_SHARE:.0%} of the growth per step in the env's or the user's code (and less than "
         f"{LEAK_NIGHT_MB:g} MB in {NIGHT_H:g} h): it grows in RLlib's, Ray's or flow1's code, or in native memory",
         evidence=("mb_per_1000_steps", "mb_per_night", "owner", "site", "grown_bytes_per_step")),
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

    def __init__(self, max_points: int = MAX_POINTS, min_seconds: float = LEAK_MIN_SECONDS) -> None:
        self.max_points = max_points
        self.min_seconds = min_seconds
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
        if steps[-1] - steps[0] < LEAK_MIN_STEPS or t[-1] - t[0] < self.min_seconds:
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


@dataclass
class Attribution:
    """Whose growth a leak verdict is: ``owner`` env / user (a WARN), framework / flow1 /
    native (the advisory) or None (not sampled: the WARN, unattributed); ``site`` the
    top growing site of that owner; ``per_step`` bytes per env step by owner, traced."""
    owner: str | None
    site: str | None
    per_step: dict
    rss_per_step: float
    why: str = ""

    @property
    def blames_env(self) -> bool:
        return self.owner in (None, "env", "user")


def attribute(v: LeakVerdict, sites: dict | None, waited_s: float) -> Attribution | None:
    """Set a runner's latest allocation-site window against its RSS verdict ``v``. None: wait
    for a window (``waited_s`` since the verdict first held is under ``SITES_WAIT_S``)."""
    rss_step = v.mb_per_1000_steps * 1e3   # bytes per step
    if not sites or sites.get("off") or not sites.get("steps"):
        if waited_s < SITES_WAIT_S and not (sites or {}).get("off"):
            return None
        why = (sites or {}).get("off") or f"no allocation-site window reached the hub within {SITES_WAIT_S:g} s"
        return Attribution(None, None, {}, rss_step, why)
    steps = float(sites["steps"])
    per = {o: float(b) / steps for o, b in (sites.get("grown") or {}).items()}
    night = v.steps_per_s * NIGHT_H * 3600.0 / 1e6     # MB in a night per byte a step
    for owner in ("env", "user"):
        b = per.get(owner, 0.0)
        if b > 0 and (b >= BLAME_SHARE * rss_step or b * night >= LEAK_NIGHT_MB):
            return Attribution(owner, _top(sites, owner), per, rss_step)
    traced = sum(per.values())
    if traced < BLAME_SHARE * rss_step:
        return Attribution("native", None, per, rss_step)
    owner = max(("framework", "flow1"), key=lambda o: per.get(o, 0.0))
    return Attribution(owner, _top(sites, owner), per, rss_step)


def _top(sites: dict, owner: str) -> str | None:
    named = (sites.get("sites") or {}).get(owner) or []
    return named[0]["site"] if named else None


WHOSE = {"env": "the env's code", "user": "your own code outside the env (a callback, a connector)",
         "framework": "the framework's code (RLlib, Ray, gymnasium's wrappers, torch, numpy), not the env's",
         "flow1": "flow1's own code, not the env's",
         "native": "native memory (outside Python's allocator, which the sampled sites cannot see)"}


def where_text(a: Attribution) -> str:
    """The sentence that says where a verdict's memory grows."""
    if a.owner is None:
        return f"where it grows is unknown ({a.why})"
    b = a.per_step.get(a.owner, 0.0) if a.owner != "native" else sum(a.per_step.values())
    share = f"{b / a.rss_per_step:.0%} of the RSS growth" if a.rss_per_step > 0 else ""
    if a.owner == "native":
        return f"it grows in {WHOSE['native']}: the Python allocations sampled grew {b:.3g} bytes a step, {share}"
    return (f"it grows in {WHOSE[a.owner]}: {a.site or '?'} (sampled: {b:.3g} bytes a step, {share})")
