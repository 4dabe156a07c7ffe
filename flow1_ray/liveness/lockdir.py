"""Where a node's lock files live: a private directory, made fresh, that nobody else can
squat or pre-create.

A fixed, predictable path (``/tmp/flow1-<uid>``) can be created first by another user of
the machine: the run then could not make its lock files, watched no worker and still said
PASS. So the directory of one Ray job on one node is made by ``mkdtemp`` (an unpredictable
name, created exclusively, mode 0700) under ``$FLOW1_LOCK_DIR`` (a pod's emptyDir on k8s),
else ``$XDG_RUNTIME_DIR`` (per user, 0700, when it is ours), else the temp dir. Its path is
handed to every process of that job on that node -- EnvRunners, Learner actors, the probe
-- through Ray's internal KV, keyed by job and node: the first process that needs it makes
it and publishes it with a put that fails if another was first (then it uses the other's).
Every open checks that the directory is a real directory, ours, with no access for
anybody else; anything else is a :class:`LockDirError`, which flow1 reports as a watcher
that is off (WATCHER_OFF), never as silence.

Per job and node, not per run: an EnvRunner makes its lock file while it is built, before
its Algorithm has told it which run it belongs to; the runs of one job (Tune's trials) share
the directory and each run's probe reads only its own runners' files.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

from ..common.names import NAMESPACE

#: Ray internal-KV key of a job's lock directory on a node: ``<prefix><job_id>:<node_id>``
KV_LOCK_DIR = "flow1:lockdir:"
PREFIX = "flow1-"
SUFFIXES = (".lock", ".tb", ".stack", ".exc")


class LockDirError(RuntimeError):
    """The lock directory cannot be used safely (not ours, open to others, not a directory)."""


def lock_root() -> Path:
    """Where lock directories are made: ``$FLOW1_LOCK_DIR``, else ``$XDG_RUNTIME_DIR`` when
    it is a private directory of ours, else the temp dir."""
    explicit = os.environ.get("FLOW1_LOCK_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        try:
            st = os.stat(xdg)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & 0o077:
                return Path(xdg)
        except OSError:
            pass
    return Path(tempfile.gettempdir())


def verify_private(path: Path) -> Path:
    """``path`` as it is when it is a directory (not a symlink) owned by us with no access
    for group or others; else LockDirError naming what is wrong."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise LockDirError(f"lock directory {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise LockDirError(f"lock directory {path} is a symlink: refused (someone else could point it anywhere)")
    if not stat.S_ISDIR(st.st_mode):
        raise LockDirError(f"lock directory {path} is not a directory")
    if st.st_uid != os.getuid():
        raise LockDirError(f"lock directory {path} is owned by uid {st.st_uid}, expected uid {os.getuid()}: "
                           f"refused (another user could plant or remove lock files)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise LockDirError(f"lock directory {path} has mode {stat.S_IMODE(st.st_mode):o}, expected 700")
    return path


def private_dir(path: Path) -> Path:
    """Create ``path`` as a private 0700 directory (parents as needed) and verify it; an
    existing one must already be ours and private (never chmod-ed into shape: a directory
    someone else made is refused, not adopted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return verify_private(path)


def fresh_dir(root: Path | None = None, tag: str = "") -> Path:
    """A new private directory under ``root`` (``mkdtemp``: exclusive, 0700, unpredictable)."""
    root = root or lock_root()
    root.mkdir(parents=True, exist_ok=True)
    return verify_private(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{tag}-" if tag else PREFIX, dir=root)))


def job_lock_dir(job_id: str, node_id: str) -> Path:
    """The lock directory of one Ray job on this node, shared through Ray's internal KV
    (made by whichever process of the job on the node asks first)."""
    from ray.experimental import internal_kv

    key = f"{KV_LOCK_DIR}{job_id}:{node_id}"
    known = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
    if known:
        return _existing(Path(known.decode()))
    mine = fresh_dir(tag=f"job{job_id}")
    if internal_kv._internal_kv_put(key, str(mine), overwrite=False, namespace=NAMESPACE):
        os.rmdir(mine)  # another process of the job was first: use its directory
        return _existing(Path(internal_kv._internal_kv_get(key, namespace=NAMESPACE).decode()))
    return mine


def _existing(path: Path) -> Path:
    """A published directory: verified; made again (private) when a temp cleaner removed
    it -- its name was never predictable, so nobody else can have made it first unless
    they read it from this job's KV."""
    if not os.path.lexists(path):
        return private_dir(path)
    return verify_private(path)


def sweep_stale(root: Path | None = None, older_than_s: float = 3600.0) -> int:
    """Remove lock files nobody holds that are older than ``older_than_s`` (runs killed
    before their probes could clean up) from our lock directories under ``root``, and the
    directories left empty for that long. Only directories that pass :func:`verify_private`
    are touched."""
    from .lockfile import holder_pid

    root = root or lock_root()
    removed, now = 0, time.time()
    try:
        dirs = [d for d in root.iterdir() if d.name.startswith(PREFIX)]
    except OSError:
        return 0
    for d in dirs:
        try:
            verify_private(d)
        except LockDirError:
            continue
        for lock in d.glob("*.lock"):
            try:
                if now - lock.stat().st_mtime > older_than_s and holder_pid(lock) is None:
                    for suffix in SUFFIXES:
                        try:
                            os.unlink(d / (lock.name[:-5] + suffix))
                        except OSError:
                            pass
                    removed += 1
            except OSError:
                continue
        try:
            if now - d.stat().st_mtime > older_than_s:
                d.rmdir()  # only when empty
        except OSError:
            pass
    return removed
