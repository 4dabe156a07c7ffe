"""The heartbeat monitor: turns the probes' transitions into WORKER_* events and keeps the
table of workers that ``on_train_result`` reports (alive, dead, stalled, restarted).

It runs inside the run's hub (:mod:`~flow1_ray.hub.hub`): one probe per alive node (lock
files are node-local; the hub's own node is scanned by a thread of the hub, every other by
a NodeProbe actor pinned there), probes for nodes that join later, and Ray's GCS asked for
the exit detail of a dead worker.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

from ..common import codes as C
from ..common import schema as S
from ..common.events import Event
from ..checks.own.watchers import CONTENTION, PROBE, error_line, watcher_off
from ..checks.run.incidents import MonitorCore, _who
from .actors import starting_actors
from .exits import GCS_LOOKUP_DEADLINE_S, ExitLookup
from .nodes import NodeWatch, memory_of
from .waits import WaitHolds

#: how often the monitor compares the probed nodes with the cluster's alive nodes
NODE_CHECK_S = 2.0
#: deaths whose Ray exit detail may wait at once (more: their detail is skipped)
DETAIL_QUEUE = 256
#: how often it looks for probes fallen silent (a lost node is named within ~3 s)
NODE_TICK_S = 0.25


class MonitorService(MonitorCore):
    """The monitor as it runs inside the run's hub: one probe per alive node (a
    :class:`~flow1_ray.hub.probe.ProbeLoop` thread for the hub's own node, a NodeProbe
    actor pinned to every other node, added as nodes join), deaths waiting for Ray's exit
    detail (:mod:`~flow1_ray.hub.exits`) on a thread (off the report path), lost nodes
    (:mod:`~flow1_ray.hub.nodes`) and the contention logic. A part of it that fails says so
    once (WATCHER_OFF).

    ``send(events)`` hands events to the Recorder; ``crash_recorded(pid)`` asks it whether
    that process's ENV_CRASHED is recorded (one incident, one finding); ``findings_of(pid)``
    for that process's last findings (a death's likely origin).
    """

    def __init__(self, run_id: str, job_id: str, stall_timeout_s: float, stall_action: str,
                 probe_interval_s: float, heartbeat_interval_s: float, thresholds: dict | None,
                 send: Callable[[list[Event]], Any], crash_recorded: Callable[[int], bool],
                 findings_of: Callable[[int], list] | None = None) -> None:
        import ray

        from ..checks.thresholds import DEFAULT
        from ..checks.run.contention import ContentionCore

        super().__init__(run_id, stall_timeout_s, stall_action)
        self._send_events, self._crash_recorded_at, self._findings_of = send, crash_recorded, findings_of
        self.job_id = job_id
        self.node_id = ray.get_runtime_context().get_node_id()
        self.probe_interval = probe_interval_s
        self.heartbeat_interval = heartbeat_interval_s
        self.probes: dict[str, Any] = {}       # node id -> ProbeLoop (this node) or NodeProbe handle
        self.keys: list[str] = []
        self.local_prefixes: list[str] = []
        self.summaries: dict[str, dict] = {}
        self.contention: ContentionCore | None = ContentionCore(run_id, DEFAULT.with_overrides(thresholds))
        self.nodes = NodeWatch(heartbeat_interval_s)
        self.seed: dict[str, dict] = {}        # a restarted hub's known workers, for the new probes
        self.off_said: set[str] = set()
        self._deaths: queue.Queue = queue.Queue()
        self._details: queue.Queue = queue.Queue(maxsize=DETAIL_QUEUE)   # deaths awaiting Ray's words
        self._exits = ExitLookup()             # Ray's exit detail of the deaths (exits.py)
        self.waits = WaitHolds(stall_timeout_s, lambda: starting_actors(job_id))   # stalls in ray.get (waits.py)
        self._probes_lock = threading.Lock()
        threading.Thread(target=self._death_loop, daemon=True, name="flow1-deaths").start()
        threading.Thread(target=self._detail_loop, daemon=True, name="flow1-exit-details").start()
        threading.Thread(target=self._node_loop, daemon=True, name="flow1-nodes").start()
        self._summaries: queue.Queue = queue.Queue(maxsize=64)   # probe summaries for the contention judge
        threading.Thread(target=self._contention_loop, daemon=True, name="flow1-contention").start()

    def off(self, watcher: str, what: str, error: BaseException | str, unseen: str, **where: Any) -> None:
        """WATCHER_OFF, once per watcher and subject."""
        if f"{watcher}:{what}" in self.off_said:
            return
        self.off_said.add(f"{watcher}:{what}")
        self._send([watcher_off(watcher, what, error, unseen, run_id=self.run_id, **where)])

    def ensure_probes(self) -> int:
        """A probe on every alive node that has none yet (this node's in this process)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .probe import ProbeLoop, make_probe_actor

        with self._probes_lock:
            nodes = ray.nodes()
            self.nodes.learn(nodes)
            for node in nodes:
                nid = node["NodeID"]
                if not node.get("Alive") or nid in self.probes:
                    continue
                try:
                    if nid == self.node_id:
                        probe: Any = ProbeLoop(self.job_id, nid, self.stall_timeout, self.probe_interval,
                                               self.heartbeat_interval, self.stall_action, self.report,
                                               self.probe_error, self.probe_off)
                        probe.set_keys(self.keys, self.local_prefixes)
                        probe.seed(self.seed)
                    else:
                        probe = make_probe_actor().options(
                            scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
                        ).remote(self.job_id, ray.get_runtime_context().current_actor, nid, self.stall_timeout,
                                 self.probe_interval, self.heartbeat_interval, self.stall_action)
                        probe.set_keys.remote(self.keys, self.local_prefixes)
                        probe.seed.remote(self.seed)
                except Exception as e:   # this node's runners go unwatched, and the run says so
                    self.off(PROBE, f"node {nid[:12]}", e, "deaths and hangs of its runners", node_id=nid)
                    continue
                self.probes[nid] = probe
            return len(self.probes)

    def _remote_probes(self) -> list[Any]:
        return [p for nid, p in self.probes.items() if nid != self.node_id]

    def wait_probes(self, timeout_s: float) -> int:
        """Block until every probe answers (they scan from then on); returns how many did.
        A probe that started without its scanner (its lock directory refused) is said off."""
        import ray

        remote = {nid: p.ping.remote() for nid, p in self.probes.items() if nid != self.node_id}
        ready, _ = ray.wait(list(remote.values()), num_returns=len(remote), timeout=timeout_s)
        for nid, ref in remote.items():
            if ref in ready:
                try:
                    info = ray.get(ref, timeout=0)
                except Exception as e:
                    info = {"error": error_line(e)}
                if info.get("error"):
                    self.off(PROBE, f"node {nid[:12]}", info["error"], "deaths and hangs of its runners", node_id=nid)
        return len(ready) + (self.node_id in self.probes)

    def set_keys(self, keys: list[str], local_prefixes: list[str]) -> int:
        self.keys, self.local_prefixes = list(keys), list(local_prefixes)
        for nid, p in list(self.probes.items()):
            if nid == self.node_id:
                p.set_keys(self.keys, self.local_prefixes)
            else:
                p.set_keys.remote(self.keys, self.local_prefixes)
        return len(self.keys)

    def rebuild(self, events: list[Event]) -> dict[str, dict]:
        """A restarted hub: the worker table from the recorded events, and what the new
        probes must know so that a known death is not reported again, a known stall not
        counted twice, and a restart after a reported death is its recovery."""
        table = super().rebuild(events)
        self.seed = {k: {"pid": w.get("pid"), "status": w.get("status")} for k, w in table.items()}
        return table

    def _death_loop(self) -> None:
        """Deaths are reported as soon as the probe saw them, a batch at a time, with the cause
        the process recorded and its likely origin; Ray's exit detail follows from the details
        thread as a WORKER_EXIT_DETAIL row of the same incident (the GCS records a death late,
        seconds on a busy head: the death never waits for it)."""
        while True:
            batch = [self._deaths.get()]
            try:
                while not self._deaths.empty():
                    batch.append(self._deaths.get_nowait())
                events = [self.died_event(ch, where, self._crash_recorded(ch), self._prior(ch))
                          for _, ch, where in batch]
                self._send(events)
            except Exception as e:  # this batch's deaths are lost: said once; the loop goes on
                self.off(PROBE, "deaths being reported", e, "the WORKER_DIED rows of some deaths")
                continue
            for (_, ch, where), died in zip(batch, events):
                try:
                    self._details.put_nowait((ch, where, died))
                except queue.Full:   # the GCS is far behind: Ray's words on this death are skipped
                    pass

    def _detail_loop(self) -> None:
        """Ray's exit type and detail of the reported deaths, one GCS worker-table read per
        batch, each bounded by GCS_LOOKUP_DEADLINE_S; a death the GCS has no record of gets no row."""
        while True:
            batch = [self._details.get()]
            try:
                while not self._details.empty():
                    batch.append(self._details.get_nowait())
                details = self._exits.details({ch["pid"] for ch, _, _ in batch if ch.get("pid")},
                                              GCS_LOOKUP_DEADLINE_S)
                rows = [self.exit_detail_event(ch, where, died, details.get(ch.get("pid"), {}))
                        for ch, where, died in batch]
                self._send([r for r in rows if r is not None])
            except Exception as e:  # the deaths are reported; only Ray's words on them are lost
                self.off(PROBE, "Ray's exit detail of deaths", e, "Ray's exit type and detail of some deaths")

    def _node_loop(self) -> None:
        """Nodes whose probe fell silent and whose raylet is unreachable are NODE_LOST at
        once; nodes that leave the cluster (Ray's verdict) take their probe with them: their
        runners are declared dead here (WORKER_DIED naming the node, not a hang; a PASS
        confirmation when NODE_LOST said it first); nodes that join get a probe."""
        import ray

        last_nodes = 0.0
        while True:
            time.sleep(NODE_TICK_S)
            try:
                for node_id, ch in self.waits.due(time.time()):   # held stalls that are findings now
                    self._send(self.events_for(node_id, [ch]))
                self.suspect_nodes(time.monotonic())
                if time.monotonic() - last_nodes < NODE_CHECK_S:
                    continue
                last_nodes = time.monotonic()
                nodes = ray.nodes()
                self.nodes.learn(nodes)
                alive = {n["NodeID"] for n in nodes if n.get("Alive")}
                self.lost_nodes(set(self.probes) - alive, time.time())
                if alive - set(self.probes) and self.keys:
                    self.ensure_probes()
            except Exception as e:
                self.probe_errors.append(f"nodes: {type(e).__name__}: {e}"[:200])

    def suspect_nodes(self, now: float) -> list[str]:
        """NODE_LOST for each remote node whose probe is silent and whose raylet cannot be
        reached; its runners are marked dead (Ray confirms later)."""
        lost = []
        candidates = self.nodes.silent([n for n in self.probes if n != self.node_id], now)
        if candidates:   # a node Ray already knows to be gone (a graceful removal) is its verdict's
            import ray

            gone = {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
            known = {nid for nid, _ in candidates if nid in gone}
            if known:
                self.lost_nodes(known, time.time())
            candidates = [(nid, s) for nid, s in candidates if nid not in known]
        for nid, silent_s in candidates:
            why = self.nodes.raylet_unreachable(nid)
            if why is None:
                continue
            mine = [w for w in self.workers.values() if w.get("node_id") == nid and w.get("status") in (S.ALIVE, S.STALLED)]
            # a runner whose death its own probe saw in the node's last moments (the node's
            # processes are killed one by one) is part of this loss too, already reported
            before = [w for w in self.workers.values() if w.get("node_id") == nid and w.get("status") == S.DEAD
                      and time.time() - float(w.get("died_at") or 0) < silent_s + 2 * self.heartbeat_interval]
            for w in mine:
                w["status"], w["node_lost_reported"] = S.DEAD, True
                self.deaths += 1
            who = ", ".join(_who(w) for w in mine) + (" gone with it" if mine else "")
            if before:
                who += ("; " if mine else "") + ", ".join(_who(w) for w in before) + " died just before (reported above)"
            self.nodes.suspected[nid] = {"silent_s": round(silent_s, 2), "workers": [w["key"] for w in mine]}
            fields = ("key", "pid", "worker_index", "role")
            self._send([Event(C.NODE_LOST, f"node {nid[:12]} lost: its probe has not reported for {silent_s:.1f} s "
                                           f"(it reports every {self.heartbeat_interval:g} s) and {why}: "
                                           f"{who or 'no runner of this run was on it'}; Ray has not declared the "
                                           f"node dead yet",
                              {"node_id": nid, "silent_s": round(silent_s, 2), "raylet": why,
                               "workers": [{k: w.get(k) for k in fields} for w in mine],
                               "died_before": [{k: w.get(k) for k in fields} for w in before]},
                              run_id=self.run_id, node_id=nid)])
            lost.append(nid)
        return lost

    def lost_nodes(self, lost: set[str], now: float) -> int:
        """Declare the live workers of each lost node dead; returns how many."""
        n = 0
        for nid in lost:
            with self._probes_lock:
                self.probes.pop(nid, None)
            suspected = nid in self.nodes.suspected
            self.nodes.forget(nid)
            for w in list(self.workers.values()):
                named = w.get("node_lost_reported") and not w.get("node_lost_confirmed")
                if w.get("node_id") != nid or not (w.get("status") in (S.ALIVE, S.STALLED) or named):
                    continue
                ch = {"kind": "died", "key": w["key"], "pid": w.get("pid"), "worker_index": w.get("worker_index"),
                      "eval": w.get("eval"), "role": w.get("role", "env_runner"), "node_id": nid, "ts": now,
                      "exit": f"its node {nid[:12]} left the cluster (the node's raylet and every process on it "
                              f"are gone)", "node_lost": True, "confirms_node_lost": bool(named and suspected)}
                w["node_lost_confirmed"] = True
                if named:   # already counted dead by NODE_LOST
                    self.deaths -= 1
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

    def _prior(self, ch: dict) -> list[dict]:
        """The dead process's last findings in the Recorder (none when it cannot say)."""
        try:
            return list(self._findings_of(ch["pid"])) if self._findings_of is not None else []
        except Exception:
            return []

    def _send(self, events: list[Event]) -> None:
        if not events:
            return
        try:
            self._send_events(events)
        except Exception as e:
            self.probe_errors.append(f"recorder: {type(e).__name__}: {e}"[:200])

    def report(self, node_id: str, changes: list[dict], summary: dict) -> None:
        self.summaries[node_id] = summary
        back = self.nodes.reported(node_id)
        events: list[Event] = []
        if back:
            events.append(Event(C.NODE_LOST, f"node {node_id[:12]} answers again: its probe reports and its "
                                             f"runners are probed again (the NODE_LOST above was a cut, not a loss)",
                                {"node_id": node_id, "recovered": True}, status=C.PASS, run_id=self.run_id,
                                node_id=node_id))
        for ch in map(self.graceful, changes):   # in the scan's order: a start, a death, a successor
            try:
                if ch["kind"] == "stalled" and self.waits.hold(node_id, ch):
                    continue   # waits in ray.get while an actor of the run starts: held (waits.py)
                advisory, stall = self.waits.end(ch) if ch["kind"] != "stalled" else (None, None)
                events += self.events_for(node_id, [stall]) if stall else []   # before the death that ends it
                if ch["kind"] == "died":   # reported on the deaths thread, Ray's detail after it
                    self._deaths.put((node_id, ch, self.update(node_id, ch)))
                else:
                    events += self.events_for(node_id, [ch])
                if advisory:   # the held stall ended: a slow start, not a hang
                    events.append(Event(C.SLOW_START, advisory, {"key": ch["key"], **ch["held"]}, status=C.PASS,
                                        **self.update(node_id, ch)))
            except Exception as e:  # a fire-and-forget call would lose this silently: keep it
                self.probe_errors.append(f"events: {type(e).__name__}: {e}")
        try:   # judged on its own thread: a slow judgement never delays the next scan
            self._summaries.put_nowait((node_id, summary))
        except queue.Full:   # the judge is behind: this summary is skipped, the next one is as good
            pass
        self._send(events)

    def _contention_loop(self) -> None:
        """Contention and memory trends from the probes' summaries, on a thread of its own (the
        first leak judgement imports SciPy: seconds a probe's next scan must not wait)."""
        while True:
            node_id, summary = self._summaries.get()
            if self.contention is None:
                continue
            try:
                self._send(self.contention.observe(node_id, summary))
            except Exception as e:  # a judgement that fails is switched off, and said
                self.contention = None
                self.off(CONTENTION, "every node", e, "resource contention and memory leaks")

    def set_stopping(self) -> bool:
        """``algo.stop()`` begins (the driver says so before RLlib ends its actors)."""
        self.stopping = True
        return True

    def probe_error(self, node_id: str, error: str) -> None:
        self.probe_errors.append(f"{node_id[:8]}: {error}")

    def probe_off(self, node_id: str, error: str) -> None:
        """A probe whose scans keep failing: its node's runners are not watched."""
        self.off(PROBE, f"node {node_id[:12]}", error, "deaths and hangs of its runners", node_id=node_id)

    def full_status(self) -> dict:
        st = self.status()
        st["probes"] = len(self.probes)
        st["scan_ms"] = {n[:8]: s.get("last_scan_ms") for n, s in self.summaries.items()}
        st["memory"] = memory_of(list(self.summaries.values()))
        st["nodes_suspected"] = sorted(self.nodes.suspected)
        return st

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
