"""Where a runner's memory grows: Python allocation sites, sampled in short windows, each told
as the env's, the user's, flow1's or the framework's.

A runner's RSS that keeps growing (MEMORY_LEAK_SUSPECTED) is only worth a user's night if it
says *where*: an env that keeps something per step is the user's to fix; RLlib's or Ray's own
creep (a plain runner without flow1 shows it too) is not the env's, and blaming the env for it
is a false alarm. ``tracemalloc`` tells the two apart, but it slows every Python allocation
while it traces, so it never runs all the time:

* a window opens only when the runner's own RSS grew by ``TRIGGER_MB`` since its reference
  (taken after the process's first ``MIN_AGE_S``, when imports and caches have settled, and
  again after each window) *and* the leak rule's own trend test holds on the runner's RSS
  (:class:`~flow1_ray.checks.run.leak.LeakTrend`, the hub's test, fed here every
  ``POINT_EVERY_S`` and judged every ``JUDGE_EVERY_S``), at most ``MAX_WINDOWS`` times,
  ``GAP_S`` apart: a runner whose RSS settles after its warm-up never traces (measured: a
  first draft that opened on the 4 MB alone traced a multi-agent runner still settling, 8 % of
  its CPU over a short run);
* a window traces ``WARM_S`` (the blocks alive at its start are not traced; the ones a step
  allocates and frees in steady state come and go), then takes three snapshots ``HALF_S``
  apart; a site *grows* when it grew in both halves (a buffer that fills and empties, an
  episode being collected, grows in one half at most as often as by chance);
* each growing site is told by its traceback (``NFRAMES`` frames, :meth:`Owners.of`): made
  while the env's own code ran (the files of the env's classes, and the package they come
  from unless that is a framework's), the env's; else the first frame, innermost outward, in
  flow1 makes it flow1's, in the RL stack (RLlib, Ray, gymnasium, PettingZoo) makes it the
  framework's, in code outside every library (a callback, a connector the user wrote) the
  user's.

A site is where memory was *allocated*, not who keeps it: an object the env makes and a
callback keeps is the env's line (the callback's own growth, its list of references, is the
user's). The sites name what grows; the owner is a strong hint, not a proof. A known limit: an
env that keeps a buffer per episode, cleared at reset, grows in both halves when its episodes
outlast a half (2 s); in a run whose RSS trend holds for another reason, that buffer can be
read as the env's growth.

While tracing, every Python allocation of the runner pays tracemalloc's hook: a PPO runner's
CPU per step is 4-5x during a window (``NFRAMES`` 2): a 5 s window costs the runner ~4 s of
its sampling. That extra CPU is flow1's: it is booked to the cost account's ``alloc_sites`` (the
window's CPU less its steps at the CPU per step before it), and the summary states the step
rates with and without tracing.

:meth:`AllocSampler.tick` runs after each ``sample()``, a few comparisons when no window is open;
a window's snapshots are taken on a thread of its own, on the clock.
The summary it returns goes to the hub, where :mod:`flow1_ray.checks.run.leak` sets it against
the RSS trend. No Ray here.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
import tracemalloc
from types import FunctionType
from typing import Any, Callable

from ..liveness.holder import _rss

TRIGGER_MB = 4.0        # RSS grown since the reference before a window opens (the leak rule's least growth)
POINT_EVERY_S = 1.0     # the runner's (steps, RSS) fed to its own trend at most this often
JUDGE_EVERY_S = 10.0    # ... and judged at most this often (the hub's pace)
MIN_AGE_S = 60.0        # the process's first minute (imports, caches, arenas) opens no window
WARM_S = 1.0            # traced before the first snapshot
HALF_S = 2.0            # between the snapshots (two halves)
GAP_S = 1800.0          # between the end of one window and the start of the next
MAX_WINDOWS = 3         # per runner
#: frames kept per traced allocation: the allocating one and its caller (an env's own line, or
#: the env's call into a pure-Python helper). Measured on a PPO runner's sample(): its CPU a step
#: x3.3 while tracing 1 frame, x5.0 with 2, x6.9 with 3, x14.5 with 6 (scripts/bench_alloc_sites.py)
NFRAMES = 2
TOP_SITES = 5           # sites named per owner class in the summary
ENV, USER, FLOW1, FRAMEWORK = "env", "user", "flow1", "framework"
OWNERS = (ENV, USER, FLOW1, FRAMEWORK)
#: top-level packages whose classes are the framework's, never the env's own (an env class
#: of theirs, CartPole or RLlib's example envs, is the env's by its file alone)
FRAMEWORK_PACKAGES = frozenset({"gymnasium", "gym", "ray", "pettingzoo", "shimmy", "supersuit", "builtins",
                                "abc", "typing", "flow1_ray", "numpy", "torch"})
#: the RL stack that calls the env (a traceback through it, with no env frame, is its growth)
RL_STACK = frozenset({"ray", "gymnasium", "gym", "pettingzoo", "shimmy", "supersuit", "tree", "tensorflow"})
#: the modules of the env interfaces (gymnasium.Env, MultiAgentEnv, PettingZoo's): the innermost
#: env's classes above the first of them are the env's code even when a framework ships them
#: (RLlib's RandomEnv under MemoryLeakingEnv, MujocoEnv under HalfCheetah)
ENV_INTERFACES = frozenset({"gymnasium.core", "gym.core", "ray.rllib.env.multi_agent_env", "pettingzoo.utils.env"})
_WRAPPED = ("env", "par_env", "aec_env", "_env", "gym_env", "unwrapped")
_FLOW1_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SELF = os.path.abspath(__file__)


def _library_dirs() -> tuple[str, ...]:
    dirs = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(name)
        if p:
            dirs.add(os.path.realpath(p) + os.sep)
            dirs.add(os.path.abspath(p) + os.sep)
    for p in sys.path:
        if p and ("site-packages" in p or "dist-packages" in p):
            dirs.add(os.path.abspath(p) + os.sep)
    return tuple(sorted(dirs))


def env_objects(env: Any, limit: int = 16) -> list[Any]:
    """The env and what it wraps, outermost first, read from instance attributes only (no
    property of the user's runs), at most ``limit`` deep; a vector env gives its first sub-env."""
    out, seen, obj = [], set(), env
    while obj is not None and len(out) < limit and id(obj) not in seen:
        seen.add(id(obj))
        out.append(obj)
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, dict):
            break
        subs = d.get("envs")
        nxt = subs[0] if isinstance(subs, (list, tuple)) and subs else None
        for name in _WRAPPED:
            if nxt is None and d.get(name) is not None and d.get(name) is not obj:
                nxt = d.get(name)
        obj = nxt
    return out


EnvLines = dict   # file -> ((first line, last line), ...) of the env's own functions


def _code_of(f: Any) -> Any:
    f = getattr(f, "__func__", f)   # staticmethod, classmethod
    return getattr(f, "__code__", None) if isinstance(f, FunctionType) else None


def env_code(env: Any) -> tuple[EnvLines, tuple[str, ...]]:
    """The env's own code: the line ranges of the functions of every class in the chain that is
    not a framework's, and of the innermost env's classes below the env interface even when a
    framework ships them (CartPole, RLlib's example envs and their bases) -- ranges, not files, for a script that defines the env
    beside its callbacks; and the top-level package directory of each such class unless that
    package is a framework's (an installed env's helpers). From the code objects, so an env
    defined in the driver's script and shipped by value is found too."""
    chain = env_objects(env)
    lines: dict[str, set] = {}
    dirs = set()
    for i, obj in enumerate(chain):
        concrete = i == len(chain) - 1   # the innermost env's classes down to the framework's interface
        for cls in type(obj).__mro__:
            top = (cls.__module__ or "").split(".")[0]
            concrete = concrete and cls.__module__ not in ENV_INTERFACES
            if top in FRAMEWORK_PACKAGES and not concrete:
                continue   # the framework's classes, but the innermost env's own (CartPole, RandomEnv under a subclass)
            for f in list(vars(cls).values())[:512]:
                code = _code_of(f)
                if code is not None:
                    last = max((ln for _, _, ln in code.co_lines() if ln), default=code.co_firstlineno)
                    lines.setdefault(os.path.abspath(code.co_filename), set()).add((code.co_firstlineno, last))
            if top not in FRAMEWORK_PACKAGES and "." in (cls.__module__ or ""):
                top_path = getattr(sys.modules.get(top), "__file__", None)
                if top_path:
                    dirs.add(os.path.dirname(os.path.abspath(top_path)) + os.sep)
    return {f: tuple(sorted(r)) for f, r in lines.items()}, tuple(sorted(dirs))


class Owners:
    """Tells a traceback's owner (env, user, flow1, framework) by its frames' files and lines."""

    def __init__(self, env_lines: EnvLines, env_dirs: tuple[str, ...]) -> None:
        self.env_lines, self.env_dirs = env_lines, env_dirs
        self.libraries = _library_dirs()
        self._memo: dict[tuple[str, int], str | None] = {}

    def of_frame(self, filename: str, lineno: int) -> str | None:
        """env / flow1 / user / framework (the RL stack that calls the env: RLlib, Ray,
        gymnasium, PettingZoo, shimmy) for a frame; None for any other library's (the
        standard library, numpy, torch, ...: skipped outward to their caller)."""
        got = self._memo.get((filename, lineno), "?")
        if got != "?":
            return got
        path = os.path.abspath(filename)
        if path.startswith(self.env_dirs) or any(lo <= lineno <= hi for lo, hi in self.env_lines.get(path, ())):
            owner: str | None = ENV
        elif path.startswith(_FLOW1_DIR):
            owner = FLOW1
        elif filename.startswith("<") or path.startswith(self.libraries):
            owner = FRAMEWORK if _package(path) in RL_STACK else None
        else:
            owner = USER
        if len(self._memo) < 8192:
            self._memo[(filename, lineno)] = owner
        return owner

    def of(self, traceback: tracemalloc.Traceback) -> tuple[str, str]:
        """(owner, site). An allocation made while the env's code runs (one of its frames on
        the stack, whatever it called: numpy, pandas, a gymnasium helper) is the env's, at the
        env's innermost frame; else the first frame, innermost outward, of flow1, of the RL
        stack (the framework's) or of code outside every library (the user's: a callback, a
        connector) decides; all other libraries are skipped to their caller (flow1's wrappers
        around ``sample()`` and the vector step are outer to RLlib's frames, so RLlib decides
        first). A local runner's traceback reaches the user's script only past RLlib's
        frames, so RLlib's own growth there is still the framework's."""
        frames = list(traceback)[::-1]   # tracemalloc orders them oldest first
        owners = [self.of_frame(fr.filename, fr.lineno) for fr in frames]
        if ENV in owners:
            return ENV, _site(frames[owners.index(ENV)])
        for fr, owner in zip(frames, owners):
            if owner is not None:
                return owner, _site(fr)
        return FRAMEWORK, _site(frames[0]) if frames else "?"


def _package(path: str) -> str:
    """The top-level package of a file under site-packages (or '' elsewhere)."""
    parts = path.split(os.sep)
    for k in ("site-packages", "dist-packages"):
        if k in parts:
            i = len(parts) - parts[::-1].index(k)
            return parts[i] if i < len(parts) else ""
    return ""


def _site(frame: tracemalloc.Frame) -> str:
    """``package/.../file.py:line``: the path from the top-level package (or the file alone)."""
    parts = os.path.abspath(frame.filename).split(os.sep)
    for k in ("site-packages", "dist-packages"):
        if k in parts:
            parts = parts[len(parts) - parts[::-1].index(k):]
            break
    else:
        parts = parts[-2:]
    return f"{'/'.join(parts)}:{frame.lineno}"


class AllocSampler:
    """One runner's allocation-site windows (see the module's docstring). ``tick(rss, steps)``
    after each ``sample()`` opens a window when the RSS grew; the window runs on a thread of its
    own (its snapshots on the clock, however long a ``sample()`` call lasts under tracing), and
    the next ``tick`` returns its summary."""

    def __init__(self, owners: Owners | Any, steps_of: Callable[[], float], clock=time.monotonic,
                 trigger_mb: float = TRIGGER_MB, min_age_s: float = MIN_AGE_S, warm_s: float = WARM_S,
                 half_s: float = HALF_S, gap_s: float = GAP_S, max_windows: int = MAX_WINDOWS,
                 trend: bool = True) -> None:
        """``owners``: an :class:`Owners`, or a callable that makes one (the env's code is read
        on the first window, when the env exists); ``steps_of()``: the runner's env steps so far;
        ``trend``: a window also needs the leak rule's trend test to hold (False: the RSS growth
        alone opens one, for tests that open windows at will)."""
        from ..checks.run.leak import LeakTrend

        self.trend = LeakTrend(min_seconds=min_age_s) if trend else None
        self._fed_at = self._judged_at = -float("inf")
        self._owners = owners
        self.steps_of = steps_of
        self.clock = clock
        self.trigger, self.min_age_s, self.warm_s, self.half_s = trigger_mb * 1e6, min_age_s, warm_s, half_s
        self.gap_s, self.max_windows = gap_s, max_windows
        self.born = clock()
        self.ref: float | None = None
        self.windows = 0
        self.tracing = False
        self.ended_at = -float("inf")
        self.before: tuple[float, float, float] | None = None     # (t, steps, thread CPU) at the reference
        self.off: str | None = None
        self._done: dict | None = None
        self._failed: BaseException | None = None

    def tick(self, rss: float, steps: float) -> dict | None:
        """After a ``sample()``, on the sampling thread: a closed window's summary, else None.
        Raises what the window's thread raised."""
        if self._failed is not None:
            e, self._failed = self._failed, None
            raise e
        if self._done is not None:
            out, self._done = self._done, None
            return out
        if self.tracing:
            return None
        now = self.clock()
        if self.trend is not None and now - self._fed_at >= POINT_EVERY_S and rss > 0:
            self._fed_at = now
            self.trend.add(steps, rss, now)
        return self._maybe_open(now, rss, steps)

    def _trend_holds(self, now: float) -> bool:
        if self.trend is None:
            return True
        if now - self._judged_at < JUDGE_EVERY_S:
            return False
        self._judged_at = now
        return self.trend.judge() is not None

    def _maybe_open(self, now: float, rss: float, steps: float) -> dict | None:
        if self.off is not None or now - self.born < self.min_age_s or self.windows >= self.max_windows:
            return None
        if self.ref is None or rss < self.ref:
            self.ref, self.before = rss, (now, steps, time.thread_time())
            return None
        if rss - self.ref < self.trigger or now - self.ended_at < self.gap_s or not self._trend_holds(now):
            return None
        if tracemalloc.is_tracing():   # the user's own tracing: never stopped or reset by flow1
            self.off = "the process traces its allocations already (tracemalloc is on)"
            return {"off": self.off}
        if callable(self._owners) and not isinstance(self._owners, Owners):
            self._owners = self._owners()
        t0, s0, c0 = self.before or (now, steps, time.thread_time())
        cpu = time.thread_time()
        rate = (steps - s0) / max(now - t0, 1e-9)
        cpu_step = (cpu - c0) / (steps - s0) if steps > s0 else 0.0
        clock_id = time.pthread_getcpuclockid(threading.get_ident())   # the sampling thread's CPU clock
        self.tracing = True
        tracemalloc.start(NFRAMES)
        threading.Thread(target=self._window, args=(clock_id, steps, rate, cpu_step), daemon=True,
                         name="flow1-alloc-sites").start()
        return None

    def _window(self, clock_id: int, steps0: float, rate_before: float, cpu_step: float) -> None:
        """The window, on its own thread: three snapshots on the clock, then tracing stops."""
        try:
            cpu0 = time.clock_gettime(clock_id)
            snaps = []
            try:
                for k in range(3):
                    time.sleep(self.warm_s if k == 0 else self.half_s)
                    snaps.append((self.clock(), float(self.steps_of()), float(_rss()), tracemalloc.take_snapshot()))
            finally:
                tracemalloc.stop()
            cpu = time.clock_gettime(clock_id)
            steps = float(self.steps_of())
            out = self._summary(snaps)
            out["steps_per_s_before"] = round(rate_before, 1)
            # the tracing's own price: the sampling thread's CPU in the window beyond its steps at the rate before
            out["tracing_cpu_s"] = round(max(0.0, cpu - cpu0 - (steps - steps0) * cpu_step), 4)
            self._done = out
        except BaseException as e:   # handed to the sampling thread's next tick (reported there)
            self._failed = e
        finally:
            self.ended_at, self.ref, self.before, self.windows = self.clock(), None, None, self.windows + 1
            self.tracing = False   # the next tick takes a new reference

    def _summary(self, snaps: list) -> dict:
        (t1, s1, r1, a), (_, _, _, b), (t3, s3, r3, c) = snaps
        flt = [tracemalloc.Filter(False, _SELF), tracemalloc.Filter(False, tracemalloc.__file__)]
        a, b, c = (x.filter_traces(flt) for x in (a, b, c))
        first = {st.traceback: st.size_diff for st in b.compare_to(a, "traceback")}
        grown = {owner: 0 for owner in OWNERS}
        sites: dict[tuple[str, str], list[int]] = {}
        for st in c.compare_to(a, "traceback"):
            if st.size_diff <= 0 or first.get(st.traceback, 0) <= 0 or st.size_diff <= first[st.traceback]:
                continue   # grew in both halves: the whole more than the first half
            owner, site = self._owners.of(st.traceback)
            grown[owner] += st.size_diff
            acc = sites.setdefault((owner, site), [0, 0])
            acc[0] += st.size_diff
            acc[1] += st.count_diff
        top = sorted(sites.items(), key=lambda kv: -kv[1][0])
        named = {o: [{"site": s, "bytes": v[0], "blocks": v[1]} for (oo, s), v in top if oo == o][:TOP_SITES]
                 for o in OWNERS}
        steps = max(s3 - s1, 0.0)
        rate = steps / max(t3 - t1, 1e-9)
        return {"steps": int(steps), "seconds": round(t3 - t1, 2), "rss_growth": int(r3 - r1),
                "traced_growth": int(sum(st.size_diff for st in c.compare_to(a, "filename"))),
                "grown": grown, "sites": named, "window": self.windows + 1,
                "steps_per_s": round(rate, 1), "frames": NFRAMES}
