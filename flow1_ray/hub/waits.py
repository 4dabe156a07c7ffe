"""Stalls inside ``ray.get`` / ``ray.wait``: a runner that waits there waits on another Ray
process. When an actor of the run is still starting at that moment, the wait is that actor's
slow start, not a hang. Measured: IMPALA and APPO create RLlib's ``EnvRunnerStateServer`` at
setup and every runner asks it for weights at the top of each ``sample()``; on a loaded 2-core
machine its new worker process took 108 s to import RLlib, and the runner's first ``sample()``
waited in ``ray.get`` all that time, past ``stall_timeout_s``.

Such a stall is held instead of reported (:class:`WaitHolds`): when the runner steps again it
is a SLOW_START advisory (PASS) naming the actor and the wait; it becomes the WORKER_STALLED
(FAIL) it was when the actors are up and the runner still makes no step for another
``stall_timeout_s``, or when the hold reaches WAIT_HOLD_FACTOR x ``stall_timeout_s``. A stall
in ``ray.get`` while every actor of the run is up is reported at once, naming the wait. The
GCS is read once at the stall and at most every HOLD_RECHECK_S while one is held; a GCS that
cannot answer leaves the stall reported as it is.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..checks.run.incidents import WAIT_HOLD_FACTOR, _who, wait_clause
from ..common.stacks import ray_wait

#: how often the GCS is asked again, while a stall is held, whether the actors are up
HOLD_RECHECK_S = 5.0


class WaitHolds:
    """The stalls held while an actor of the run starts, by runner key. ``starting()`` lists
    the run's actors that are not up yet (:func:`flow1_ray.hub.actors.starting_actors`)."""

    def __init__(self, stall_timeout_s: float, starting: Callable[[], list[str]]) -> None:
        self.stall_timeout = stall_timeout_s
        self.limit_s = WAIT_HOLD_FACTOR * stall_timeout_s
        self._starting = starting
        self.held: dict[str, dict[str, Any]] = {}
        self._checked = 0.0
        self._lock = threading.Lock()

    def _actors(self) -> list[str] | None:
        try:
            return list(self._starting())
        except Exception:   # the GCS cannot say: nothing is held, the stall is reported as it is
            return None

    def hold(self, node_id: str, ch: dict) -> bool:
        """Whether the stall ``ch`` is held: its stack waits in ray.get / ray.wait while an
        actor of the run is still starting. Otherwise the wait, when there is one, is noted
        in ``ch`` for the finding (and that no actor was starting)."""
        wait = ray_wait(ch.get("stack") or "")
        if wait is None or ch.get("killed"):
            return False
        ch["ray_wait"] = wait
        actors = self._actors()
        if not actors:
            ch["actors_up"] = actors is not None
            return False
        with self._lock:
            self.held[ch["key"]] = {"node_id": node_id, "ch": ch, "actors": actors, "since": ch["ts"],
                                    "ready_at": None}
        return True

    def end(self, ch: dict) -> tuple[str | None, dict | None]:
        """The key's hold ends: it stepped again (the advisory's text; its evidence in
        ``ch["held"]``), or flow1's stall_action='kill' killed it at the end of the hold (the
        stall to report before that death: the death says it ends a reported stall); a death
        of another cause is that death's incident alone."""
        with self._lock:
            h = self.held.pop(ch["key"], None)
        if h is None:
            return None, None
        if ch["kind"] == "died" and ch.get("killed_by_flow1"):
            return None, self._finding(h, ch["ts"])
        if ch["kind"] != "recovered":
            return None, None
        ch["held"] = self.evidence(h, ch["ts"])
        waited = float(h["ch"].get("stalled_s") or 0.0) + ch["ts"] - h["since"]
        return (f"advisory: {_who(h['ch'])} waited {waited:.0f} s {wait_clause(h['ch']['ray_wait'])} while "
                f"{', '.join(h['actors'])} started: a slow start, not a hang -- it steps again"), None

    def _finding(self, h: dict, now: float) -> dict:
        return dict(h["ch"], stalled_s=round(float(h["ch"].get("stalled_s") or 0.0) + now - h["since"], 3),
                    held=self.evidence(h, now), actors_up=h["ready_at"] is not None, ts=now)

    @staticmethod
    def evidence(h: dict, now: float) -> dict:
        return {"ray_wait": h["ch"]["ray_wait"], "starting": h["actors"], "held_s": round(now - h["since"], 1),
                "waited_s": round(float(h["ch"].get("stalled_s") or 0.0) + now - h["since"], 1)}

    def due(self, now: float) -> list[tuple[str, dict]]:
        """The held stalls that are findings now, (node id, the stall with its wait and how
        long it was held): the stall reached the hold's limit (counted from its last step,
        as stall_action='kill' counts), or the actors are up and it still waits after
        another stall_timeout_s (the GCS asked at most every HOLD_RECHECK_S)."""
        out = []
        with self._lock:
            for key, h in list(self.held.items()):
                if float(h["ch"].get("stalled_s") or 0.0) + now - h["since"] >= self.limit_s:
                    out.append((h["node_id"], self._finding(self.held.pop(key), now)))
            if not self.held or now - self._checked < HOLD_RECHECK_S:
                return out
            self._checked = now
        actors = self._actors()
        with self._lock:
            for key, h in list(self.held.items()):
                if actors == [] and h["ready_at"] is None:
                    h["ready_at"] = now
                if actors is None or (h["ready_at"] is not None and now - h["ready_at"] >= self.stall_timeout):
                    out.append((h["node_id"], self._finding(self.held.pop(key), now)))
        return out
