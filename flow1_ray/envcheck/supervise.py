"""The parent's side of an isolated check: the :class:`Supervisor` that watches one child
process (its messages, the call on the call board and how long it has run, its death), stops
it on a hang past a call's timeout or on Ctrl-C (:class:`CtrlC`), and turns what it knows into
(name, findings, summary): the child's own result, or the findings last sent plus ENV_HUNG /
ENV_CRASHED (:mod:`flow1_ray.envcheck.stop_findings`) and ``summary["not_run"]``. Used by
:func:`flow1_ray.envcheck.isolate.run_isolated`; ``flow1 check`` sets :data:`progress_listener`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from ..checks.findings import Finding
from ..common import codes as C
from ..common.errors import Flow1InputError
from .board import AUDIT_CALLS, CALLS, SLOT_CALL, SLOT_EPISODES, SLOT_SEQ, SLOT_STEPS, SLOT_THREAD, Board
from ..common.stacks import STACK_CHARS
from .dumps import read_text
from .stop_findings import at_phrase, audit_off_finding, death_finding, died_how, hung_finding

POLL_S = 0.1            # how often the parent looks at the child's call
STOP_GRACE_S = 3.0      # after SIGUSR2, the child's time to stop, judge and report
CLOSE_GRACE_S = 10.0    # after the report, the child's time to close the env and exit
DUMP_WAIT_S = 2.0       # how long to wait for faulthandler's stack dump
#: told, at each poll, how the check running in this process goes (``flow1 check``'s
#: progress line): ``listener(name, call, steps, budget, episodes, elapsed_s)``, or None. A
#: module setting rather than a check_env argument: the line is the command's concern,
#: not the library's API.
progress_listener: "Callable[[str, str, int, int, int, float], None] | None" = None

#: what a check that stopped without judging its steps as a whole could not run
NOT_RUN = [
    "REWARD_STATS rules over all rewards and returns (REWARD_NAN, REWARD_SPARSE, REWARD_SPIKES, REWARD_SCALE, "
    "REWARD_DROP)",
    "ENV_SPEC rules over the whole rollout (STEP_DURATION_OUTLIER, EPISODE_NEVER_ENDS)",
    "OBS_FLOW reset-observation drift (OBS_DISTRIBUTION_DRIFT)",
    "OBS_FLOW and ACTION_PIPE value checks (NaN, bounds, precision, images) of the observations and actions "
    "still buffered (at most the last 256 steps)",
]


class CtrlC:
    """Counts SIGINTs instead of raising KeyboardInterrupt anywhere in the parent's loop
    (main thread only; a SIGINT that is ignored stays ignored)."""

    def __init__(self) -> None:
        self.count = 0
        self._old: Any = None

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
            self._old = signal.signal(signal.SIGINT, self._hit)
        return self

    def _hit(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class Supervisor:
    """Watches one child: its messages, its call and how long it has run, its death."""

    def __init__(self, proc: Any, conn: Any, board: Board, limits: dict, dump_dir: str, name: str,
                 steps: int, seed: int, method: str, ctrl_c: CtrlC) -> None:
        self.proc, self.conn, self.board, self.limits, self.dir = proc, conn, board, limits, Path(dump_dir)
        self.name, self.budget, self.seed, self.method, self.ctrl_c = name, steps, seed, method, ctrl_c
        self.env_file: str | None = None
        self.findings: list[Finding] = []
        self.counters: dict = {}
        self.result: tuple | None = None
        self.eof = False
        self._seen: tuple[int, int] | None = None
        self._since = time.monotonic()
        self._t0 = time.monotonic()

    # -- reading the child ---------------------------------------------------------------
    @property
    def dead(self) -> bool:
        return self.eof or not self.proc.is_alive()

    def _read(self, timeout: float) -> None:
        if self.eof:
            self.proc.join(timeout)
            return
        ready = wait([self.conn, self.proc.sentinel], timeout)
        while not self.eof and (self.conn in ready or self.conn.poll(0)):
            ready = ()
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                self.eof = True
                break
            self._handle(msg)

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "named":
            self.name = msg[1]
            self.env_file = msg[2] or self.env_file
        elif kind == "progress":
            self.findings, self.counters = msg[1], msg[2]
        elif kind in ("done", "input_error", "internal", "stopped"):
            self.result = msg

    def _where(self) -> tuple[str, int, int]:
        v = self.board.v
        call = CALLS[v[SLOT_CALL]] if 0 <= v[SLOT_CALL] < len(CALLS) else "checks"
        return call, int(v[SLOT_STEPS]), int(v[SLOT_EPISODES])

    def _hung(self) -> str | None:
        v = self.board.v
        now = time.monotonic()
        seen = (int(v[SLOT_SEQ]), int(v[SLOT_CALL]))
        if seen != self._seen:
            self._seen, self._since = seen, now
            return None
        call = self._where()[0]
        limit = self.limits.get(call)
        return call if limit and now - self._since > limit else None

    # -- the run ---------------------------------------------------------------------------
    def _tell(self) -> None:
        """The progress listener, if any (its error never stops a check)."""
        listener = progress_listener
        if listener is None:
            return
        call, steps, episodes = self._where()
        try:
            listener(self.name, call, steps, self.budget, episodes, time.monotonic() - self._t0)
        except Exception:
            pass

    def run(self) -> tuple[str, list[Finding], dict]:
        while True:
            self._read(POLL_S)
            self._tell()
            if self.result is not None:
                return self._outcome()
            if self.ctrl_c.count:
                return self._stop(None)
            if self.dead:
                return self._died()
            hung = self._hung()
            if hung:
                return self._stop(hung)

    def _stop(self, hung: str | None) -> tuple[str, list[Finding], dict]:
        """Stop the child (a hang, or Ctrl-C): its stack if it hung, SIGUSR2, a grace, SIGKILL."""
        call, steps, episodes = self._where()
        call = hung or call
        limit = self.limits.get(call) if hung else None
        stack = self._dump_stack() if hung else ""
        presses = self.ctrl_c.count
        self._signal(getattr(signal, "SIGUSR2", signal.SIGTERM))
        deadline = time.monotonic() + STOP_GRACE_S
        while self.result is None and not self.dead and time.monotonic() < deadline:
            if self.ctrl_c.count > presses:
                break  # Ctrl-C (again): do not wait
            self._read(POLL_S)
        killed = ""
        if self.result is None and not self.dead:
            if not stack:
                stack = self._dump_stack()  # where it was when it would not stop
            self._signal(signal.SIGKILL)
            self.proc.join()
            killed = f"; it did not stop within {STOP_GRACE_S:g} s and was killed"
        extra = []
        thread = int(self.board.v[SLOT_THREAD])
        if hung in AUDIT_CALLS:
            extra.append(audit_off_finding(hung, f"did not return within {limit:g} s (the step timeout)", steps,
                                           episodes, stack, self.env_file, thread))
        elif hung:
            extra.append(hung_finding(hung, limit or 0.0, steps, episodes, stack, self.env_file, thread))
        if self.result is not None and self.result[0] == "done":
            name, findings, summary = self._outcome()
        else:
            name, findings, summary = self._partial()
        findings = findings + extra
        step = steps + 1 if call == "step" else steps
        if hung in AUDIT_CALLS:
            summary["audit_failed"] = extra[0].message
        if hung:
            summary.pop("interrupted", None)
            summary["stopped_early"] = (f"{hung}() did not return within {limit:g} s "
                                        f"{at_phrase(hung, steps, episodes)}{killed}")
        else:
            summary["interrupted"] = True
            at = f" in {call}() at step {step}" if call in ("reset", "step", "make", "import") else ""
            summary["stopped_early"] = f"interrupted (Ctrl-C){at}{killed}"
            if killed and stack:
                summary["stack_when_killed"] = stack[:STACK_CHARS]
        return name, findings, summary

    def _died(self) -> tuple[str, list[Finding], dict]:
        self.proc.join()
        call, steps, episodes = self._where()
        fatal = read_text(self.dir / "fatal.txt")
        if call in AUDIT_CALLS:   # flow1's copy or read killed the process, not the env's own call
            off = audit_off_finding(call, died_how(self.proc.exitcode)[1], steps, episodes, fatal, self.env_file,
                                    int(self.board.v[SLOT_THREAD]))
            name, findings, summary = self._partial()
            summary["audit_failed"] = summary["stopped_early"] = off.message
            return name, findings + [off], summary
        finding = death_finding(self.proc.exitcode, call, steps, episodes, fatal, self.env_file,
                                int(self.board.v[SLOT_THREAD]))
        name, findings, summary = self._partial()
        summary["stopped_early"] = finding.evidence["stopped"]
        return name, findings + [finding], summary

    def _outcome(self) -> tuple[str, list[Finding], dict]:
        kind = self.result[0]
        if kind == "input_error":
            raise Flow1InputError(self.result[1])
        if kind == "done":
            findings, summary = list(self.result[1]), dict(self.result[2])
            summary["isolated"] = self.method
            return self.name, findings, summary
        name, findings, summary = self._partial()
        if kind == "internal":
            findings = findings + [Finding(C.FLOW1_INTERNAL, f"flow1 failed in the check's process: {self.result[1]}",
                                           {"error": self.result[1], "traceback_tail": self.result[2]},
                                           status=C.FAIL)]
            summary["stopped_early"] = "flow1 failed in the check's process"
        else:  # "stopped": a stop taken before the env was made
            summary["interrupted"] = True
            summary["stopped_early"] = "interrupted before the env was made"
        return name, findings, summary

    def _partial(self) -> tuple[str, list[Finding], dict]:
        """What the parent knows of a child that stopped before judging its steps as a whole:
        the findings last sent (counts as of that step), the steps from the page."""
        _, steps, episodes = self._where()
        summary = {"env": self.name, "steps_budget": self.budget, "seed": self.seed, "steps": steps,
                   "episodes": episodes, "crashes": self.counters.get("crashes", 0),
                   "seconds": round(time.monotonic() - self._t0, 4), "isolated": self.method,
                   "findings_as_of_step": self.counters.get("steps", 0), "not_run": list(NOT_RUN)}
        return self.name, list(self.findings), summary

    # -- signals and dumps ----------------------------------------------------------------
    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError, TypeError):
            pass

    def _dump_stack(self) -> str:
        """Every thread's stack, from faulthandler's SIGUSR1 handler in the child."""
        if not hasattr(signal, "SIGUSR1"):
            return ""
        path = self.dir / "stack.txt"
        os.truncate(path, 0)
        self._signal(signal.SIGUSR1)
        deadline, last = time.monotonic() + DUMP_WAIT_S, -1
        while time.monotonic() < deadline and self.proc.is_alive():
            size = path.stat().st_size
            if size > 0 and size == last:
                break
            last = size
            time.sleep(0.05)
        return read_text(path)

    def reap(self) -> None:
        """After the report: the child closes the env and exits; killed if it takes too long
        (CLOSE_GRACE_S) or at the next Ctrl-C."""
        presses = self.ctrl_c.count
        deadline = time.monotonic() + CLOSE_GRACE_S
        while self.proc.is_alive() and time.monotonic() < deadline and self.ctrl_c.count == presses:
            self.proc.join(POLL_S)
        if self.proc.is_alive():
            self._signal(signal.SIGKILL)
            self.proc.join()
