"""Reading a faulthandler dump of all threads: its blocks (one per thread, most recent call
first), the crashing thread's frames, which frames are flow1's own or the standard library's
(:func:`_is_library`) and the frame to name (:func:`env_frame`). Text only, no process: used by
``flow1 check``'s supervisor (:mod:`flow1_ray.envcheck.stop_findings`, a hung or crashed check
process) and by the node probe (:mod:`flow1_ray.hub.lockscan`, a runner that died of a fatal
signal: the frame its crashing thread was in goes into the WORKER_DIED).
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

STACK_CHARS = 4000  # the most of a stack or a traceback a finding or a summary keeps
_THREAD_LINE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_CURRENT_LINE = re.compile(r"^Current thread (0x[0-9a-fA-F]+)")
_FRAME_LINE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_PKG = str(Path(__file__).resolve().parents[1])   # the flow1_ray package
_STDLIB = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths().get("stdlib"),
                                                   sysconfig.get_paths().get("platstdlib")) if p})


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
    end = next((i for i, ln in enumerate(lines) if ln.endswith(" in child_main") and "envcheck/child.py" in ln), None)
    if end is not None:
        lines = lines[:end + 1]
    head = [ln for ln in dump.splitlines()[:2] if ln.startswith("Fatal Python error")]
    frames = [(m["file"], int(m["line"]), m["func"]) for m in map(_FRAME_LINE.match, lines) if m]
    return "\n".join(head + lines)[:STACK_CHARS], frames


def current_thread(dump: str) -> int | None:
    """The id of the thread a fatal-signal dump marks as current (the one that crashed)."""
    for line in dump.splitlines():
        m = _CURRENT_LINE.match(line)
        if m:
            return int(m.group(1), 16)
    return None


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


#: Ray's own plumbing between a caller and the wait inside Ray's core worker
_RAY_PLUMBING = ("/ray/_private/", "/ray/_raylet", "/ray/util/tracing/", "/ray/_common/")
#: Ray's blocking calls, by the function of ``ray/_private/worker.py`` the stack ends in
_RAY_WAITS = {"get": "ray.get", "get_objects": "ray.get", "wait": "ray.wait"}
_ANY_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')


def ray_wait(stack: str) -> dict | None:
    """Where a stalled thread waits on another Ray process: None unless its innermost frames
    are Ray's ``ray.get`` / ``ray.wait``; else the call, the first frame outside Ray's
    plumbing that made it ("single_agent_env_runner.py:218 in sample"), that frame's source
    line when the stack holds it, and whether that frame is RLlib's own code or the user's.
    Reads a Python traceback (most recent call last) or a faulthandler block (most recent
    call first)."""
    first = "most recent call first" in stack
    if first:   # faulthandler: the sampling thread's block (the one in RLlib's sample())
        blocks = [b for b in stack.split("hread 0x") if "File " in b]
        stack = next((b for b in blocks if "env_runner" in b or "sample" in b), blocks[0] if blocks else "")
    lines = stack.splitlines()
    frames: list[tuple[str, int, str, str]] = []
    for i, ln in enumerate(lines):
        m = _ANY_FRAME.search(ln)
        if m:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            code = "" if first or not nxt or _ANY_FRAME.search(nxt) else nxt
            frames.append((m["file"], int(m["line"]), m["func"], code))
    if not first:
        frames = frames[::-1]   # most recent first
    if not frames:
        return None
    i = 0
    while i < len(frames) and any(p in frames[i][0].replace("\\", "/") for p in _RAY_PLUMBING):
        i += 1
    waits = [_RAY_WAITS[f[2]] for f in frames[:i] if f[0].replace("\\", "/").endswith("/ray/_private/worker.py")
             and f[2] in _RAY_WAITS]
    if not waits or i >= len(frames):
        return None
    file, line, func, code = frames[i]
    return {"call": waits[-1], "frame": f"{Path(file).name}:{line} in {func}", "file": file, "code": code[:160],
            "by": "rllib" if "/ray/rllib/" in file.replace("\\", "/") else "user"}
