"""Reading what faulthandler leaves in an isolated check's dump files: the blocks of a dump
of all threads (the env's thread, its frames most recent first), which frames are flow1's own or
the standard library's (:func:`_is_library`) and the env's own frame (:func:`env_frame`). Used by
:mod:`flow1_ray.envcheck.supervise` (the files) and :mod:`flow1_ray.envcheck.stop_findings`
(the frames of ENV_HUNG and ENV_CRASHED).
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

STACK_CHARS = 4000  # the most of a stack or a traceback a finding or a summary keeps
_THREAD_LINE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME_LINE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_PKG = str(Path(__file__).resolve().parents[1])   # the flow1_ray package
_STDLIB = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths().get("stdlib"),
                                                   sysconfig.get_paths().get("platstdlib")) if p})


def read_text(path: Path) -> str:
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
    end = next((i for i, ln in enumerate(lines) if ln.endswith(" in child_main") and "envcheck/child.py" in ln), None)
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
