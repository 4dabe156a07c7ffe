"""The heartbeat monitor: turns the probes' transitions into WORKER_* events and keeps the
table of workers that ``on_train_result`` reports (alive, dead, stalled, restarted).

It runs inside the run's hub (:mod:`~flow1_ray.actors.hub`): one probe per alive node (lock
files are node-local; the hub's own node is scanned by a thread of the hub, every other by
a NodeProbe actor pinned there), probes for nodes that join later, and Ray's GCS asked for
the exit detail of a dead worker.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from .. import codes as C
from ..events import Event

GCS_LOOKUP_TRIES = 5
GCS_LOOKUP_WAIT_S = 0.1


#: how often the monitor compares the probed nodes with the cluster's alive nodes
NODE_CHECK_S = 2.0


def ray_exit_details(pids: set[int]) -> dict[int, dict[str, Any]]:
    """Ray's own words on dead worker processes: exit type and detail from the GCS worker
    table (a private API, the only one that works without the dashboard), one table read
    for all ``pids``; pids not (yet) in the table are absent."""
    out: dict[int, dict[str, Any]] = {}
    try:
        import ray
        from ray.core.generated import common_pb2, gcs_pb2

        acc = ray._private.state.state._connect_and_get_accessor()
        for raw in acc.get_worker_table():
            w = gcs_pb2.WorkerTableData.FromString(raw)
            if w.pid in pids and not w.is_alive:
                out[w.pid] = {"ray_exit_type": common_pb2.WorkerExitType.Name(w.exit_type),
                              "ray_exit_detail": w.exit_detail[:600]}
    except Exception as e:  # private API: never let it break the monitor
        return {pid: {"ray_exit_lookup_error": f"{type(e).__name__}: {e}"[:200]} for pid in pids}
    return out


def _who(ch: dict) -> str:
    if ch.get("role") == "learner":
        return f"learner {ch.get('worker_index')} (pid {ch.get('pid')})"
    kind = "eval" if ch.get("eval") else "train"
    return f"{kind} worker {ch.get('worker_index')} (pid {ch.get('pid')})"


def _is_learner(ch: dict) -> bool:
    return ch.get("role") == "learner"


def _last_line(stack: str) -> str:
    """The innermost frame: the last 'File' line of a Python traceback, or the first of
    faulthandler's dump (most recent call first), in the thread that was sampling."""
    if "most recent call first" in stack:
        blocks = [b for b in stack.split("hread 0x") if "File " in b]
        block = next((b for b in blocks if "env_runner" in b or "sample" in b), blocks[0] if blocks else "")
        for ln in block.splitlines():
            if ln.strip().startswith("File "):
                return ln.strip()
        return ""
    lines = [ln.strip() for ln in stack.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("File "):
            return ln
    return lines[-1] if lines else ""


class MonitorCore:
    """Transition -> event logic and the worker table, without Ray."""

    def __init__(self, run_id: str, stall_timeout_s: float, stall_action: str) -> None:
        self.run_id = run_id
        self.stall_timeout = stall_timeout_s
        self.stall_action = stall_action
        self.workers: dict[str, dict] = {}   # by runner key
        self.restarts = 0
        self.deaths = 0
        self.stalls = 0
        self.probe_errors: list[str] = []

    def update(self, node_id: str, ch: dict) -> dict:
        """Apply one transition to the worker table; returns where it happened (event fields).
        A restart notes whether the previous process's end was already reported (its own
        finding), which makes the restart the recovery of a known incident."""
        key, kind = ch["key"], ch["kind"]
        w = self.workers.setdefault(key, {"key": key})
        if kind == "restarted":
            ch.setdefault("previous_reported", w.get("status") in ("dead", "stalled"))
        w.update({"pid": ch["pid"], "worker_index": ch.get("worker_index"), "eval": ch.get("eval"),
                  "role": ch.get("role", "env_runner"), "node_id": ch.get("node_id") or node_id})
        status = {"new": "alive", "restarted": "alive", "recovered": "alive", "stopped": "stopped",
                  "died": "dead", "stalled": "stalled"}.get(kind)
        if status:
            w["status"] = status
        self.restarts += kind == "restarted"
        self.deaths += kind == "died"
        self.stalls += kind == "stalled"
        return dict(run_id=self.run_id, worker_index=ch.get("worker_index"), pid=ch["pid"],
                    node_id=ch.get("node_id") or node_id, ts=datetime.fromtimestamp(ch["ts"], timezone.utc))

    def events_for(self, node_id: str, changes: list[dict], details: dict[int, dict] | None = None) -> list[Event]:
        """Update the table and build the events of ``changes`` (deaths with Ray's
        ``details`` by pid, when known)."""
        out = []
        for ch in changes:
            kind = ch["kind"]
            where = self.update(node_id, ch)
            if kind == "restarted":
                out.append(self._restarted(ch, where))
            elif kind == "died":
                out.append(self.died_event(ch, where, (details or {}).get(ch["pid"], {})))
            elif kind == "stalled":
                out.append(self._stalled(ch, where))
        return out

    @staticmethod
    def _restarted(ch: dict, where: dict) -> Event:
        """One incident, one finding: a restart after a death or stall flow1 reported is
        that incident's recovery (PASS); a restart whose cause flow1 never saw stays a WARN."""
        known = bool(ch.get("previous_reported"))
        msg = (f"{_who(ch)} took over from pid {ch.get('previous_pid')}: Ray restarted the runner"
               + ("; recovery from the incident reported above" if known
                  else "; flow1 saw no death or stall of the previous process"))
        return Event(C.WORKER_RESTARTED, msg,
                     {"previous_pid": ch.get("previous_pid"), "pid": ch["pid"], "key": ch["key"],
                      "previous_reported": known}, status=C.PASS if known else "", **where)

    def died_event(self, ch: dict, where: dict, detail: dict, crash_recorded: bool = False) -> Event:
        """WORKER_DIED; PASS when the death is the end of an incident already reported: flow1's
        own kill of a stalled runner, or RLlib ending a runner whose env raised
        (``crash_recorded``: the ENV_CRASHED of that process is in the Recorder)."""
        sig = ch.get("exit_signal")
        how = (f"signal {sig}{' (inferred: it ran no exit code)' if ch.get('signal_inferred') else ''}" if sig
               else ch.get("exit", "exited"))
        exc = ch.get("exception") or {}
        cause = f"; env.step raised {exc['exception']}: {exc['error']} in {exc['frame']}" if exc else ""
        if ch.get("killed_by_flow1"):
            cause += ("; flow1 killed it (stall_action='kill') so that Ray restarts it: the end of the stall "
                      "reported as WORKER_STALLED, not a second incident")
        follows_crash = bool(exc) and crash_recorded
        if follows_crash:
            cause += "; RLlib ends a runner whose env raised: the end of the ENV_CRASHED incident, not a second one"
        ray_part = f"; Ray: {detail['ray_exit_type']}" if "ray_exit_type" in detail else ""
        age = ch.get("last_heartbeat_age_s")
        msg = (f"{_who(ch)} died: {how}{cause}{ray_part}; last heartbeat {age:.2f} s before"
               if age is not None else f"{_who(ch)} died: {how}{cause}{ray_part}")
        ev = {k: ch.get(k) for k in ("worker_index", "pid", "node_id", "actor_id", "exit_signal", "signal_inferred",
                                     "exit", "last_heartbeat_age_s", "last_step_age_s", "state_at_death",
                                     "killed_by_flow1", "traceback_tail", "node_lost")}
        ev.update(detail)
        if exc:
            ev["exception"] = exc
        # one incident, one finding: the death flow1 caused belongs to the stall finding
        known = ch.get("killed_by_flow1") or follows_crash
        code = C.LEARNER_DIED if _is_learner(ch) else C.WORKER_DIED
        if _is_learner(ch):
            msg += "; train() waits on this Learner: RLlib raises, or restarts it when allowed"
        return Event(code, msg, ev, status=C.PASS if known else "", **where)

    def _stalled(self, ch: dict, where: dict) -> Event:
        stack = ch.get("stack", "")
        top = _last_line(stack)
        action = ("; flow1 killed it (stall_action='kill') so that Ray restarts it" if ch.get("killed")
                  else f"; stall_action='{self.stall_action}'")
        place = f" {ch['where']}" if ch.get("where") else ""
        unit = "no gradient step" if _is_learner(ch) else "no step"
        if _is_learner(ch):
            place = " inside update()"
        msg = (f"{_who(ch)} stalled: {unit} for {ch.get('stalled_s', 0):.1f} s{place} "
               f"(stall_timeout_s {self.stall_timeout:g}); stuck at {top or 'unknown frame'}{action}")
        return Event(C.LEARNER_STALLED if _is_learner(ch) else C.WORKER_STALLED, msg,
                     {"stalled_s": ch.get("stalled_s"), "threshold_s": self.stall_timeout, "stack": stack,
                      "top_frame": top,
                      "stack_source": ch.get("stack_source"), "killed": bool(ch.get("killed")),
                      "steps": ch.get("steps")}, **where)

    def status(self) -> dict[str, Any]:
        """Counts by state of the EnvRunners (top level) and of the Learner actors (``learners``)."""
        by = {"alive": 0, "dead": 0, "stalled": 0, "stopped": 0}
        learners = {"alive": 0, "dead": 0, "stalled": 0, "stopped": 0}
        for w in list(self.workers.values()):
            into = learners if w.get("role") == "learner" else by
            into[w.get("status", "alive")] = into.get(w.get("status", "alive"), 0) + 1
        return {**by, "learners": learners, "restarts": self.restarts, "deaths": self.deaths, "stalls": self.stalls,
                "workers": list(self.workers.values()), "probe_errors": self.probe_errors[-5:]}


class MonitorService(MonitorCore):
    """The monitor as it runs inside the run's hub: one probe per alive node (a
    :class:`~flow1_ray.actors.probe.ProbeLoop` thread for the hub's own node, a NodeProbe
    actor pinned to every other node, added as nodes join), deaths waiting for Ray's exit
    detail on a thread (off the report path), and the contention logic.

    ``send(events)`` hands events to the Recorder; ``crash_recorded(pid)`` asks it whether
    that process's ENV_CRASHED is recorded (one incident, one finding).
    """

    def __init__(self, run_id: str, job_id: str, stall_timeout_s: float, stall_action: str,
                 probe_interval_s: float, heartbeat_interval_s: float, thresholds: dict | None,
                 send: Callable[[list[Event]], Any], crash_recorded: Callable[[int], bool]) -> None:
        import ray

        from ..checks.thresholds import DEFAULT
        from .contention import ContentionCore

        super().__init__(run_id, stall_timeout_s, stall_action)
        self._send_events, self._crash_recorded_at = send, crash_recorded
        self.job_id = job_id
        self.node_id = ray.get_runtime_context().get_node_id()
        self.probe_interval = probe_interval_s
        self.heartbeat_interval = heartbeat_interval_s
        self.probes: dict[str, Any] = {}       # node id -> ProbeLoop (this node) or NodeProbe handle
        self.keys: list[str] = []
        self.local_prefixes: list[str] = []
        self.summaries: dict[str, dict] = {}
        self.contention = ContentionCore(run_id, DEFAULT.with_overrides(thresholds))
        self._deaths: queue.Queue = queue.Queue()
        self._probes_lock = threading.Lock()
        threading.Thread(target=self._death_loop, daemon=True, name="flow1-deaths").start()
        threading.Thread(target=self._node_loop, daemon=True, name="flow1-nodes").start()

    def ensure_probes(self) -> int:
        """A probe on every alive node that has none yet (this node's in this process)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .probe import ProbeLoop, make_probe_actor

        with self._probes_lock:
            for node in ray.nodes():
                nid = node["NodeID"]
                if not node.get("Alive") or nid in self.probes:
                    continue
                if nid == self.node_id:
                    probe: Any = ProbeLoop(self.job_id, nid, self.stall_timeout, self.probe_interval,
                                           self.heartbeat_interval, self.stall_action, self.report, self.probe_error)
                    probe.set_keys(self.keys, self.local_prefixes)
                else:
                    probe = make_probe_actor().options(
                        scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
                    ).remote(self.job_id, ray.get_runtime_context().current_actor, nid, self.stall_timeout,
                             self.probe_interval, self.heartbeat_interval, self.stall_action)
                    probe.set_keys.remote(self.keys, self.local_prefixes)
                self.probes[nid] = probe
            return len(self.probes)

    def _remote_probes(self) -> list[Any]:
        return [p for nid, p in self.probes.items() if nid != self.node_id]

    def wait_probes(self, timeout_s: float) -> int:
        """Block until every probe answers (they scan from then on); returns how many did."""
        import ray

        refs = [p.ping.remote() for p in self._remote_probes()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return len(ready) + (self.node_id in self.probes)

    def set_keys(self, keys: list[str], local_prefixes: list[str]) -> int:
        self.keys, self.local_prefixes = list(keys), list(local_prefixes)
        for nid, p in list(self.probes.items()):
            if nid == self.node_id:
                p.set_keys(self.keys, self.local_prefixes)
            else:
                p.set_keys.remote(self.keys, self.local_prefixes)
        return len(self.keys)

    def _death_loop(self) -> None:
        """Deaths wait here for Ray's exit detail (the GCS records a death a moment after
        the kernel released the lock), one worker-table read per round for all of them;
        the table and the counts were updated when the probe reported."""
        while True:
            batch = [self._deaths.get()]
            while not self._deaths.empty():
                batch.append(self._deaths.get_nowait())
            pids = {ch["pid"] for _, ch, _ in batch}
            details: dict[int, dict] = {}
            for _ in range(GCS_LOOKUP_TRIES):
                details.update(ray_exit_details(pids - set(details)))
                if pids <= set(details):
                    break
                time.sleep(GCS_LOOKUP_WAIT_S)
            self._send([self.died_event(ch, where, details.get(ch["pid"], {}), self._crash_recorded(ch))
                        for _, ch, where in batch])

    def _node_loop(self) -> None:
        """Nodes that leave the cluster take their probe with them: their runners are
        declared dead here (WORKER_DIED naming the node, not a hang); nodes that join get a
        probe (autoscaling)."""
        import ray

        while True:
            time.sleep(NODE_CHECK_S)
            try:
                nodes = ray.nodes()
            except Exception:
                continue
            alive = {n["NodeID"] for n in nodes if n.get("Alive")}
            try:
                self.lost_nodes(set(self.probes) - alive, time.time())
                if alive - set(self.probes) and self.keys:
                    self.ensure_probes()
            except Exception as e:
                self.probe_errors.append(f"nodes: {type(e).__name__}: {e}"[:200])

    def lost_nodes(self, lost: set[str], now: float) -> int:
        """Declare the live workers of each lost node dead; returns how many."""
        n = 0
        for nid in lost:
            with self._probes_lock:
                self.probes.pop(nid, None)
            for w in list(self.workers.values()):
                if w.get("node_id") != nid or w.get("status") not in ("alive", "stalled"):
                    continue
                ch = {"kind": "died", "key": w["key"], "pid": w.get("pid"), "worker_index": w.get("worker_index"),
                      "eval": w.get("eval"), "role": w.get("role", "env_runner"), "node_id": nid, "ts": now,
                      "exit": f"its node {nid[:12]} left the cluster (the node's raylet and every process on it "
                              f"are gone)", "node_lost": True}
                self._deaths.put((nid, ch, self.update(nid, ch)))
                n += 1
        return n

    def _crash_recorded(self, ch: dict) -> bool:
        """Whether the Recorder holds this process's ENV_CRASHED (sent by the runner
        before RLlib's restart delay and exit); unknown counts as no: then the death
        stays a FAIL, so an incident is never left without one."""
        if not ch.get("exception"):
            return False
        try:
            return bool(self._crash_recorded_at(ch["pid"]))
        except Exception:
            return False

    def _send(self, events: list[Event]) -> None:
        if not events:
            return
        try:
            self._send_events(events)
        except Exception as e:
            self.probe_errors.append(f"recorder: {type(e).__name__}: {e}"[:200])

    def report(self, node_id: str, changes: list[dict], summary: dict) -> None:
        self.summaries[node_id] = summary
        for ch in changes:
            if ch["kind"] == "died":
                self._deaths.put((node_id, ch, self.update(node_id, ch)))
        changes = [ch for ch in changes if ch["kind"] != "died"]
        try:
            events = self.events_for(node_id, changes) if changes else []
        except Exception as e:  # a fire-and-forget call would lose this silently: keep it
            self.probe_errors.append(f"events: {type(e).__name__}: {e}")
            events = []
        try:
            events += self.contention.observe(node_id, summary)
        except Exception as e:  # a judgement must not stop the monitor
            self.probe_errors.append(f"contention: {type(e).__name__}: {e}")
        self._send(events)

    def probe_error(self, node_id: str, error: str) -> None:
        self.probe_errors.append(f"{node_id[:8]}: {error}")

    def full_status(self) -> dict:
        st = self.status()
        st["probes"] = len(self.probes)
        st["scan_ms"] = {n[:8]: s.get("last_scan_ms") for n, s in self.summaries.items()}
        st["memory"] = self.memory()
        return st

    def memory(self) -> dict:
        """The EnvRunners' resident memory (sum of the last RSS each wrote into its lock
        file, MB) and the fullest node's memory use (%), from the probes' last summaries."""
        rss = [w["rss"] for s in list(self.summaries.values()) for w in s.get("workers", [])
               if w.get("rss") and w.get("role", "env_runner") == "env_runner"]
        node = [s["load"]["mem_usage_percent"] for s in list(self.summaries.values())
                if s.get("load", {}).get("mem_usage_percent") is not None]
        out: dict = {}
        if rss:
            out["runners_rss_mb"] = round(sum(rss) / 1e6, 1)
        if node:
            out["node_percent"] = max(node)
        return out

    def probe_pids(self) -> list[int]:
        import ray

        remote = ray.get([p.ping.remote() for p in self._remote_probes()], timeout=10)
        return [r["pid"] for r in remote] + ([os.getpid()] if self.node_id in self.probes else [])

    def stop_probes(self) -> int:
        import ray

        with self._probes_lock:
            remote = self._remote_probes()
            refs = [p.stop.remote() for p in remote]
            local = self.probes.get(self.node_id)
            if local is not None:
                local.stop()
            ray.wait(refs, num_returns=len(refs), timeout=2.0)
            for p in remote:
                ray.kill(p, no_restart=True)
            n = len(self.probes)
            self.probes.clear()
            return n
