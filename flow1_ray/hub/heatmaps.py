"""The asynchronous heatmap writer: PNGs rendered and written on their own thread.

The Recorder's request path only puts a job (counts, labels, verdicts, each cluster's
short description and, for an image env, its thumbnail: a few kB to ~100 kB) on a
bounded queue; rendering with matplotlib and the file I/O happen here. A slow disk or a
slow render fills the queue, and then new jobs are dropped and counted, never waited
for. The thread runs in the background class of the scheduler (``priority.py``). Each PNG is written under a temporary name and renamed, so a reader never sees half
an image.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..rundir.store import Location
from .priority import lower_this_thread

MAX_QUEUED = 8


def render(job: dict, run_dir: "Location | str") -> Location:
    """Render one heatmap job to ``run_dir / job["path"]`` (a local path or a URI: the PNG
    is drawn into a local temporary file, then written whole)."""
    from ..clustering.heatmap import draw_heatmap

    counts = np.asarray(job["counts"])
    out = Location(run_dir)
    for part in str(job["path"]).split("/"):
        out = out / part
    fd, tmp = tempfile.mkstemp(suffix=".png", prefix="flow1-heatmap-")
    os.close(fd)
    try:
        draw_heatmap(tmp, counts, list(job["labels"]), list(job["verdicts"]),
                     job.get("title") or f"state cluster x action ({job.get('backend', '')}, {int(counts.sum())} states)",
                     job.get("descriptions"), job.get("thumbnails"))
        out.parent_dir().mkdir()
        out.write_bytes(Path(tmp).read_bytes())
    finally:
        os.unlink(tmp)
    return out


class HeatmapWriter:
    def __init__(self, run_dir: str | os.PathLike, max_queued: int = MAX_QUEUED) -> None:
        self.run_dir = Location(run_dir)
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.written = 0
        self.dropped = 0
        self.failed = 0
        self.last_error = ""
        self.priority = ""
        self.last_render_cpu_s = 0.0   # the last PNG's CPU time (this thread's): the snapshot cadence's cost
        self._warm = False

    def warm_up(self) -> None:
        """Start the thread now and let it import matplotlib (~0.4 s of CPU, once) in the
        background class, so the run's first heatmap does not pay for it mid-run."""
        self._warm = True
        self._ensure_thread()

    def submit(self, job: dict) -> bool:
        """Queue a job without waiting; False (and counted) when the queue is full."""
        self._ensure_thread()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="flow1-heatmaps")
                self._thread.start()

    def _loop(self) -> None:
        self.priority = lower_this_thread()
        if self._warm:
            try:
                import matplotlib

                matplotlib.use("Agg", force=False)
                import matplotlib.pyplot  # noqa: F401
            except Exception:  # the first render will say what is wrong
                pass
        while True:
            job = self._queue.get()
            try:
                c0 = time.thread_time()
                render(job, self.run_dir)
                self.last_render_cpu_s = time.thread_time() - c0
                self.written += 1
            except Exception as e:  # a bad job or a full disk: count it, go on
                self.failed += 1
                self.last_error = f"{type(e).__name__}: {e}"[:300]
            finally:
                self._queue.task_done()

    def drain(self, timeout_s: float) -> bool:
        """Wait until every queued job is written (the run's close); False on timeout."""
        q = self._queue
        with q.all_tasks_done:
            return q.all_tasks_done.wait_for(lambda: q.unfinished_tasks == 0, timeout=timeout_s)

    def status(self) -> dict[str, Any]:
        return {"written": self.written, "dropped": self.dropped, "failed": self.failed,
                "queued": self._queue.qsize(), "last_error": self.last_error,
                "priority": self.priority, "last_render_cpu_s": round(self.last_render_cpu_s, 4)}
