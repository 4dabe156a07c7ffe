"""The hub's side of the flight recorder: ``repro/`` entries sent by the runners, written on
the driver's node (a runner on another node sends its dump; nothing is left on its disk).
Bounded in count per run (``repro_max``) and in bytes per entry; of repeated incidents of one
kind (a code on one worker) the first and the latest are kept: each new one replaces the
previous latest."""

from __future__ import annotations

import shutil
import threading

from ..common.schema import REPRO_DIR
from ..rundir.repro import write_entry
from ..rundir.store import Location


class ReproStore:
    def __init__(self, run_dir: str, max_entries: int) -> None:
        self.run_dir = run_dir
        self.max_entries = max(0, int(max_entries))
        self._kinds: dict[str, list[str]] = {}   # kind -> [first, latest]
        self.written = 0
        self.refused = 0
        self._lock = threading.Lock()

    def add(self, name: str, arrays: dict, manifest: dict, kind: str) -> str | None:
        """Write one entry; its path, or None when refused (the bounds, or not writable)."""
        with self._lock:
            kept = self._kinds.get(kind, [])
            total = sum(len(v) for v in self._kinds.values())
            replace = kept[1] if len(kept) == 2 else None
            if replace is None and total >= self.max_entries:
                self.refused += 1
                return None
        try:
            d = write_entry(self.run_dir, name, arrays, manifest)
        except Exception:
            d = None
        if d is None:
            self.refused += 1
            return None
        with self._lock:
            kept = self._kinds.setdefault(kind, [])
            if len(kept) == 2:
                old = kept.pop()
                self._remove(old)
            kept.append(name)
            self.written += 1
        return str(d)

    def _remove(self, name: str) -> None:
        d = Location(self.run_dir) / REPRO_DIR / name
        if d.local:
            shutil.rmtree(d.path, ignore_errors=True)

    def status(self) -> dict:
        return {"written": self.written, "refused": self.refused,
                "kept": sum(len(v) for v in self._kinds.values())}
