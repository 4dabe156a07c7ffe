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
    output_dir: str = ""
    """The folder that holds the run directories: a local path or a filesystem URI
    (``s3://bucket/prefix``...). Empty: ``$FLOW1_OUTPUT_DIR``, else ``./flow1_runs``."""
    run_id: str = ""
    """The run directory's name. Empty: ``<UTC time>-<random>``, e.g. ``20261205-205734-17b562``."""
    heartbeat_interval_s: float = 1.0
    """Each node probe sends the hub a summary this often; the runners' watchdogs write their lock file's
    header at least this often."""
    probe_interval_s: float = 0.2
    """Each node probe tries every lock file of its node this often (a death is named within about one
    period)."""
    stall_timeout_s: float = 30.0
    """A runner inside ``sample()`` (a Learner inside an update) with no step for this long is stalled."""
    stall_action: str = "report"
    """``"report"``: name the stall; ``"kill"``: also end the stalled process so that Ray restarts it."""
    sample_rate: float = 0.1
    """The share of episodes whose every step is contract-checked on the EnvRunners (the most; lowered to
    hold ``check_budget``)."""
    check_budget: float = 0.01
    """The share of ``sample()`` time the live contract checks may take: ``sample_rate`` is lowered to hold
    it (0: ``sample_rate`` fixed)."""
    min_sample_rate: float = 0.01
    """The lowest share of checked episodes ``check_budget`` may lower ``sample_rate`` to."""
    max_pending_calls: int = 4
    """Fire-and-forget sends in flight per runner (the hub takes 3x this per caller); a send beyond it is
    dropped and counted (SAMPLES_DROPPED)."""
    flush_interval_s: float = 2.0
    """The Recorder writes its Parquet parts this often (and within 0.5 s of a WARN, a FAIL or an
    iteration's metrics row)."""
    print_events: bool = True
    """The driver prints the new log lines after each iteration."""
    get_timeout_s: float = 2.0
    """Every ``ray.get`` of the driver waits at most this long (a few calls at start and stop wait a
    multiple of it)."""
    thresholds: dict = field(default_factory=dict)
    """Overrides of rule thresholds by name (see the thresholds reference, ``configs/thresholds.json``); an
    unknown name is an error."""
    # state-cluster x action maps (the StateClusterer)
    state_actions: bool = True
    """Sample (state, action) rows on the training runners and cluster them into state-cluster x action
    maps."""
    alloc_sites: bool = True
    """When a runner's RSS grows (4 MB past its first minute, and the leak rule's trend test holds on it), trace
    its Python allocations for ~5 s
    (tracemalloc, 4-5x the runner's CPU a step meanwhile; at most 3 windows, 30 minutes apart) to tell whose code keeps the memory: the env's, the
    user's, the framework's or flow1's (MEMORY_LEAK_SUSPECTED vs MEMORY_GROWTH_NOT_ENV). Off: a growing
    RSS is judged without saying where. Never on while the process traces its allocations already."""
    flight_recorder: bool = True
    """Keep, per sub-env of each EnvRunner (of a multi-agent env: per agent), what replays its life: each
    reset's seed and the env's random state before it, the actions since, a digest of each observation and
    reward. On an env crash, a hang or a NaN the sub-env's record is sent to the run directory's ``repro/``
    (``flow1 replay`` plays it again)."""
    flight_mb: float = 8.0
    """The flight recorder's rows per EnvRunner, in MB: an episode longer than they hold keeps its last steps
    and its dump says the replay cannot start from its reset."""
    repro_max: int = 20
    """``repro/`` entries kept per run (the EnvRunners' and the Learners' dumps); repeats of one kind (code,
    worker) keep the first and the latest. 0: none is made."""
    pipeline_every_steps: int = 50_000
    """The PIPELINE rules live (what the RLModule sees and emits, as ``flow1 check --config`` judges it): each
    single-agent training runner records one window of 256 module forward passes at its first ``sample()``
    and then one every this many of its env steps, and judges it. 0: off."""
    audit_reward: bool = False
    """REWARD_UNEARNED live: audit sub-env 0 of the first training runner for reward the env changes
    whatever the action."""
    state_sample_rate: float = 0.25
    """The share of sampled env steps kept as state rows for the clusterer."""
    state_send_interval_s: float = 2.0
    """A runner sends its sampled state rows at most this often."""
    n_clusters: int = 30
    """The number of state clusters per RLModule at each snapshot."""
    clusterer_backend: str = "auto"
    """The KMeans engine: ``"auto"`` | ``"cuml"`` | ``"torch"`` | ``"sklearn"`` (``auto``: cuML or torch on
    a GPU share, else scikit-learn)."""
    clusterer_num_gpus: float | None = None
    """The GPU share of the state clusterer's own actor. None: 0.1 of a GPU when one is free, else the
    clusterer runs on CPU inside the hub."""
    heatmap_every: int = 10
    """A state snapshot (cluster rows, events, a heatmap PNG) every this many iterations, and one at the end
    of the run."""
    heatmap_budget: float = 0.01
    """Snapshots are spaced so that they take at most this share of a core (0: every ``heatmap_every``
    iterations whatever they cost)."""
    # the learner side (the learner curves per RLModule; gradients and dormant units on every Learner)
    learner_tracing: bool = True
    """Wrap each Learner's ``compute_gradients`` to trace per-layer gradients and dormant units (no change
    to the algorithm), and to check every update's losses and gradients for NaN/inf before the optimizer
    steps (LEARNER_NONFINITE; the first such update's state goes to ``repro/`` for ``flow1 replay``)."""
    grad_every: int = 50
    """Trace one update in this many (and the next update at once after a return drop or a learner
    snapshot)."""
    snapshots_max: int = 5
    """Learner snapshots (a train batch and the per-layer gradient norms) kept per run."""
    snapshot_rows: int = 4096
    """At most this many rows per module in a learner snapshot."""
    snapshot_max_mb: float = 64.0
    """At most this many MB per learner snapshot."""
    loss_plateau_iters: int = 10
    """A learner snapshot is saved when a module's total loss made no new low for this many iterations."""
    on_fail: str = "report"
    """What the first FAIL does: ``"report"`` | ``"checkpoint"`` (save the algorithm) | ``"stop"``
    (``result["done"] = True``) | ``"checkpoint+stop"``."""
    checkpoint_every: int = 0
    """When > 0: save the algorithm every this many iterations to ``RUN_DIR/checkpoints/`` (0: off)."""
    checkpoints_kept: int = 3
    """The newest this many rolling checkpoints are kept (``flow1 whatif`` branches from one taken before a
    symptom)."""
    whatif: bool = False
    """The first iteration whose findings advise knobs launches ``flow1 whatif`` beside the run."""
    whatif_seeds: int = 3
    """Seeds per branch of a live what-if."""
    whatif_iterations: int = 5
    """Iterations per branch run of a live what-if."""
    whatif_parallel: int = 1
    """Branch runs of a live what-if at once (each a Ray task of 1 CPU, when one is free)."""
    whatif_max: int = 1
    """At most this many live what-ifs per run."""
    # the driver watchdog (flow1_ray/driver/watchdog.py): a build or a train() that never returns
    driver_watch: bool = True
    """The driver watchdog: actors that cannot be placed while the Algorithm builds, a ``train()`` or
    ``algo.stop()`` that never returns."""
    startup_timeout_s: float = 15.0
    """An Algorithm build still waiting after this long on actors that cannot be placed is named
    (ACTOR_UNPLACEABLE)."""
    driver_stall_factor: float = 5.0
    """DRIVER_STALLED: a ``train()`` call that has not returned after this many times the median iteration
    (and ``driver_stall_floor_s``), nothing moving for half that time."""
    driver_stall_floor_s: float = 120.0
    """DRIVER_STALLED: the least time a ``train()`` call must have run (see ``driver_stall_factor``)."""
    stop_timeout_s: float = 30.0
    """An ``algo.stop()`` blocked this long is STOP_STALLED (with its stack)."""

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
        if self.pipeline_every_steps < 0:
            raise ValueError(f"pipeline_every_steps must be >= 0 (0: off), got {self.pipeline_every_steps}")
        if not 0.0 <= self.state_sample_rate <= 1.0:
            raise ValueError(f"state_sample_rate must be in [0, 1], got {self.state_sample_rate}")
        if self.clusterer_backend not in BACKENDS:
            raise ValueError(f"clusterer_backend must be one of {BACKENDS}, got {self.clusterer_backend!r}")
        if not 0.0 <= self.heatmap_budget < 1.0:
            raise ValueError(f"heatmap_budget must be in [0, 1), got {self.heatmap_budget}")
        if self.n_clusters < 1 or self.heatmap_every < 1:
            raise ValueError(f"n_clusters and heatmap_every must be >= 1, got {self.n_clusters}, "
                             f"{self.heatmap_every}")
        if not 0.0 < self.flight_mb <= 1024.0 or self.repro_max < 0:
            raise ValueError(f"flight_mb must be in (0, 1024] and repro_max >= 0, got {self.flight_mb}, "
                             f"{self.repro_max}")
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
