"""Files a user hands flow1 on the command line (a Tune ``result.json``, a thresholds file): read
as regular files of a bounded size and parsed as JSON with every failure a one-line
:class:`~flow1_ray.common.errors.Flow1InputError`. A named pipe without a writer would block
the read forever, ``/dev/zero`` would fill the memory, JSON nested 100,000 deep raises
RecursionError and a 100,000-digit integer ValueError: each is refused in one line instead.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import Flow1InputError

#: the largest input file read (a Tune result.json of 10,000 iterations is ~100-500 MB)
MAX_INPUT_BYTES = 1 << 30

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_input_text(path: str | Path, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a regular file of at most ``max_bytes``; Flow1InputError naming ``what``
    otherwise (special files are refused before they are opened: no read can block)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise Flow1InputError(f"cannot read {what} {p}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise Flow1InputError(f"{what} {p} is {kind}; expected a regular file")
    if st.st_size > max_bytes:
        raise Flow1InputError(f"{what} {p} is {st.st_size / 2**20:,.0f} MiB; expected at most "
                              f"{max_bytes / 2**20:,.0f} MiB")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise Flow1InputError(f"cannot read {what} {p}: {e.strerror or e}") from None
    if len(data) > max_bytes:   # it grew while read
        raise Flow1InputError(f"{what} {p} holds more than {max_bytes / 2**20:,.0f} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Flow1InputError(f"{what} {p} is not UTF-8 text") from None


def parse_input_json(text: str, where: str) -> Any:
    """One JSON value; Flow1InputError with ``where`` (``file:line``) on text that is not JSON,
    nested too deep for the parser, or holding an integer too long to convert."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise Flow1InputError(f"{where}: not JSON ({e.msg})") from None
    except RecursionError:
        raise Flow1InputError(f"{where}: JSON nested too deep to read") from None
    except ValueError as e:   # an integer past the interpreter's digit limit
        raise Flow1InputError(f"{where}: unreadable JSON value ({str(e).split(';')[0][:120]})") from None
