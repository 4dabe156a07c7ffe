"""Incidents from the probes' transitions: a worker's death, stall or restart becomes one
WORKER_* / LEARNER_* event, and the table of workers that ``on_train_result`` reports
(alive, dead, stalled, restarted) is kept here, without Ray (tests and the hub use it).

One incident, one finding: the death that ends an incident flow1 already reported (its own
kill of a stalled runner, RLlib ending a runner whose env raised, a runner of a node named
lost) is a PASS row, and the restart after a reported death or stall is its recovery.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ...common import codes as C
from ...common import schema as S
from ..rule import Rule
from .death_cause import ENV, cause_clause, death_component, likely_origin, origin_clause
from ...common.events import Event

#: a stall inside ray.get held for an actor's start (hub/waits.py) is a WORKER_STALLED after this
#: x stall_timeout_s (150 s with the defaults, as the build's own slow start is a WARN after 150 s);
#: stall_action='kill' kills such a runner then, and NO_SAMPLES waits as long for a run's first sample()
WAIT_HOLD_FACTOR = 5

RULES = (
    Rule("WORKER_DIED", C.WORKER, C.FAIL, "an EnvRunner's lock was released: its process is gone"),
    Rule("WORKER_STALLED", C.WORKER, C.FAIL, "lock held but no heartbeat for stall_timeout_s; a wait in ray.get "
         "while an actor of the run starts is held until the actors are up plus stall_timeout_s, at most "
         f"{WAIT_HOLD_FACTOR}x stall_timeout_s"),
    Rule("LEARNER_DIED", C.WORKER, C.FAIL, "a Learner actor's lock was released: its process is gone"),
    Rule("LEARNER_STALLED", C.WORKER, C.FAIL, "a Learner actor inside update() made no gradient step for stall_timeout_s"),
    Rule("WORKER_RESTARTED", C.WORKER, C.WARN, "a new process took over a worker index"),
    Rule("WORKER_EXIT_DETAIL", C.WORKER, C.PASS,
         "Ray's own words on a death flow1 reported (the GCS worker table's exit type and detail), a row of "
         "the same incident sent once the GCS has them: the WORKER_DIED or LEARNER_DIED never waits for them"),
    Rule("NODE_LOST", C.WORKER, C.FAIL,
         "a node's probe stopped answering and its raylet does not accept connections: its runners are gone "
         "(named before Ray's health check declares the node dead)"),
)


def _who(ch: dict) -> str:
    if ch.get("role") == "learner":
        return f"learner {ch.get('worker_index')} (pid {ch.get('pid')})"
    kind = "eval" if ch.get("eval") else "train"
    return f"{kind} worker {ch.get('worker_index')} (pid {ch.get('pid')})"


def wait_clause(wait: dict) -> str:
    """"in ray.get at single_agent_env_runner.py:218 in sample (RLlib's code: `...`)": where a
    stalled runner waits on another Ray process (:func:`flow1_ray.common.stacks.ray_wait`)."""
    whose = "RLlib's code" if wait.get("by") == "rllib" else "its code"
    code = f": `{wait['code']}`" if wait.get("code") else ""
    return f"in {wait['call']} at {wait['frame']} ({whose}{code})"


def _waiting(ch: dict) -> str:
    """A stall inside ray.get / ray.wait: the wait, and what the run's actors were doing
    (:mod:`flow1_ray.hub.waits` held it while one of them started)."""
    text = f"stuck {wait_clause(ch['ray_wait'])}: it waits on another Ray actor or task"
    held = ch.get("held") or {}
    if held and ch.get("actors_up"):
        return text + (f"; it waited {held.get('held_s', 0):.0f} s for {', '.join(held.get('starting', []))} to "
                       f"start, and still no step now that the run's actors are up")
    if held:
        return text + f"; {', '.join(held.get('starting', []))} still not up after {held.get('held_s', 0):.0f} s"
    if ch.get("actors_up"):
        return text + "; every actor of the run is up: the one it waits on does not answer"
    return text


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


#: a worker's state after each of its events (a restarted hub rebuilds its table from them)
_STATE_OF = {C.WORKER_DIED: S.DEAD, C.LEARNER_DIED: S.DEAD, C.WORKER_STALLED: S.STALLED,
             C.LEARNER_STALLED: S.STALLED, C.WORKER_RESTARTED: S.ALIVE}


class MonitorCore:
    """Transition -> event logic and the worker table, without Ray."""

    def __init__(self, run_id: str, stall_timeout_s: float, stall_action: str) -> None:
        self.run_id = run_id
        self.stall_timeout = stall_timeout_s
        self.stall_action = stall_action
        self.workers: dict[str, dict] = {}   # by runner key
        self.restarts = 0
        self.deaths = 0
        self.deaths_by: dict[str, int] = {}   # what each death is charged to (death_component)
        self.stalls = 0
        self.probe_errors: list[str] = []
        self.stopping = False   # algo.stop() has begun: RLlib ends the Learners and runners

    def graceful(self, ch: dict) -> dict:
        """During ``algo.stop()`` a process that leaves through its interpreter (RLlib ends
        remote Learners with ``exit_actor``: Ray's INTENDED_USER_EXIT) has stopped with the
        run, it has not died; a signal or an exception during the stop is still a death."""
        if (self.stopping and ch.get("kind") == "died" and not ch.get("exit_signal") and not ch.get("exception")
                and ch.get("exit") == "interpreter exit"):
            return {**ch, "kind": "stopped", "exit": "stopped with the run"}
        return ch

    def update(self, node_id: str, ch: dict) -> dict:
        """Apply one transition to the worker table; returns where it happened (event fields).
        A restart notes whether the previous process's end was already reported (its own
        finding), which makes the restart the recovery of a known incident."""
        key, kind = ch["key"], ch["kind"]
        w = self.workers.setdefault(key, {"key": key})
        if kind == "restarted":
            ch.setdefault("previous_reported", w.get("status") in S.UNHEALTHY)
        w.update({"pid": ch["pid"], "worker_index": ch.get("worker_index"), "eval": ch.get("eval"),
                  "role": ch.get("role", "env_runner"), "node_id": ch.get("node_id") or node_id})
        status = {"new": S.ALIVE, "restarted": S.ALIVE, "recovered": S.ALIVE, "stopped": S.STOPPED,
                  "died": S.DEAD, "stalled": S.STALLED}.get(kind)
        if status:
            w["status"] = status
        if kind == "died":
            w["died_at"] = ch["ts"]
            comp = death_component(ch)
            self.deaths_by[comp] = self.deaths_by.get(comp, 0) + 1
        self.restarts += kind == "restarted"
        self.deaths += kind == "died"
        self.stalls += kind == "stalled"
        return dict(run_id=self.run_id, worker_index=ch.get("worker_index"), pid=ch["pid"],
                    node_id=ch.get("node_id") or node_id, ts=datetime.fromtimestamp(ch["ts"], timezone.utc))

    def events_for(self, node_id: str, changes: list[dict]) -> list[Event]:
        """Update the table and build the events of ``changes``."""
        out = []
        for ch in map(self.graceful, changes):
            kind = ch["kind"]
            where = self.update(node_id, ch)
            if kind == "restarted":
                out.append(self._restarted(ch, where))
            elif kind == "died":
                out.append(self.died_event(ch, where))
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

    def died_event(self, ch: dict, where: dict, crash_recorded: bool = False,
                   prior: list[dict] | None = None) -> Event:
        """WORKER_DIED; PASS when the death is the end of an incident already reported: flow1's
        own kill of a stalled runner, or RLlib ending a runner whose env raised
        (``crash_recorded``: the ENV_CRASHED of that process is in the Recorder). A finding the
        same process raised shortly before (``prior``, :func:`.death_cause.likely_origin`) is
        named as the death's likely origin. Ray's exit detail is not waited for: it follows as
        :meth:`exit_detail_event`."""
        exc = ch.get("exception") if isinstance(ch.get("exception"), dict) else {}
        how, cause = self._how(ch, exc)
        origin = likely_origin(prior or [], ch.get("ts"))
        if origin:
            cause += f"; {origin_clause(origin)}"
        if ch.get("killed_by_flow1"):
            cause += ("; flow1 killed it (stall_action='kill') so that Ray restarts it: the end of the stall "
                      "reported as WORKER_STALLED, not a second incident")
        follows_crash = bool(exc) and crash_recorded and (exc.get("component") or ENV) == ENV
        if follows_crash:
            cause += "; RLlib ends a runner whose env raised: the end of the ENV_CRASHED incident, not a second one"
        if ch.get("confirms_node_lost"):
            cause += "; confirmed: Ray declared the node dead, the NODE_LOST incident reported above"
        age = ch.get("last_heartbeat_age_s")
        msg = (f"{_who(ch)} died: {how}{cause}; last heartbeat {age:.2f} s before"
               if age is not None else f"{_who(ch)} died: {how}{cause}")
        ev = {k: ch.get(k) for k in ("key", "worker_index", "pid", "node_id", "actor_id", "exit_signal",
                                     "signal_inferred", "signal_seen", "seen_ending", "exit", "last_heartbeat_age_s",
                                     "last_step_age_s",
                                     "state_at_death", "killed_by_flow1", "traceback_tail", "node_lost", "confirms_node_lost",
                                     "role", "crash_frame", "crash_stack")}
        if exc:
            ev["exception"] = exc
        if origin:
            ev["likely_origin"] = origin
        # one incident, one finding: the death flow1 caused belongs to the stall finding, the
        # death of a node's runner to that node's NODE_LOST
        known = ch.get("killed_by_flow1") or follows_crash or ch.get("confirms_node_lost")
        code = C.LEARNER_DIED if _is_learner(ch) else C.WORKER_DIED
        if _is_learner(ch):
            msg += "; train() waits on this Learner: RLlib raises, or restarts it when allowed"
        return Event(code, msg, ev, status=C.PASS if known else "", **where)

    @staticmethod
    def exit_detail_event(ch: dict, where: dict, died: Event, detail: dict) -> Event | None:
        """WORKER_EXIT_DETAIL: Ray's exit type and detail of the death ``died`` reported, as a
        row of the same incident; None when the GCS had no record of it (the lookup's error is
        not news: the death is reported whole without it)."""
        if "ray_exit_type" not in detail:
            return None
        text = (detail.get("ray_exit_detail") or "").strip()
        msg = (f"{_who(ch)}: Ray's exit detail of the {died.code} reported above: {detail['ray_exit_type']}"
               + (f": {text}" if text else ""))
        ev = {"key": ch.get("key"), "role": ch.get("role", "env_runner"), "of": died.code,
              "death_ts": died.ts.isoformat(),
              "ray_exit_type": detail["ray_exit_type"], "ray_exit_detail": text}
        # stamped when Ray's words were read (the death's own time is in the evidence)
        return Event(C.WORKER_EXIT_DETAIL, msg, ev, status=C.PASS, **{k: v for k, v in where.items() if k != "ts"})

    @staticmethod
    def _how(ch: dict, exc: dict) -> tuple[str, str]:
        """How the process ended and the cause it recorded before it ended (:mod:`.death_cause`):
        an exit code proves it was no SIGKILL; a death with no record, no fatal signal and no kill
        of flow1's says "cause not seen" with what is known, never a guess."""
        sig = ch.get("exit_signal")
        if exc.get("exit_call"):
            return f"exited with code {str(exc.get('exit_code'))[:40]}", f"; {cause_clause(exc, ch.get('ts'))}"
        if sig and ch.get("signal_inferred"):
            how = "no exit code ran (SIGKILL: a kill -9, the OOM killer; or a forced exit such as ray.kill)"
        elif sig == "SIGKILL" and ch.get("signal_seen") == "pending" and not ch.get("killed_by_flow1"):
            how = "signal SIGKILL (seen pending as it died: a kill -9 or the OOM killer; the sender is not recorded)"
        else:
            how = f"signal {sig}" if sig else str(ch.get("exit", "exited"))
        if exc:
            return how, f"; {cause_clause(exc, ch.get('ts'))}"
        if sig and not ch.get("signal_inferred") and ch.get("crash_frame") and not ch.get("killed_by_flow1"):
            return how, (f" (a native crash, no Python exception): its crashing thread was in "
                         f"{str(ch['crash_frame'])[:200]}")
        if ch.get("killed_by_flow1") or ch.get("confirms_node_lost") or (sig and not ch.get("signal_inferred")):
            return how, ""
        return how, "; cause not seen by flow1 (nothing left sample() or called an exit from Python)"

    def _stalled(self, ch: dict, where: dict) -> Event:
        stack = ch.get("stack", "")
        top = _last_line(stack)
        action = ("; flow1 killed it (stall_action='kill') so that Ray restarts it" if ch.get("killed") else
                  f"; stall_action='kill': flow1 kills it if it still makes no step {ch['kill_at_s']:g} s after its "
                  f"last (a wait on another actor may be that actor's slow start)" if ch.get("kill_at_s") else
                  f"; stall_action='{self.stall_action}'")
        place = f" {ch['where']}" if ch.get("where") else ""
        unit = "no gradient step" if _is_learner(ch) else "no step"
        if _is_learner(ch):
            place = " inside update()"
        replay = f"; its sub-env's life is in {ch['repro'][0]} (flow1 replay plays it to the hang)" \
            if ch.get("repro") else ""
        msg = (f"{_who(ch)} stalled: {unit} for {ch.get('stalled_s', 0):.1f} s{place} "
               f"(stall_timeout_s {self.stall_timeout:g}); "
               + (_waiting(ch) if ch.get("ray_wait") else f"stuck at {top or 'unknown frame'}") + action + replay)
        return Event(C.LEARNER_STALLED if _is_learner(ch) else C.WORKER_STALLED, msg,
                     {"key": ch.get("key"), "role": ch.get("role", "env_runner"), "eval": ch.get("eval"),
                      "stalled_s": ch.get("stalled_s"), "threshold_s": self.stall_timeout, "stack": stack,
                      "top_frame": top,
                      "stack_source": ch.get("stack_source"), "killed": bool(ch.get("killed")),
                      "steps": ch.get("steps"), "ray_wait": ch.get("ray_wait"), "held": ch.get("held"),
                      "kill_at_s": ch.get("kill_at_s"), **({"repro": ch["repro"]} if ch.get("repro") else {})},
                     **where)

    def rebuild(self, events: list[Event]) -> dict[str, dict]:
        """A restarted hub's worker table from the run's recorded events (in time order):
        each worker flow1 reported on, with its last pid and state -- dead, stalled, or alive
        again after a restart -- and the counts. Returns the table (key -> worker); workers
        that never had an incident are found again by the probes (their lock files)."""
        for e in sorted(events, key=lambda e: e.ts):
            key = e.evidence.get("key") or e.evidence.get("actor_id")
            if not key or e.code not in _STATE_OF:
                continue
            w = self.workers.setdefault(key, {"key": key})
            w.update({"pid": e.pid, "worker_index": e.worker_index, "node_id": e.node_id,
                      "role": e.evidence.get("role") or ("learner" if e.code.startswith("LEARNER") else "env_runner"),
                      "eval": e.evidence.get("eval"), "status": _STATE_OF[e.code]})
            if e.code == C.WORKER_RESTARTED:
                self.restarts += 1
            elif e.code in (C.WORKER_DIED, C.LEARNER_DIED):
                self.deaths += 1
                comp = death_component(e.evidence)
                self.deaths_by[comp] = self.deaths_by.get(comp, 0) + 1
            elif e.code in (C.WORKER_STALLED, C.LEARNER_STALLED):
                self.stalls += 1
        return self.workers

    def status(self) -> dict[str, Any]:
        """Counts by state of the EnvRunners (top level) and of the Learner actors (``learners``)."""
        by = dict.fromkeys(S.WORKER_STATES_ALL, 0)
        learners = dict.fromkeys(S.WORKER_STATES_ALL, 0)
        for w in list(self.workers.values()):
            into = learners if w.get("role") == "learner" else by
            state = w.get("status", S.ALIVE)
            into[state] = into.get(state, 0) + 1
        return {**by, "learners": learners, "restarts": self.restarts, "deaths": self.deaths,
                "deaths_by_component": dict(self.deaths_by), "stalls": self.stalls,
                "workers": list(self.workers.values()), "probe_errors": self.probe_errors[-5:]}
