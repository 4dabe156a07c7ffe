"""The run directory's ``repro/`` entries: a flight-recorder dump (``runner/flight.py``) that
``flow1 replay`` plays again. An entry is a folder ``repro/<name>/`` holding ``arrays.npz``
(numeric arrays only, written and read without pickle) and ``manifest.json``, written last: an
entry with its manifest is complete. Read back as untrusted input: a damaged or hostile entry
is one line (:class:`~flow1_ray.common.errors.Flow1InputError`), never a traceback, and
nothing in it can run code.

The manifest (schema 1): ``finding`` (the code it belongs to), ``message``, ``worker_index``,
``kind`` (train or eval), ``pid``, ``node_id``, ``env`` (how to build the env again:
``spec`` a registered id or ``module:qualname``, ``how`` "gym id", "class" or "creator",
``env_config``, ``worker_index``, ``vector_index``, ``num_workers``, ``why`` when it cannot
be named), ``start`` (``from``: "creation" when the sub-env's whole life is replayed, else
"episode"; ``episodes``: each one's ``seed``, ``options``, ``first_digest``; the first one's
``rng_state``; ``whole``, ``steps``, ``episode_steps``, ``dropped_steps``, ``sub_env``) and
``failure`` (``call``: step or reset, ``step``: the step of the replay it failed at, counted
over every replayed step, ``exception``, ``frame``). The arrays: ``actions``, ``digests``,
``rewards`` (one row per replayed step), ``episode_starts`` (each episode's first row) and
``failed_action`` (the action the failing step was called with).
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import Any

import numpy as np

from ..common.errors import Flow1InputError
from ..common.events import one_line
from ..common.schema import REPRO_DIR, repro_entry_name
from .store import Location

SCHEMA = 1
MANIFEST, ARRAYS = "manifest.json", "arrays.npz"
#: what one entry may hold (a reader refuses more)
MAX_ENTRY_BYTES = 32 * 1024**2
MAX_MANIFEST_BYTES = 1024**2
ARRAY_NAMES = ("actions", "digests", "rewards", "failed_action", "episode_starts",
               "acted", "observed", "failed_acted")   # a multi-agent dump's masks, per agent
#: a Learner entry's arrays are named a0, a1, ... (its manifest's "learner"/"arrays" says what each is)
_LEARNER_ARRAY = re.compile(r"^a[0-9]{1,6}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")
#: the digest's projection: its width grows with the widest observation seen
_SEED = 0x5EED


class Digest:
    """``of(obs)``: one float64 per row of a batch of observations (``obs`` of shape
    (n, ...)); None for anything but one numeric array."""

    def __init__(self) -> None:
        self._w = np.zeros(0)

    def _weights(self, d: int) -> np.ndarray:
        if self._w.size < d:
            self._w = np.random.default_rng(_SEED).uniform(0.5, 1.5, size=d)
        return self._w[:d]

    def of(self, obs: Any, n: int) -> np.ndarray | None:
        if not isinstance(obs, np.ndarray) or obs.dtype.kind not in "fiub" or obs.size == 0 or len(obs) != n:
            return None
        rows = obs.reshape(n, -1)
        return rows.astype(np.float64, copy=False) @ self._weights(rows.shape[1])


entry_name = repro_entry_name


def write_entry(run_dir: "str | os.PathLike | Location", name: str, arrays: dict, manifest: dict,
                max_bytes: int = MAX_ENTRY_BYTES) -> Location | None:
    """``repro/<name>/``; None (nothing written) where ``name`` is not a plain name, an
    array is not numeric, or the arrays pass ``max_bytes``."""
    if not _NAME.match(name):
        return None
    arrs = {k: np.asarray(v) for k, v in arrays.items() if k in ARRAY_NAMES or _LEARNER_ARRAY.match(k)}
    if any(a.dtype.kind not in "biuf" for a in arrs.values()) or sum(a.nbytes for a in arrs.values()) > max_bytes:
        return None
    d = Location(run_dir) / REPRO_DIR / name
    d.mkdir()
    buf = io.BytesIO()
    np.savez(buf, **arrs)
    (d / ARRAYS).write_bytes(buf.getvalue())
    (d / MANIFEST).write_text(json.dumps({"schema": SCHEMA, **manifest}, default=_plain, indent=1))
    return d


def _plain(v: Any) -> Any:
    try:
        return v.item()
    except Exception:
        return str(v)


def entries(run_dir: "str | os.PathLike | Location") -> list[str]:
    """The names of the run's complete entries (with a manifest), oldest first."""
    d = Location(run_dir) / REPRO_DIR
    try:
        names = d.listdir()
    except Flow1InputError:
        return []
    return sorted(n for n in names if _NAME.match(n) and (d / n / MANIFEST).is_file())


def read_entry(path: "str | os.PathLike") -> tuple[dict, dict]:
    """(manifest, arrays) of the entry at ``path`` (``RUN/repro/<name>``); a damaged or
    hostile entry raises Flow1InputError with one line saying what is wrong."""
    p = os.fspath(path)
    shown = one_line(p)[:200]
    man_path, arr_path = os.path.join(p, MANIFEST), os.path.join(p, ARRAYS)
    if not os.path.isdir(p):
        raise Flow1InputError(f"{shown}: not a repro entry (no such directory)")
    if not os.path.isfile(man_path):
        raise Flow1InputError(f"{shown}: not a repro entry (no {MANIFEST}: incomplete or not flow1's)")
    for f, cap in ((man_path, MAX_MANIFEST_BYTES), (arr_path, MAX_ENTRY_BYTES)):
        if os.path.islink(f):
            raise Flow1InputError(f"{shown}: {os.path.basename(f)} is a link; refused")
        if os.path.isfile(f) and os.path.getsize(f) > cap:
            raise Flow1InputError(f"{shown}: {os.path.basename(f)} is larger than {cap // 1024**2} MB; refused")
    try:
        with open(man_path, "rb") as fh:
            man = json.loads(fh.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise Flow1InputError(f"{shown}: {MANIFEST} is not JSON ({one_line(e)[:120]})") from None
    if not isinstance(man, dict) or man.get("schema") != SCHEMA:
        raise Flow1InputError(f"{shown}: {MANIFEST} is not a schema-{SCHEMA} manifest")
    for key, kind in (("env", dict), ("start", dict), ("failure", dict)):
        if not isinstance(man.get(key), kind):
            raise Flow1InputError(f"{shown}: {MANIFEST} has no {key!r} object")
    learner = man.get("kind") == "learner"
    if learner:
        _check_learner(man, shown)
    start = man["start"]
    if start.get("multi_agent") and not (isinstance(start.get("agents"), list) and all(
            isinstance(a, (str, int)) and not isinstance(a, bool) for a in start["agents"])
            and isinstance(start.get("action_kinds", {}), dict)):
        raise Flow1InputError(f"{shown}: {MANIFEST}: a multi-agent entry without its agents' ids and action kinds")
    arrays: dict = {}
    if os.path.isfile(arr_path):
        try:
            with np.load(arr_path, allow_pickle=False) as z:
                for k in z.files:
                    if not (_LEARNER_ARRAY.match(k) if learner else k in ARRAY_NAMES):
                        raise Flow1InputError(f"{shown}: {ARRAYS} holds an unknown array {one_line(k)[:40]!r}")
                    a = z[k]
                    if a.dtype.kind not in "biuf":
                        raise Flow1InputError(f"{shown}: {ARRAYS}: {k} is not numeric")
                    arrays[k] = a
        except Flow1InputError:
            raise
        except Exception as e:   # noqa: BLE001 -- a damaged zip or array: one line
            raise Flow1InputError(f"{shown}: {ARRAYS} cannot be read ({type(e).__name__}: {one_line(e)[:120]})") \
                from None
    return man, arrays


def _check_learner(man: dict, shown: str) -> None:
    """A Learner entry's manifest: its ``learner`` object and the index of its arrays."""
    lr = man.get("learner")
    if not isinstance(lr, dict) or not isinstance(lr.get("arrays"), dict) or not isinstance(lr.get("modules"), dict):
        raise Flow1InputError(f"{shown}: {MANIFEST}: a learner entry without its 'learner' object")
    for key, what in lr["arrays"].items():
        if not (isinstance(key, str) and _LEARNER_ARRAY.match(key) and isinstance(what, dict)
                and what.get("what") in ("batch", "upstream", "weight", "optim")):
            raise Flow1InputError(f"{shown}: {MANIFEST}: learner array {one_line(str(key))[:40]!r} is not described")
    for key in ("config", "optimizers"):
        if not isinstance(lr.get(key, {}), dict):
            raise Flow1InputError(f"{shown}: {MANIFEST}: the learner's {key!r} is not an object")


def plain_values(v: Any, strict: bool = False) -> Any:
    """``v`` as plain JSON values (dicts with str keys, lists, str, int, float, bool, None;
    numpy and torch scalars as numbers). A value that is none of those: None with ``strict``
    (the whole value is refused), else its ``str``."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else str(v)
    if isinstance(v, (list, tuple)):
        out = [plain_values(x, strict) for x in v]
        return None if strict and any(x is None and y is not None for x, y in zip(out, v)) else out
    if isinstance(v, dict):
        if strict and not all(isinstance(k, str) for k in v):
            return None
        out = {str(k): plain_values(x, strict) for k, x in v.items()}
        return None if strict and any(out[str(k)] is None and x is not None for k, x in v.items()) else out
    scalar = isinstance(v, np.generic) or (callable(getattr(v, "numel", None)) and getattr(v, "ndim", 1) == 0)
    if scalar:
        try:
            return plain_values(v.item(), strict)
        except Exception:
            pass
    return None if strict else str(v)


def entry_heads(run_dir: "str | os.PathLike | Location") -> list[dict]:
    """What a report says of each complete entry: ``entry`` (``repro/<name>``), ``finding``,
    ``worker_index``, ``pid``, ``kind``, ``step``; damaged ones are left out (``flow1 replay``
    names what is wrong with one). Local run directories only."""
    d = Location(run_dir)
    if not d.local:
        return []
    out = []
    for name in entries(d)[:200]:
        try:
            man, _ = _manifest(os.path.join(d.path, REPRO_DIR, name))
        except Flow1InputError:
            continue
        out.append({"entry": f"{REPRO_DIR}/{name}", "finding": man.get("finding"), "kind": man.get("kind"),
                    "worker_index": man.get("worker_index"), "pid": man.get("pid"),
                    "step": (man.get("failure") or {}).get("step")})
    return out


def _manifest(p: str) -> tuple[dict, None]:
    path = os.path.join(p, MANIFEST)
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > MAX_MANIFEST_BYTES:
        raise Flow1InputError(f"{one_line(p)[:200]}: no readable manifest")
    try:
        with open(path, "rb") as fh:
            man = json.loads(fh.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise Flow1InputError(f"{one_line(p)[:200]}: manifest not JSON") from None
    if not isinstance(man, dict):
        raise Flow1InputError(f"{one_line(p)[:200]}: manifest not an object")
    return man, None
