"""The child process of an isolated check: its entry point (:func:`child_main`, the target
:func:`~flow1_ray.envcheck.isolate.run_isolated` hands to ``multiprocessing``, under fork or
spawn alike), its setup (signals, faulthandler, stdout to stderr, death with its parent) and the
drive's :class:`~flow1_ray.envcheck.watch.Watch` in it, which writes each env call to the
call board (:mod:`flow1_ray.envcheck.board`) and sends the findings to the parent as they are
made. The same :func:`~flow1_ray.envcheck.judge.drive` as the in-process check runs here.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from ..checks.findings import Finding
from ..checks.thresholds import Thresholds
from ..common.errors import Flow1InputError
from ..common.events import jsonable
from .board import ENV_CALLS, PHASE, SLOT_CALL, SLOT_EPISODES, SLOT_SEQ, SLOT_STEPS, SLOT_THREAD, Board
from ..common.stacks import STACK_CHARS
from .judge import drive
from .watch import Watch

PROGRESS_EVERY_S = 0.5  # how often the child refreshes the findings' counts


class _ChildWatch(Watch):
    """The drive's watch in the child: the call on the page, the findings down the pipe."""

    def __init__(self, conn: Any, board: Board) -> None:
        self.conn, self.v = conn, board.v
        self._seq = 0
        self._findings: list[Finding] = []
        self._driver: Any = None
        self._sent = -1
        self._next = 0.0

    def enter(self, call: str, steps: int, episodes: int) -> None:
        if self.stop_requested and call in ("reset", "step"):
            self.stop_requested = False
            raise KeyboardInterrupt  # asked for between two calls: taken before the next
        d = self._driver
        if d is not None and call != "close":
            n = len(d.rc.log) + len(self._findings)
            if n != self._sent or time.monotonic() >= self._next:
                self._progress(n)
        v = self.v
        v[SLOT_STEPS] = steps
        v[SLOT_EPISODES] = episodes
        v[SLOT_CALL] = PHASE[call]
        self._seq += 1
        v[SLOT_SEQ] = self._seq

    def leave(self) -> None:
        self.v[SLOT_CALL] = 0

    def named(self, name: str, env: Any) -> None:
        self.send(("named", name, _source_file(env) if env is not None else None))

    def started(self, findings: list[Finding], driver: Any) -> None:
        self._findings, self._driver = findings, driver

    def done(self, findings: list[Finding], summary: dict) -> None:
        self.send(("done", findings, summary))

    def _progress(self, n: int) -> None:
        d = self._driver
        self.send(("progress", list(self._findings) + d.rc.log.findings(),
                   {"steps": d.rc.steps, "episodes": d.rc.episodes, "crashes": d.crashes}))
        self._sent = n
        self._next = time.monotonic() + PROGRESS_EVERY_S

    def send(self, msg: tuple) -> None:
        try:
            self.conn.send(msg)
        except (pickle.PicklingError, TypeError, AttributeError):  # evidence holding an object pickle refuses
            self.conn.send(_portable(msg))


def _portable(msg: tuple) -> tuple:
    """A message whose findings' evidence and summary are plain JSON values."""
    out = []
    for part in msg:
        if isinstance(part, list) and all(isinstance(f, Finding) for f in part):
            part = [replace(f, evidence=jsonable(f.evidence)) for f in part]
        elif isinstance(part, dict):
            part = jsonable(part)
        out.append(part)
    return tuple(out)


def _source_file(env: Any) -> str | None:
    import inspect

    try:
        return inspect.getsourcefile(type(getattr(env, "unwrapped", env)))
    except (TypeError, OSError):
        return None


def _prepare_child(watch: _ChildWatch, board: Board, dump_dir: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the parent's to handle
    sys.stdout.flush()
    os.dup2(2, 1)  # the env's prints go to stderr: the parent's stdout may be a JSON report
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, ValueError, OSError):
        pass
    # O_APPEND: the parent truncates a file before asking for a dump, the dump starts at 0
    watch.fatal_file = open(os.path.join(dump_dir, "fatal.txt"), "a")
    watch.stack_file = open(os.path.join(dump_dir, "stack.txt"), "a")
    faulthandler.enable(watch.fatal_file, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, watch.stack_file, all_threads=True, chain=False)
    board.v[SLOT_THREAD] = threading.get_ident() & (2**63 - 1)

    def stop(signum: int, frame: Any) -> None:
        if board.v[SLOT_CALL] in ENV_CALLS:
            raise KeyboardInterrupt  # inside the env's call: interrupt it
        watch.stop_requested = True  # inside flow1's checks: stop before the next env call

    if hasattr(signal, "SIGUSR2"):
        signal.signal(signal.SIGUSR2, stop)
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: the kernel kills the child when the parent dies, however it dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_main(conn: Any, board_path: str, dump_dir: str, env: Any, steps: int, seed: int,
               th: Thresholds, audit_reward: bool = False, drive_fn: Any = None) -> None:
    """The child's entry point: set up, drive and judge the env, send the result (or the
    failure) to the parent, flush, ``os._exit(0)``. ``drive_fn``: a drive with the signature
    of :func:`~flow1_ray.envcheck.judge.drive` (``flow1 check --config``'s); None: that one."""
    board = Board(board_path)
    watch = _ChildWatch(conn, board)
    try:
        _prepare_child(watch, board, dump_dir)
        (drive_fn or drive)(env, steps, seed, th, watch, audit_reward)
    except Flow1InputError as e:
        watch.send(("input_error", str(e)))
    except KeyboardInterrupt:  # stopped before the env was made
        watch.send(("stopped",))
    except BaseException as e:  # flow1's own failure; the parent reports it
        watch.send(("internal", f"{type(e).__name__}: {e}",
                    "".join(traceback.format_exception(type(e), e, e.__traceback__))[-STACK_CHARS:]))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)
