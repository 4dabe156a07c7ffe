"""``flow1 train``'s terminal holds flow1's lines; Ray's own output goes to ``<run dir>/ray.log``.

A 10-iteration ``flow1 train`` printed about 56 lines of which 15 were flow1's: Ray's and
RLlib's warnings, the actor manager's errors, C++ log lines. They come by four roads, and
:class:`RayLog` takes each to the log file while it is open:

* the process's file descriptors 1 and 2 (Ray's C++ core, the processes ``ray.init``
  starts, and every Python handler bound to the ``sys.stdout``/``sys.stderr`` objects of
  the time Ray was imported: Ray's and RLlib's loggers bind them at import) are pointed at
  the file (:func:`os.dup2`); flow1 keeps a copy of the terminal's;
* ``sys.stdout``/``sys.stderr`` become a :class:`Router`: what Ray's log threads write
  (the worker lines ``log_to_driver`` forwards, its error listener) goes to the file, what
  any other thread writes -- flow1's lines, a traceback -- to the terminal: a flow1 line
  is never lost into the file;
* Python warnings: flow1's own to the terminal, the others (raised under Ray's and
  RLlib's calls) to the file;
* loggers that propagate to the root (a library without handlers), that Ray left without
  a handler (logging's last resort) or bound a handler after the change (:meth:`RayLog.adopt`):
  to the file; the ``flow1_ray`` logger to the terminal.

``verbose``: the file's bytes are also copied to the terminal's stderr (a pipe and a
thread), so a user sees Ray's lines as before and the file still has them. Ray's thread
names and its import-time handler binding are Ray's internals (``ray==2.60.0`` pinned):
when they change, Ray's lines reach the terminal again (never flow1's the file), and
``tests/cli/test_cli_output.py`` fails.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator, TextIO

#: the file in the run directory
RAY_LOG = "ray.log"
#: Ray's driver threads that print what they receive (ray/_private/worker.py)
RAY_THREADS = frozenset({"ray_print_logs", "ray_listen_error_messages"})
_FLOW1_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # the flow1_ray package


class Router(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` while Ray's output is kept apart: Ray's log threads
    write to ``ray``, every other thread to ``term`` (colour and width come from it)."""

    def __init__(self, term: TextIO, ray: TextIO) -> None:
        super().__init__()
        self.term, self.ray = term, ray
        self.ray_idents: set[int] = set()   # other threads that speak for Ray for a while (ray.shutdown)

    def _to(self) -> TextIO:
        t = threading.current_thread()
        return self.ray if t.name in RAY_THREADS or t.ident in self.ray_idents else self.term

    def write(self, text: str) -> int:
        return self._to().write(text)

    def flush(self) -> None:
        for s in (self.term, self.ray):
            try:
                s.flush()
            except (OSError, ValueError):   # a closed or broken stream: nothing to flush into
                pass

    def isatty(self) -> bool:
        try:
            return self.term.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self.term.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:   # type: ignore[override]
        return getattr(self.term, "encoding", "utf-8")

    @property
    def errors(self) -> str:   # type: ignore[override]
        return getattr(self.term, "errors", "strict")


def _text(fd: int) -> TextIO:
    """A line-buffered text stream on ``fd`` (it closes ``fd``)."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=True), encoding=getattr(sys.stdout, "encoding", None)
                            or "utf-8", errors="backslashreplace", line_buffering=True, write_through=True)


def _tee(read_fd: int, file: Any, term_fd: int) -> None:
    """Copy the pipe to the file and the terminal until every writer has closed it (the
    processes Ray started hold it too); then close what it was given."""
    try:
        while data := os.read(read_fd, 65536):
            for write in (file.write, lambda b: os.write(term_fd, b)):
                try:
                    write(data)
                except (OSError, ValueError):   # a full disk or a closed terminal: the other still gets it
                    pass
    except OSError:
        pass
    finally:
        os.close(read_fd)
        os.close(term_fd)
        file.close()


class RayLog:
    """A context: Ray's output into ``path`` (see the module's docstring), flow1's on the
    terminal. Ray is imported on entry, before ``sys.stdout``/``sys.stderr`` change, so
    that its loggers' handlers bind the descriptors that now lead to the file."""

    def __init__(self, path: "str | os.PathLike", verbose: bool = False) -> None:
        self.path = Path(path)
        self.verbose = verbose
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> "RayLog":
        sys.stdout.flush()
        sys.stderr.flush()
        self.file = open(self.path, "ab", buffering=0)
        self._fds = (os.dup(1), os.dup(2))
        sink = self.file.fileno()
        self._tee: threading.Thread | None = None
        if self.verbose:
            read_fd, sink = os.pipe()
            self._tee = threading.Thread(target=_tee, args=(read_fd, self.file, os.dup(self._fds[1])),
                                         daemon=True, name="flow1-ray-log")
            self._tee.start()
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        if self.verbose:
            os.close(sink)   # fds 1 and 2 hold the pipe now: it ends when they are given back
        try:
            import ray  # noqa: F401  (its handlers bind sys.stderr now: the file)
            import ray.rllib  # noqa: F401

            self._route()
        except BaseException:   # the terminal back before the error is said
            self.__exit__()
            raise
        return self

    def _route(self) -> None:
        """Python's streams, warnings and loggers: flow1's to the terminal, the rest to the file."""
        self.term_out, self.term_err = _text(os.dup(self._fds[0])), _text(os.dup(self._fds[1]))
        root, mine = logging.getLogger(), logging.getLogger("flow1_ray")
        self._saved = {"stdout": sys.stdout, "stderr": sys.stderr, "showwarning": warnings.showwarning,
                       "propagate": mine.propagate, "last_resort": logging.lastResort}
        self._ray_stream = sys.stderr   # fd 2: the file
        sys.stdout, sys.stderr = Router(self.term_out, sys.stdout), Router(self.term_err, sys.stderr)
        to_file = logging.StreamHandler(self._ray_stream)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._handlers = [(root, to_file), (mine, logging.StreamHandler(self.term_err))]
        for logger, handler in self._handlers:
            logger.addHandler(handler)
        mine.propagate = False
        # a logger that does not propagate and has no handler (ray.init leaves "ray" so) ends in
        # logging's last resort, which writes to sys.stderr at the time: the terminal
        last = logging.StreamHandler(self._ray_stream)
        last.setLevel(logging.WARNING)
        last.setFormatter(to_file.formatter)
        logging.lastResort = last
        warnings.showwarning = self._warning

    def adopt(self) -> int:
        """Handlers a library added since the streams changed (``StreamHandler()`` binds
        ``sys.stderr``: a Router, the terminal) write to the file; the ``flow1_ray`` loggers
        keep theirs. Called after each step that imports or configures more of Ray (its
        start, the Algorithm's build, an iteration); returns how many it moved."""
        moved = 0
        routers = (sys.stdout, sys.stderr)
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if not isinstance(logger, logging.Logger) or name.split(".")[0] == "flow1_ray":
                continue
            for h in list(logger.handlers):
                if isinstance(h, logging.StreamHandler) and any(h.stream is r for r in routers):
                    h.setStream(self._ray_stream)
                    moved += 1
        return moved

    @contextlib.contextmanager
    def ray_speaks(self) -> Iterator[None]:
        """What this thread prints is Ray's for a while: ``ray.shutdown()`` prints the
        worker lines it held back (repeated lines counted) from the calling thread."""
        me = threading.get_ident()
        for r in (sys.stdout, sys.stderr):
            if isinstance(r, Router):
                r.ray_idents.add(me)
        try:
            yield
        finally:
            for r in (sys.stdout, sys.stderr):
                if isinstance(r, Router):
                    r.ray_idents.discard(me)

    def _warning(self, message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
        """flow1's own warnings (a retired threshold) to the terminal, Ray's and its
        libraries' to the file."""
        out = self.term_err if os.path.abspath(filename).startswith(_FLOW1_DIR) else self._ray_stream
        try:
            out.write(warnings.formatwarning(message, category, filename, lineno, line))
        except (OSError, ValueError):
            pass

    def __exit__(self, *exc: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if self._saved:
            for router, saved in ((sys.stdout, self._saved["stdout"]), (sys.stderr, self._saved["stderr"])):
                if isinstance(router, Router):   # a library that kept it (colorama) writes where it was
                    router.term = router.ray = saved
            sys.stdout, sys.stderr = self._saved["stdout"], self._saved["stderr"]
            warnings.showwarning = self._saved["showwarning"]
            logging.lastResort = self._saved["last_resort"]
            logging.getLogger("flow1_ray").propagate = self._saved["propagate"]
            for logger, handler in self._handlers:
                logger.removeHandler(handler)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._fds[0], 1)
        os.dup2(self._fds[1], 2)
        if self._tee is not None:   # it owns the file: it ends when the last writer of the pipe is gone
            self._tee.join(timeout=2.0)
        else:
            self.file.close()
        for s in (getattr(self, "term_out", None), getattr(self, "term_err", None)):
            if s is not None:
                s.close()
        for fd in self._fds:
            os.close(fd)
