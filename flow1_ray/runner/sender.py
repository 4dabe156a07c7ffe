"""Fire-and-forget sends from an EnvRunner with a bounded number of calls in flight.

The run's hub (which holds the Recorder) is created with 3x ``max_pending_calls`` (a
runner's events and states share it), a StateClusterer of its own with ``max_pending_calls``;
Ray enforces it per calling process and raises ``PendingCallsLimitExceeded`` on the caller's
side when that many calls are still queued. The sender then drops the batch and counts it,
so a slow Recorder costs the runner nothing but the count. Events found before the run is
reachable (the first samples, or while the Recorder restarts) wait in a small bounded list.
"""

from __future__ import annotations

import time
from typing import Any, Callable

MAX_WAITING_EVENTS = 1000
LOOKUP_RETRY_S = 2.0


class Sender:
    def __init__(self, source: str, lookup: Callable[[], Any], worker_index: int | None = None,
                 method: str = "ingest") -> None:
        """``method``: the target's method that takes a batch (``ingest`` for events,
        ``ingest_states`` for sampled states)."""
        self.source = source
        self.method = method
        self.worker_index = worker_index
        self._lookup = lookup
        self._handle: Any = None
        self._last_lookup = -LOOKUP_RETRY_S
        self.waiting: list[dict] = []
        self.dropped = 0            # batches (or events that never found the run) dropped
        self._reported_dropped = 0

    @property
    def has_news(self) -> bool:
        return bool(self.waiting) or self.dropped != self._reported_dropped

    def _target(self) -> Any:
        if self._handle is None and time.monotonic() - self._last_lookup >= LOOKUP_RETRY_S:
            self._last_lookup = time.monotonic()
            try:
                self._handle = self._lookup()
            except Exception:
                self._handle = None
        return self._handle

    def reachable(self) -> bool:
        """Whether the target is known (looked up again at most every LOOKUP_RETRY_S)."""
        return self._target() is not None

    def send(self, events: list[dict]) -> bool:
        """Queue ``events`` and try one ``ingest`` call; True when a call went out."""
        self.waiting.extend(events)
        if len(self.waiting) > MAX_WAITING_EVENTS:
            self.dropped += len(self.waiting) - MAX_WAITING_EVENTS
            del self.waiting[MAX_WAITING_EVENTS:]
        ok = self.call({"events": self.waiting})
        if ok is not None:  # sent or dropped: either way these events are done with
            self.waiting = []
        return bool(ok)

    def call(self, payload: dict) -> bool | None:
        """One fire-and-forget ``ingest`` call with ``payload`` plus the source and the drop
        count. None when the target is not reachable yet (the payload is kept by the
        caller); False when the call was dropped (counted); True when it went out."""
        import ray

        handle = self._target()
        if handle is None:
            return None
        batch = {"source": self.source, "worker_index": self.worker_index, "dropped": self.dropped, **payload}
        try:
            getattr(handle, self.method).remote(batch)
        except ray.exceptions.PendingCallsLimitExceeded:  # the actor is behind: drop, count
            self.dropped += 1
            return False
        except Exception:
            self.dropped += 1
            self._handle = None  # look it up again
            return False
        self._reported_dropped = self.dropped
        return True
