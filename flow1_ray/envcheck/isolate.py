"""``check_env(..., isolate=True)`` and ``flow1 check``: the env runs in a child process.

An env is foreign code. In the checker's own process, an env whose ``step()`` hangs hangs
the check forever; one that segfaults, aborts or calls ``os._exit`` takes the process and
every finding with it; one that prints corrupts ``--json -``. Here a child process (forked:
a few milliseconds on Linux; spawned where fork is unsafe) imports, makes and drives the env
with the same :func:`~flow1_ray.envcheck.judge.drive` as the in-process check, and this process
watches it:

* before each env call the child writes the call, the steps judged and a sequence number
  to a shared page (a few stores a step); the parent polls it every
  :data:`~flow1_ray.envcheck.supervise.POLL_S`, so it knows which call runs and for how
  long, and which call a dead child died in;
* findings go over a pipe as they are made (before the env is called again), their counts
  every :data:`~flow1_ray.envcheck.child.PROGRESS_EVERY_S`: nothing found before a crash is lost;
* faulthandler in the child writes the stacks of a fatal signal (SIGSEGV, SIGABRT, SIGBUS,
  SIGFPE, SIGILL) to a file, and on SIGUSR1 the stacks of every thread: its handler is C,
  so it answers even while the env holds the GIL in a busy loop;
* a call past its timeout is ENV_HUNG: the parent takes the stack, then asks the child to
  stop (SIGUSR2 raises KeyboardInterrupt inside the env call; the child then judges the
  steps it saw as a whole and reports), and kills it if it has not within
  :data:`~flow1_ray.envcheck.supervise.STOP_GRACE_S`;
* a child that dies is ENV_CRASHED with the signal's name or the exit code, the call and
  the step, the env's frame and faulthandler's report; the whole-rollout rules that could
  not run are listed in ``summary["not_run"]``;
* Ctrl-C stops the child the same way and the report is marked interrupted.

The child's fd 1 is its fd 2: what the env prints goes to stderr, never into a JSON report
written to the parent's stdout. The child ignores SIGINT (a terminal's Ctrl-C reaches the
whole process group; the parent decides) and dies with its parent (Linux).

This module starts the child and hands it to the supervisor (:func:`run_isolated`); the
parts live beside it: the call board both processes map (:mod:`~flow1_ray.envcheck.board`),
the child's entry point and its watch (:mod:`~flow1_ray.envcheck.child`), the parent's
supervisor with its timeouts, Ctrl-C and results (:mod:`~flow1_ray.envcheck.supervise`), the
reading of faulthandler's dumps (:mod:`~flow1_ray.envcheck.dumps`, :mod:`~flow1_ray.common.stacks`) and the ENV_HUNG /
ENV_CRASHED builders (:mod:`~flow1_ray.envcheck.stop_findings`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
import tempfile
import threading
from typing import Any

from ..checks.findings import Finding
from ..checks.thresholds import Thresholds
from ..common import codes as C
from ..common.errors import Flow1InputError
from .board import AUDIT_CALLS, PHASE, SLOT_CALL, Board
from .child import child_main
from .supervise import CtrlC, Supervisor

#: seconds a call may take before it is ENV_HUNG: "make" covers the import of "module:attr"
#: and the constructor (a simulator that starts a server), "reset" loading a level
DEFAULT_TIMEOUTS = {"make": 300.0, "reset": 120.0, "step": 60.0}


def default_start_method() -> str:
    """fork where it is safe and cheap (POSIX, not macOS, one thread in this process),
    else spawn: forking a process with other threads can copy a lock one of them holds."""
    if "fork" in mp.get_all_start_methods() and sys.platform != "darwin" and threading.active_count() == 1:
        return "fork"
    return "spawn"


def run_isolated(env: Any, steps: int, seed: int, th: Thresholds, timeouts: dict[str, float | None],
                 start_method: str | None = None, audit_reward: bool = False,
                 drive_fn: Any = None) -> tuple[str, list[Finding], dict]:
    """Run :func:`~flow1_ray.envcheck.judge.drive` (or ``drive_fn``, a module-level function with
    its signature) in a child process and watch it; (name, findings, summary) as the in-process
    drive returns them, plus ENV_HUNG / ENV_CRASHED and ``summary["not_run"]`` when the child
    could not finish."""
    limits = _limits(timeouts)
    method = start_method or default_start_method()
    if method not in mp.get_all_start_methods():
        raise Flow1InputError(f"start method {method!r} is not available here: expected one of "
                              f"{mp.get_all_start_methods()}")
    ctx = mp.get_context(method)
    with tempfile.TemporaryDirectory(prefix="flow1-check-") as tmp:
        board = Board(os.path.join(tmp, "board"), create=True)
        board.v[SLOT_CALL] = PHASE["start"]
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child_main, args=(send, board.path, tmp, env, steps, seed, th, audit_reward, drive_fn),
                           name="flow1-check", daemon=False)
        try:
            with CtrlC() as ctrl_c:
                sup = Supervisor(proc, recv, board, limits, tmp, _default_name(env), steps, seed, method, ctrl_c)
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as e:
                    raise Flow1InputError(f"cannot hand {sup.name!r} to a {method}ed check process ({e}): "
                                          f"pass a registered id, 'module:attr', or a class or function defined "
                                          f"at a module's top level") from None
                send.close()
                try:
                    name, findings, summary = sup.run()
                finally:
                    sup.reap()
        finally:
            recv.close()
            board.close()
    if audit_reward and summary.get("audit_failed"):   # the audit's own hang or crash: the env judged without it
        off = [f for f in findings if f.code == C.WATCHER_OFF and f.evidence.get("call") in AUDIT_CALLS]
        name, findings, summary = run_isolated(env, steps, seed, th, timeouts, start_method, False)
        findings = findings + off
        summary["reward_audit_off"] = off[0].message if off else "the reward-logic audit failed"
    return name, findings, summary


def _limits(timeouts: dict[str, float | None]) -> dict[str, float]:
    """Seconds per call kind (None: the default; 0: no limit); the make limit also covers
    the child's start and the import of "module:attr"."""
    out = {}
    for k, default in DEFAULT_TIMEOUTS.items():
        v = timeouts.get(k)
        v = default if v is None else float(v)
        if v < 0:
            raise Flow1InputError(f"the {k} timeout must be >= 0 seconds (0: no limit), got {v:g}")
        out[k] = v
    out["start"] = out["import"] = out["make"]
    for call in AUDIT_CALLS:   # the reward audit's reads and copies: bounded as a step is
        out[call] = out["step"]
    return out


def _default_name(env: Any) -> str:
    if isinstance(env, str):
        return env
    own_str = type(env).__str__ is not object.__str__   # a target that names itself (flow1 check --config's)
    return getattr(env, "__qualname__", None) or (str(env) if own_str else type(env).__name__)
