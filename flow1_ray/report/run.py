"""A run directory read back as a :class:`Report`, with no Ray and no training code."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import Flow1InputError
from ..events import table_to_events
from ..store import LOG_FILE, load_events, load_metrics
from .model import Report


def load_run_report(run_dir: str | os.PathLike) -> Report:
    """Events and the last metric row of a run directory, as a Report."""
    d = Path(run_dir)
    if not d.is_dir():
        raise Flow1InputError(f"run directory not found: {d}")
    if not (d / "events").is_dir() and not (d / LOG_FILE).exists():
        raise Flow1InputError(f"{d} is not a flow1 run directory (no events/ and no {LOG_FILE})")
    events = table_to_events(load_events(d))
    summary: dict = {"run_dir": str(d)}
    if (d / "metrics").is_dir():
        try:
            rows = load_metrics(d).to_pylist()
        except Flow1InputError:
            rows = []
        if rows:
            last = max(rows, key=lambda r: r.get("iteration") or 0)
            summary.update({"iterations": last.get("iteration"), "env_steps": last.get("env_steps"),
                            "episode_return_mean": last.get("episode_return_mean"),
                            "workers": {k.split("/")[-1]: v for k, v in last.items() if k.startswith("flow1/worker/")},
                            "samples_dropped": last.get("flow1/samples_dropped")})
    return Report(target=d.name, events=events, summary=summary)
