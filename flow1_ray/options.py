"""Flow1Callbacks options, with their defaults in one place."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .clustering.backends import BACKENDS

STALL_ACTIONS = ("report", "kill")
FAIL_ACTIONS = ("report", "checkpoint", "stop", "checkpoint+stop")


@dataclass(frozen=True)
class Flow1Options:
    output_dir: str = ""                 # default: $FLOW1_OUTPUT_DIR or ./flow1_runs
    run_id: str = ""                     # default: <UTC time>-<random>
    heartbeat_interval_s: float = 1.0    # probes' summary period; watchdogs write at least this often
    probe_interval_s: float = 0.2        # each node probe reads every lock file this often
    stall_timeout_s: float = 30.0        # a busy runner with no step for this long is stalled
    stall_action: str = "report"         # or "kill": end the stalled process so Ray restarts it
    sample_rate: float = 0.1             # share of episodes whose every step is contract-checked (the most) ...
    check_budget: float = 0.01           # ... lowered so those checks take <= this share of sample() time (0: fixed)
    min_sample_rate: float = 0.01        # ... never below this share
    max_pending_calls: int = 4           # fire-and-forget sends in flight per runner; more are dropped
    flush_interval_s: float = 2.0        # Recorder writes Parquet parts this often
    print_events: bool = True            # the driver prints new log lines after each iteration
    get_timeout_s: float = 2.0           # every ray.get of the driver waits at most this long
    thresholds: dict = field(default_factory=dict)
    # state-cluster x action maps (the StateClusterer)
    state_actions: bool = True           # sample (state, action) pairs and cluster them
    audit_reward: bool = False           # REWARD_UNEARNED live: one sub-env of the first training runner
    state_sample_rate: float = 0.25      # share of sampled env steps sent to the clusterer
    state_send_interval_s: float = 2.0   # a runner sends its sampled states at most this often
    n_clusters: int = 30
    clusterer_backend: str = "auto"      # "auto" | "cuml" | "torch" | "sklearn"
    clusterer_num_gpus: float | None = None  # None: a 0.1 share of a GPU if one is free, else CPU
    heatmap_every: int = 10              # a snapshot (cluster rows, events, heatmap PNG) every N iterations ...
    heatmap_budget: float = 0.01         # ... spaced so they take <= this share of a core (0: every N iterations)
    # the learner side (the learner curves per RLModule; gradients and dormant units on every Learner)
    learner_tracing: bool = True         # wrap each Learner's compute_gradients (no change to the algorithm)
    grad_every: int = 50                 # trace one update in this many (and at once after a return drop)
    snapshots_max: int = 5               # learner snapshots (batch + per-layer norms) kept per run ...
    snapshot_rows: int = 4096            # ... at most this many rows per module ...
    snapshot_max_mb: float = 64.0        # ... and this many MB each
    loss_plateau_iters: int = 10         # a snapshot when a module's total loss made no new low for this long
    on_fail: str = "report"              # "checkpoint" | "stop" | "checkpoint+stop": act on the first FAIL
    checkpoint_every: int = 0            # > 0: a checkpoint every this many iterations in RUN_DIR/checkpoints/
    checkpoints_kept: int = 3            # ... the newest this many kept (flow1 whatif branches from before a symptom)
    whatif: bool = False                 # the first finding that advises knobs launches flow1 whatif beside the run ...
    whatif_seeds: int = 3                # ... this many seeds a branch ...
    whatif_iterations: int = 5           # ... of this many iterations ...
    whatif_parallel: int = 1             # ... this many branch runs at once (each a Ray task of 1 CPU, when free) ...
    whatif_max: int = 1                  # ... at most this many what-ifs per run
    # the driver watchdog (flow1_ray/driver/watchdog.py): a build or a train() that never returns
    driver_watch: bool = True
    startup_timeout_s: float = 15.0      # build_algo() waiting this long on unplaceable actors is named
    driver_stall_factor: float = 5.0     # train() silent for this x the median iteration ...
    driver_stall_floor_s: float = 120.0  # ... and at least this long is DRIVER_STALLED
    stop_timeout_s: float = 30.0         # algo.stop() blocked this long is STOP_STALLED (with its stack)

    def __post_init__(self) -> None:
        if self.stall_action not in STALL_ACTIONS:
            raise ValueError(f"stall_action must be one of {STALL_ACTIONS}, got {self.stall_action!r}")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], got {self.sample_rate}")
        if not 0.0 <= self.check_budget < 1.0 or not 0.0 <= self.min_sample_rate <= 1.0:
            raise ValueError(f"check_budget must be in [0, 1) and min_sample_rate in [0, 1], got "
                             f"{self.check_budget}, {self.min_sample_rate}")
        for name in ("heartbeat_interval_s", "probe_interval_s", "stall_timeout_s", "flush_interval_s",
                     "startup_timeout_s", "driver_stall_factor", "driver_stall_floor_s", "stop_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if not 0.0 <= self.state_sample_rate <= 1.0:
            raise ValueError(f"state_sample_rate must be in [0, 1], got {self.state_sample_rate}")
        if self.clusterer_backend not in BACKENDS:
            raise ValueError(f"clusterer_backend must be one of {BACKENDS}, got {self.clusterer_backend!r}")
        if not 0.0 <= self.heatmap_budget < 1.0:
            raise ValueError(f"heatmap_budget must be in [0, 1), got {self.heatmap_budget}")
        if self.n_clusters < 1 or self.heatmap_every < 1:
            raise ValueError(f"n_clusters and heatmap_every must be >= 1, got {self.n_clusters}, "
                             f"{self.heatmap_every}")
        if self.state_send_interval_s < 0:
            raise ValueError(f"state_send_interval_s must be >= 0, got {self.state_send_interval_s}")
        if self.on_fail not in FAIL_ACTIONS:
            raise ValueError(f"on_fail must be one of {FAIL_ACTIONS}, got {self.on_fail!r}")
        if self.grad_every < 1 or self.snapshots_max < 0 or self.snapshot_rows < 1:
            raise ValueError(f"grad_every and snapshot_rows must be >= 1 and snapshots_max >= 0, got "
                             f"{self.grad_every}, {self.snapshot_rows}, {self.snapshots_max}")
        if min(self.whatif_seeds, self.whatif_iterations, self.whatif_parallel) < 1 or self.whatif_max < 0:
            raise ValueError(f"whatif_seeds, whatif_iterations and whatif_parallel must be >= 1 and whatif_max >= 0, "
                             f"got {self.whatif_seeds}, {self.whatif_iterations}, {self.whatif_parallel}, "
                             f"{self.whatif_max}")
        if self.checkpoint_every < 0 or self.checkpoints_kept < 1:
            raise ValueError(f"checkpoint_every must be >= 0 and checkpoints_kept >= 1, got {self.checkpoint_every}, "
                             f"{self.checkpoints_kept}")
        if self.clusterer_num_gpus is not None and self.clusterer_num_gpus < 0:
            raise ValueError(f"clusterer_num_gpus must be >= 0 or None, got {self.clusterer_num_gpus}")

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
