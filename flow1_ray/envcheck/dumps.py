"""Reading the files faulthandler leaves in an isolated check's directory (the stack dump of a
hung child, the report of a crashed one), whatever their state. Used by
:mod:`flow1_ray.envcheck.supervise`; the dumps' text is read by :mod:`flow1_ray.common.stacks`.
"""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
