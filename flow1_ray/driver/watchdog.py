"""The driver watchdog: the run's silent hangs that no worker's lock can show.

1. **A build that never finishes.** RLlib's ``Algorithm.setup`` waits for every actor it
   creates; one that can never be placed -- measured: APPO on 2 CPUs with 2 EnvRunners waits
   forever for its Learner's CPU -- blocks ``build_algo()`` with no word, and
   ``on_algorithm_init`` never comes. ``Flow1Callbacks`` is built early in that setup, so it
   starts this watch there: after ``startup_timeout_s`` it reads the GCS actor table and
   names each of the job's actors still pending, the resources it waits for, who holds them,
   and whether the config can fit this cluster at all (ACTOR_UNPLACEABLE, log line and event).
2. **A ``train()`` that never returns** (a hung Learner in the driver, a collective, a
   sampling call without timeout): after ``driver_stall_factor`` x the run's median
   iteration time (at least ``driver_stall_floor_s``), DRIVER_STALLED with the stack of the
   thread inside ``train()`` and any pending actors.
3. **An ``algo.stop()`` that never returns**: RLlib stops each EnvRunner with no timeout,
   so one hung runner blocks it for ever (measured: minutes, until killed). After
   ``stop_timeout_s``, STOP_STALLED with the stack of the thread inside ``stop()``.

Before the run's actors exist, events are written straight into the run directory (the
Recorder does not run yet); after, they go to the Recorder.
"""

from __future__ import annotations

import logging
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable

from ..checks.run.driver import SLOW_START_FACTOR, config_needs, explain_constructing, explain_pending
from ..common import codes as C
from ..common.events import Event
from ..hub.actors import job_actors


#: the driver's CPU share (of one core) over a quiet train() that counts as working
BUSY_CPU_SHARE = 0.2

logger = logging.getLogger("flow1_ray")


def _cpu_seconds() -> float | None:
    try:
        import psutil

        t = psutil.Process().cpu_times()
        return float(t.user + t.system)
    except Exception:
        return None


def thread_stack(ident: int | None) -> str:
    frame = sys._current_frames().get(ident) if ident is not None else None
    return "".join(traceback.format_stack(frame))[-6000:] if frame is not None else ""


class DriverWatch:
    """One per Algorithm: a daemon thread that wakes every ``tick_s``."""

    def __init__(self, algorithm: Any, opts: Any, emit: Callable[[Event], None], tick_s: float = 1.0) -> None:
        self.algorithm = algorithm
        self.opts = opts
        self.emit = emit
        self.tick_s = tick_s
        self.started = time.time()
        self.thread_id = threading.get_ident()   # the thread inside setup(), then train()
        self.initialized = threading.Event()
        self.stopped = threading.Event()
        self.last_result = None
        self.durations: deque = deque(maxlen=20)
        self.reported_startup = False
        self.reported_slow = 0                   # SLOW_START said: 1 the advisory, 2 the WARN
        self.last_startup_look = 0.0
        self.reported_stall_at: float | None = None
        self.last_progress = 0.0                 # when the run was last seen moving during a silent train()
        self.progress_seen = ""
        self._digest: int | None = None
        self._cpu: float | None = None
        self._tick_at: float | None = None
        self.stop_began: float | None = None
        self.stop_thread: int | None = None
        self.failed = False
        import ray

        self.job_id = ray.get_runtime_context().get_job_id()
        self._thread = threading.Thread(target=self._loop, name="flow1-driver-watch", daemon=True)
        self._thread.start()

    # -- told by the callbacks ------------------------------------------------------------
    def on_init(self, emit: Callable[[Event], None] | None = None) -> None:
        if emit is not None:
            self.emit = emit
        self.thread_id = threading.get_ident()
        self.last_result = time.time()
        self.initialized.set()

    def on_result(self) -> None:
        now = time.time()
        if self.last_result is not None:
            self.durations.append(now - self.last_result)
        self.last_result = now
        self.thread_id = threading.get_ident()
        self.reported_stall_at = None
        self._digest = self._cpu = self._tick_at = None

    def on_stop_begin(self) -> None:
        """``algo.stop()`` began (in this thread): watched until :meth:`stop`."""
        self.stop_thread = threading.get_ident()
        self.stop_began = time.time()

    def stop(self) -> None:
        self.stopped.set()

    # -- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.stopped.wait(self.tick_s):
            try:
                if self.stop_began is not None:
                    self._stop_stall()
                elif not self.initialized.is_set():
                    if not self.reported_startup and time.time() - self.started >= self.opts.startup_timeout_s \
                            and self.reported_slow < 2:
                        self._startup()
                else:
                    self._train_stall()
            except Exception as e:  # the watchdog must never be the problem; a failure is said once
                logger.warning("flow1: driver watchdog error: %s: %s", type(e).__name__, e)
                if not self.failed:
                    self.failed = True
                    try:
                        from ..checks.own.watchers import DRIVER_WATCH, watcher_off
                        self.emit(watcher_off(DRIVER_WATCH, "the driver", e,
                                              "a build, train() or stop() that never returns"))
                    except Exception:
                        pass

    def _stop_stall(self) -> None:
        waited = time.time() - (self.stop_began or time.time())
        if waited < self.opts.stop_timeout_s or self.stop_thread is None:
            return
        stack = thread_stack(self.stop_thread)
        self.stop_thread = None   # said once
        top = next((ln.strip() for ln in reversed(stack.splitlines()) if ln.strip().startswith("File ")), "")
        self.emit(Event(C.STOP_STALLED, (
            f"algo.stop() has not returned for {waited:.0f} s (stop_timeout_s {self.opts.stop_timeout_s:g}): the "
            f"driver is at {top or 'an unknown frame'}; RLlib stops each EnvRunner with no timeout, so a hung or "
            f"unreachable runner blocks it: see WORKER_STALLED / NODE_LOST above; ray.shutdown() ends it"),
            {"waited_s": round(waited, 1), "stack": stack, "top_frame": top}))

    def _actors(self) -> tuple[list[dict], dict, dict]:
        import ray

        totals, free = ray.cluster_resources(), ray.available_resources()
        actors = job_actors(self.job_id)
        # RLlib's Learner actors run inside Ray Train's wrapper class: name them for a person
        learner = f"{type(self.algorithm).__name__} Learner"
        for a in actors:
            if "_WrappedExecutable" in a["class"]:
                a["class"] = learner
        return actors, totals, free

    def _pending(self) -> tuple[list[str], dict, dict]:
        actors, totals, free = self._actors()
        return explain_pending(actors, totals, free), totals, free

    def _startup(self) -> None:
        """After startup_timeout_s, every few ticks until the build returns: actors the cluster
        cannot place are ACTOR_UNPLACEABLE (FAIL); actors placed and still constructing are a
        slow start (an advisory, a WARN after SLOW_START_FACTOR x the timeout)."""
        now = time.time()
        if now - self.last_startup_look < 5 * self.tick_s:
            return
        self.last_startup_look = now
        actors, totals, free = self._actors()
        lines = explain_pending(actors, totals, free)
        waited = now - self.started
        needs = config_needs(getattr(self.algorithm, "config", None))
        short = {k: (v, totals.get(k, 0.0)) for k, v in needs.items() if v > totals.get(k, 0.0)}
        if not lines and not short:
            self._slow_start(explain_constructing(actors), waited)
            return
        self.reported_startup = True
        fit = "; ".join(f"the config asks for {v:g} {k} for its actors, the cluster has {t:g}"
                        for k, (v, t) in short.items())
        slow = explain_constructing(actors)
        msg = (f"the Algorithm's build has waited {waited:.0f} s: " + "; ".join(lines + ([fit] if fit else []))
               + ": build_algo() will not return until these resources free up -- give the cluster more, or ask "
                 "for less (num_env_runners, num_learners, num_cpus_per_learner)"
               + (f"; meanwhile {'; '.join(slow)}" if slow else ""))
        self.emit(Event(C.ACTOR_UNPLACEABLE, msg,
                        {"waited_s": round(waited, 1), "pending": lines, "config_needs": needs, "constructing": slow,
                         "cluster_total": {k: totals.get(k, 0.0) for k in ("CPU", "GPU")},
                         "cluster_free": {k: free.get(k, 0.0) for k in ("CPU", "GPU")},
                         "driver_stack": thread_stack(self.thread_id)}))

    def _slow_start(self, slow: list[str], waited: float) -> None:
        """Placed actors still in their constructor: said once as an advisory, once more as a
        WARN when it lasts SLOW_START_FACTOR x startup_timeout_s."""
        if not slow:
            return
        limit = SLOW_START_FACTOR * self.opts.startup_timeout_s
        loud = waited >= limit
        if (loud and self.reported_slow == 2) or (not loud and self.reported_slow >= 1):
            return
        self.reported_slow = 2 if loud else 1
        text = (f"the Algorithm's build has waited {waited:.0f} s: " + "; ".join(slow)
                + ": slow, not stuck -- every actor has its resources; an env's or a module's construction "
                  "takes this long" + (f", past {limit:.0f} s ({SLOW_START_FACTOR}x startup_timeout_s): look at "
                                        f"what the env's constructor waits for" if loud else
                                        f" (a WARN past {limit:.0f} s)"))
        ev = {"waited_s": round(waited, 1), "constructing": slow, "limit_s": limit}
        if loud:
            self.emit(Event(C.SLOW_START, text, ev, status=C.WARN))
        else:
            self.emit(Event(C.SLOW_START, "advisory: " + text, {**ev, "advisory": True}))

    def _progress(self) -> None:
        """Whether the run moves while train() is silent, sampled each tick: the train()
        thread's stack changed, the driver's process used CPU (a Learner in the driver inside
        torch's backward), or an EnvRunner of this node stepped (its lock file's heartbeat)."""
        now = time.time()
        stack = thread_stack(self.thread_id)
        digest = hash(stack)
        cpu = _cpu_seconds()
        moved = digest != self._digest and self._digest is not None
        busy = (cpu is not None and self._cpu is not None and self._tick_at is not None
                and (cpu - self._cpu) >= BUSY_CPU_SHARE * max(now - self._tick_at, 1e-3))
        self._digest, self._cpu, self._tick_at = digest, cpu, now
        if moved or busy or self._runners_stepped(max(self.last_progress, self.last_result or 0.0)):
            self.last_progress = now
            self.progress_seen = "the driver's stack moved" if moved else (
                "the driver computes" if busy else "EnvRunners step")

    def _runners_stepped(self, since: float) -> bool:
        try:
            import ray

            from ..liveness.lockfile import probe_lock
            from ..liveness.lockdir import job_lock_dir

            d = job_lock_dir(self.job_id, ray.get_runtime_context().get_node_id())
            for path in d.glob("*.lock"):
                header = probe_lock(path)[1]
                if header is not None and header.last_progress > since:
                    return True
        except Exception:
            return False
        return False

    def _train_stall(self) -> None:
        """DRIVER_STALLED judges progress, not silence alone: a train() that takes long while
        the driver computes or its runners step is a long iteration (measured: DQN's iterations
        past 120 s on a busy machine, the driver inside torch's backward)."""
        if self.last_result is None:
            return
        usual = statistics.median(self.durations) if self.durations else 0.0
        limit = max(self.opts.driver_stall_floor_s, self.opts.driver_stall_factor * usual)
        now = time.time()
        quiet = now - self.last_result
        if quiet >= limit / 2:
            self._progress()
        still = now - max(self.last_result, self.last_progress)
        if quiet < limit or still < limit / 2 or self.reported_stall_at == self.last_result:
            return
        self.reported_stall_at = self.last_result
        lines = self._pending()[0]
        stack = thread_stack(self.thread_id)
        top = next((ln.strip() for ln in reversed(stack.splitlines()) if ln.strip().startswith("File ")), "")
        self.emit(Event(C.DRIVER_STALLED, (
            f"train() has not returned for {quiet:.0f} s (usual iteration {usual:.1f} s; limit "
            f"{limit:.0f} s = max({self.opts.driver_stall_floor_s:g} s, {self.opts.driver_stall_factor:g}x)) "
            f"and nothing moved for the last {still:.0f} s (the driver's stack the same, its CPU idle, no "
            f"EnvRunner of this node stepping): the driver is at {top or 'an unknown frame'}"
            + (f"; pending: {'; '.join(lines)}" if lines else "")),
            {"quiet_s": round(quiet, 1), "still_s": round(still, 1), "usual_iteration_s": round(usual, 3),
             "limit_s": limit, "stack": stack, "pending": lines}))
