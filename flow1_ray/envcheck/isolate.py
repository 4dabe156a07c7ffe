"""``check_env(..., isolate=True)`` and ``flow1 check``: the env runs in a child process.

An env is foreign code. In the checker's own process, an env whose ``step()`` hangs hangs
the check forever; one that segfaults, aborts or calls ``os._exit`` takes the process and
every finding with it; one that prints corrupts ``--json -``. Here a child process (forked:
a few milliseconds on Linux; spawned where fork is unsafe) imports, makes and drives the env
with the same :func:`~flow1_ray.envcheck.judge.drive` as the in-process check, and this process
watches it:

* before each env call the child writes the call, the steps judged and a sequence number
  to a shared page (a few stores a step); the parent polls it every ``POLL_S``, so it
  knows which call runs and for how long, and which call a dead child died in;
* findings go over a pipe as they are made (before the env is called again), their counts
  every ``PROGRESS_EVERY_S``: nothing found before a crash is lost;
* faulthandler in the child writes the stacks of a fatal signal (SIGSEGV, SIGABRT, SIGBUS,
  SIGFPE, SIGILL) to a file, and on SIGUSR1 the stacks of every thread: its handler is C,
  so it answers even while the env holds the GIL in a busy loop;
* a call past its timeout is ENV_HUNG: the parent takes the stack, then asks the child to
  stop (SIGUSR2 raises KeyboardInterrupt inside the env call; the child then judges the
  steps it saw as a whole and reports), and kills it if it has not within ``STOP_GRACE_S``;
* a child that dies is ENV_CRASHED with the signal's name or the exit code, the call and
  the step, the env's frame and faulthandler's report; the whole-rollout rules that could
  not run are listed in ``summary["not_run"]``;
* Ctrl-C stops the child the same way and the report is marked interrupted.

The child's fd 1 is its fd 2: what the env prints goes to stderr, never into a JSON report
written to the parent's stdout. The child ignores SIGINT (a terminal's Ctrl-C reaches the
whole process group; the parent decides) and dies with its parent (Linux).

Size (~670 lines, over the ~400 the tree keeps to): the parent's supervisor, the child's
entry and the reading of the child's faulthandler dump share the call board and its
phases; the dump parsing and the ENV_HUNG / ENV_CRASHED builders (the last ~140 lines) are
the seam to split along next.
"""

from __future__ import annotations

import faulthandler
import mmap
import multiprocessing as mp
import os
import pickle
import re
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from ..common import codes as C
from ..checks.findings import Finding
from ..checks.thresholds import Thresholds
from .judge import drive
from .drive import Watch
from ..common.errors import Flow1InputError
from ..common.events import jsonable

#: seconds a call may take before it is ENV_HUNG: "make" covers the import of "module:attr"
#: and the constructor (a simulator that starts a server), "reset" loading a level
DEFAULT_TIMEOUTS = {"make": 300.0, "reset": 120.0, "step": 60.0}
POLL_S = 0.1            # how often the parent looks at the child's call
PROGRESS_EVERY_S = 0.5  # how often the child refreshes the findings' counts
STOP_GRACE_S = 3.0      # after SIGUSR2, the child's time to stop, judge and report
CLOSE_GRACE_S = 10.0    # after the report, the child's time to close the env and exit
DUMP_WAIT_S = 2.0       # how long to wait for faulthandler's stack dump
STACK_CHARS = 4000
#: told, at each poll, how the check running in this process goes (``flow1 check``'s
#: progress line): ``listener(name, call, steps, budget, episodes, elapsed_s)``, or None. A
#: module setting rather than a check_env argument: the line is the command's concern,
#: not the library's API.
progress_listener: "Callable[[str, str, int, int, int, float], None] | None" = None

#: what the child is doing, as the shared page says it
_CALLS = ("checks", "start", "import", "make", "reset", "step", "close")
_PHASE = {c: i for i, c in enumerate(_CALLS)}
_ENV_CALLS = frozenset(_PHASE[c] for c in ("import", "make", "reset", "step"))
_SEQ, _CALL, _STEPS, _EPISODES, _THREAD = range(5)
_SLOTS = 8

#: what a check that stopped without judging its steps as a whole could not run
NOT_RUN = [
    "REWARD_STATS rules over all rewards and returns (REWARD_NAN, REWARD_SPARSE, REWARD_SPIKES, REWARD_SCALE, "
    "REWARD_DROP)",
    "ENV_SPEC rules over the whole rollout (STEP_DURATION_OUTLIER, EPISODE_NEVER_ENDS)",
    "OBS_FLOW reset-observation drift (OBS_DISTRIBUTION_DRIFT)",
    "OBS_FLOW and ACTION_PIPE value checks (NaN, bounds, precision, images) of the observations and actions "
    "still buffered (at most the last 256 steps)",
]


def default_start_method() -> str:
    """fork where it is safe and cheap (POSIX, not macOS, one thread in this process),
    else spawn: forking a process with other threads can copy a lock one of them holds."""
    if "fork" in mp.get_all_start_methods() and sys.platform != "darwin" and threading.active_count() == 1:
        return "fork"
    return "spawn"


# --- the page the child writes and the parent reads -------------------------------------------


class _Board:
    """A few int64 slots in a file mapped by both processes (fork or spawn alike)."""

    def __init__(self, path: str, create: bool = False) -> None:
        self.path = path
        if create:
            with open(path, "wb") as f:
                f.write(b"\0" * 8 * _SLOTS)
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), 8 * _SLOTS)
        self.v = memoryview(self._map).cast("q")

    def close(self) -> None:
        self.v.release()
        self._map.close()
        self._file.close()


# --- the child ------------------------------------------------------------------------------


class _ChildWatch(Watch):
    """The drive's watch in the child: the call on the page, the findings down the pipe."""

    def __init__(self, conn: Any, board: _Board) -> None:
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
        v[_STEPS] = steps
        v[_EPISODES] = episodes
        v[_CALL] = _PHASE[call]
        self._seq += 1
        v[_SEQ] = self._seq

    def leave(self) -> None:
        self.v[_CALL] = 0

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


def _prepare_child(watch: _ChildWatch, board: _Board, dump_dir: str) -> None:
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
    board.v[_THREAD] = threading.get_ident() & (2**63 - 1)

    def stop(signum: int, frame: Any) -> None:
        if board.v[_CALL] in _ENV_CALLS:
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


def _child_main(conn: Any, board_path: str, dump_dir: str, env: Any, steps: int, seed: int,
                th: Thresholds, audit_reward: bool = False) -> None:
    board = _Board(board_path)
    watch = _ChildWatch(conn, board)
    try:
        _prepare_child(watch, board, dump_dir)
        drive(env, steps, seed, th, watch, audit_reward)
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


# --- the parent -----------------------------------------------------------------------------


class _CtrlC:
    """Counts SIGINTs instead of raising KeyboardInterrupt anywhere in the parent's loop
    (main thread only; a SIGINT that is ignored stays ignored)."""

    def __init__(self) -> None:
        self.count = 0
        self._old: Any = None

    def __enter__(self) -> "_CtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
            self._old = signal.signal(signal.SIGINT, self._hit)
        return self

    def _hit(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class _Supervisor:
    """Watches one child: its messages, its call and how long it has run, its death."""

    def __init__(self, proc: Any, conn: Any, board: _Board, limits: dict, dump_dir: str, name: str,
                 steps: int, seed: int, method: str, ctrl_c: _CtrlC) -> None:
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
        return _CALLS[v[_CALL]] if 0 <= v[_CALL] < len(_CALLS) else "checks", int(v[_STEPS]), int(v[_EPISODES])

    def _hung(self) -> str | None:
        v = self.board.v
        now = time.monotonic()
        seen = (int(v[_SEQ]), int(v[_CALL]))
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
        if hung:
            extra.append(_hung_finding(hung, limit or 0.0, steps, episodes, stack, self.env_file,
                                       int(self.board.v[_THREAD])))
        if self.result is not None and self.result[0] == "done":
            name, findings, summary = self._outcome()
        else:
            name, findings, summary = self._partial()
        findings = findings + extra
        step = steps + 1 if call == "step" else steps
        if hung:
            summary.pop("interrupted", None)
            summary["stopped_early"] = (f"{hung}() did not return within {limit:g} s "
                                        f"{_at(hung, steps, episodes)}{killed}")
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
        fatal = _read_text(self.dir / "fatal.txt")
        finding = _death_finding(self.proc.exitcode, call, steps, episodes, fatal, self.env_file,
                                 int(self.board.v[_THREAD]))
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
        return _read_text(path)

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


def run_isolated(env: Any, steps: int, seed: int, th: Thresholds, timeouts: dict[str, float | None],
                 start_method: str | None = None, audit_reward: bool = False) -> tuple[str, list[Finding], dict]:
    """Run :func:`~flow1_ray.envcheck.judge.drive` in a child process and watch it; (name,
    findings, summary) as the in-process drive returns them, plus ENV_HUNG / ENV_CRASHED
    and ``summary["not_run"]`` when the child could not finish."""
    limits = _limits(timeouts)
    method = start_method or default_start_method()
    if method not in mp.get_all_start_methods():
        raise Flow1InputError(f"start method {method!r} is not available here: expected one of "
                              f"{mp.get_all_start_methods()}")
    ctx = mp.get_context(method)
    with tempfile.TemporaryDirectory(prefix="flow1-check-") as tmp:
        board = _Board(os.path.join(tmp, "board"), create=True)
        board.v[_CALL] = _PHASE["start"]
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child_main, args=(send, board.path, tmp, env, steps, seed, th, audit_reward),
                           name="flow1-check", daemon=False)
        try:
            with _CtrlC() as ctrl_c:
                sup = _Supervisor(proc, recv, board, limits, tmp, _default_name(env), steps, seed, method, ctrl_c)
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as e:
                    raise Flow1InputError(f"cannot hand {sup.name!r} to a {method}ed check process ({e}): "
                                          f"pass a registered id, 'module:attr', or a class or function defined "
                                          f"at a module's top level") from None
                send.close()
                try:
                    return sup.run()
                finally:
                    sup.reap()
        finally:
            recv.close()
            board.close()


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
    return out


def _default_name(env: Any) -> str:
    if isinstance(env, str):
        return env
    return getattr(env, "__qualname__", None) or type(env).__name__


# --- reading faulthandler's reports -----------------------------------------------------------

_THREAD_LINE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME_LINE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_PKG = str(Path(__file__).resolve().parents[1])   # the flow1_ray package
_STDLIB = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths().get("stdlib"),
                                                   sysconfig.get_paths().get("platstdlib")) if p})


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def main_thread_stack(dump: str, thread_id: int) -> tuple[str, list[tuple[str, int, str]]]:
    """(the block of the env's thread, its frames most recent first) from a faulthandler
    dump of all threads; the first block when that thread is not named in it."""
    blocks: list[tuple[int | None, list[str]]] = []
    for line in dump.splitlines():
        m = _THREAD_LINE.match(line)
        if m:
            blocks.append((int(m.group(1), 16), [line]))
        elif blocks:
            if not line.strip() or line.startswith("Extension modules:"):
                blocks.append((None, []))  # the end of a block
            else:
                blocks[-1][1].append(line)
    blocks = [b for b in blocks if b[1]]
    if not blocks:
        return dump.strip()[:STACK_CHARS], []
    _, lines = next((b for b in blocks if b[0] == thread_id), blocks[0])
    # below the child's entry point a forked child shows its parent's frames at the fork
    end = next((i for i, ln in enumerate(lines) if ln.endswith(" in _child_main") and "envcheck/isolate.py" in ln), None)
    if end is not None:
        lines = lines[:end + 1]
    head = [ln for ln in dump.splitlines()[:2] if ln.startswith("Fatal Python error")]
    frames = [(m["file"], int(m["line"]), m["func"]) for m in map(_FRAME_LINE.match, lines) if m]
    return "\n".join(head + lines)[:STACK_CHARS], frames


def _is_library(path: str) -> bool:
    """flow1's own code, the standard library or an interpreter-internal frame."""
    if path.startswith("<"):
        return True
    try:
        p = str(Path(path).resolve())
    except (OSError, RuntimeError):
        return False
    if p.startswith(_PKG):
        return True
    return p.startswith(_STDLIB) and "site-packages" not in p and "dist-packages" not in p


def env_frame(frames: list[tuple[str, int, str]], env_file: str | None) -> str | None:
    """The env's own frame, "func (file.py:line)": the innermost one in the env class's
    file, else the innermost outside flow1 and the standard library (ctypes, time)."""
    if not frames:
        return None
    same = (lambda f: env_file is not None and Path(f).resolve() == Path(env_file).resolve())
    pick = next((f for f in frames if same(f[0])), None) or next((f for f in frames if not _is_library(f[0])),
                                                                  frames[0])
    return f"{pick[2]} ({Path(pick[0]).name}:{pick[1]})"


def _at(call: str, steps: int, episodes: int) -> str:
    if call == "step":
        return f"at step {steps + 1}, episode {episodes}"
    if call == "reset":
        return f"after step {steps}, episode {episodes}"
    return "before the first step"


def _hung_finding(call: str, limit: float, steps: int, episodes: int, dump: str, env_file: str | None,
                  thread_id: int) -> Finding:
    block, frames = main_thread_stack(dump, thread_id)
    where = env_frame(frames, env_file)
    step = steps + 1 if call == "step" else steps
    what = {"import": "the import of the env's module", "start": "the check's process start"}.get(call, f"{call}()")
    return Finding(C.ENV_HUNG,
                   f"{what} did not return within {limit:g} s (the {_timeout_name(call)} timeout) "
                   f"{_at(call, steps, episodes)}: the env was in {where or 'an unknown frame (no stack)'}",
                   {"call": call, "timeout_s": limit, "first_step": step, "episode": episodes, "frame": where,
                    "stack": block or "(no stack: faulthandler did not answer)"}, env_step=step)


def _timeout_name(call: str) -> str:
    return "make" if call in ("import", "start", "make") else call


def _death_finding(exitcode: int | None, call: str, steps: int, episodes: int, fatal: str, env_file: str | None,
                   thread_id: int) -> Finding:
    """ENV_CRASHED for a child that died: the signal or exit code, the call, the env's frame."""
    block, frames = main_thread_stack(fatal, thread_id) if fatal.strip() else ("", [])
    where = env_frame(frames, env_file)
    sig = None
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        how = f"was killed by {sig}"
    else:
        how = f"exited with code {exitcode}"
    step = steps + 1 if call == "step" else steps
    if call in ("import", "make", "reset", "step", "close"):
        what = "the import of the env module" if call == "import" else f"{call}()"
        inside = f"in {what} {_at(call, steps, episodes)}"
    elif call == "start":
        inside = "while the check's process started"
    else:
        inside = f"between env calls (in flow1's checks or the action sampling), {steps} steps judged"
    hint = ""
    if sig == "SIGKILL":
        hint = " (SIGKILL leaves no report; the kernel's out-of-memory killer sends it)"
    elif sig is None and not block:
        hint = " (an exit without a Python traceback: os._exit() or a C exit())"
    message = f"the env's process {how} {inside}" + (f", in {where}" if where else "") + hint
    return Finding(C.ENV_CRASHED, message,
                   {"call": call, "signal": sig, "exit_code": None if sig else exitcode, "first_step": step,
                    "episode": episodes, "frame": where, "traceback_tail": block or None,
                    "stopped": f"the env's process {how} {inside}"}, env_step=step)
