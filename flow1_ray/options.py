"""Flow1Callbacks options, with their defaults in one place."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

NAMESPACE = "flow1"
STALL_ACTIONS = ("report", "kill")


@dataclass(frozen=True)
class Flow1Options:
    output_dir: str = ""                 # default: $FLOW1_OUTPUT_DIR or ./flow1_runs
    run_id: str = ""                     # default: <UTC time>-<random>
    heartbeat_interval_s: float = 1.0    # watchdog write period; probes' summary period
    probe_interval_s: float = 0.2        # each node probe reads every lock file this often
    stall_timeout_s: float = 30.0        # a busy runner with no step for this long is stalled
    stall_action: str = "report"         # or "kill": end the stalled process so Ray restarts it
    sample_rate: float = 0.1             # share of episodes whose every step is contract-checked
    max_pending_calls: int = 4           # fire-and-forget sends in flight per runner; more are dropped
    flush_interval_s: float = 2.0        # Recorder writes Parquet parts this often
    print_events: bool = True            # the driver prints new log lines after each iteration
    get_timeout_s: float = 2.0           # every ray.get of the driver waits at most this long
    thresholds: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stall_action not in STALL_ACTIONS:
            raise ValueError(f"stall_action must be one of {STALL_ACTIONS}, got {self.stall_action!r}")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], got {self.sample_rate}")
        for name in ("heartbeat_interval_s", "probe_interval_s", "stall_timeout_s", "flush_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")

    def resolved_output_dir(self) -> str:
        return self.output_dir or os.environ.get("FLOW1_OUTPUT_DIR") or os.path.join(os.getcwd(), "flow1_runs")

    def with_overrides(self, **opts: Any) -> "Flow1Options":
        known = {f.name for f in fields(self)}
        unknown = set(opts) - known
        if unknown:
            raise TypeError(f"unknown Flow1Callbacks option(s) {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **opts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
