"""The names a user reads and a second process relies on, defined once.

Run-directory tables and their columns, the key flow1 adds to RLlib's result dict, the
``flow1/...`` metric names Tune flattens it to, RLlib's module-id constants, worker states.
The writers (callbacks, learner watch, Recorder), the three renderers (Markdown/JSON, HTML,
panel) and the Prometheus exporter all take them from here. No imports: any process,
Ray or not, can read it.
"""

from __future__ import annotations

# --- RLlib's names (ray.rllib.core: DEFAULT_MODULE_ID, ALL_MODULES; not imported so that
# Ray-free readers can use them) -------------------------------------------------------------
DEFAULT_MODULE_ID = "default_policy"
ALL_MODULES = "__all_modules__"

# --- the result dict ------------------------------------------------------------------------
#: flow1's section of each training result: ``result["flow1"]``, and per module in RLlib's
#: learner stats, ``result["learners"][module]["flow1"]`` (the learner tracing's numbers)
RESULT_KEY = "flow1"
METRIC_PREFIX = RESULT_KEY + "/"


def metric(*parts: str) -> str:
    """A metrics-table column / Tune key: ``metric("worker", "alive") == "flow1/worker/alive"``."""
    return METRIC_PREFIX + "/".join(parts)


WORKER_METRIC_PREFIX = metric("worker") + "/"
SAMPLES_DROPPED = metric("samples_dropped")
WATCHERS_OFF = metric("watchers_off")
DRIVER_MS = metric("driver_ms")
RETURN_EMA = metric("learner", "return_ema")
#: the metrics table's episodes completed so far (RLlib's num_episodes_lifetime) and the run's
#: metrics_num_episodes_for_smoothing: what the learning rules' data sufficiency counts
EPISODES, SMOOTHING_WINDOW = "episodes", "smoothing_window"
#: RLlib's evaluation runners' mean return, in the iterations that evaluated (TRAIN_EVAL_GAP)
EVAL_RETURN = "evaluation_return_mean"
MEMORY_NODE_PERCENT = metric("memory", "node_percent")
MEMORY_RUNNERS_RSS_MB = metric("memory", "runners_rss_mb")

# --- worker states (the monitor's table, result["flow1"]["worker"], Prometheus) ---------------
ALIVE, DEAD, STALLED, STOPPED = "alive", "dead", "stalled", "stopped"
WORKER_STATES = (ALIVE, DEAD, STALLED)         # what a live run counts and exports
WORKER_STATES_ALL = WORKER_STATES + (STOPPED,)
UNHEALTHY = (DEAD, STALLED)                    # an open incident

# --- a state cluster's verdicts that are not event codes (checks/states/state_action.py) -------------
VERDICT_OK, VERDICT_FIXATED = "OK", "FIXATED"

# --- the run directory ---------------------------------------------------------------------------
EVENTS_DIR = "events"          # events/part-*.parquet (flow1_ray.common.events.EVENT_SCHEMA)
METRICS_DIR = "metrics"        # one row per training iteration: flow1/* keys, env steps, return
CLUSTERS_DIR = "clusters"      # one row per state cluster and snapshot
HEATMAPS_DIR = "heatmaps"      # P(action | cluster) images
EVIDENCE_DIR = "evidence"      # a finding's evidence as a file (REWARD_UNEARNED's diff of the env's state)
LEARNER_DIR = "learner"        # LEARNER_COLUMNS below
SNAPSHOTS_DIR = "snapshots"    # train batches and gradient norms saved after a finding
CHECKPOINTS_DIR = "checkpoints"  # checkpoint_every: iter<N>/ (algo.save_to_path), the newest kept
WHATIF_DIR = "whatif"          # flow1 whatif: <UTC stamp>/ verdicts.json, verdicts.md, curves.parquet
REPRO_DIR = "repro"            # flight-recorder dumps: <entry>/ manifest.json, arrays.npz (flow1 replay)
DIAGNOSIS_JSON = "diagnosis.json"  # the diagnosis (flow1_ray.diagnosis.diagnose; docs: guides/diagnosis.md)


def repro_entry_name(kind: str, worker_index: int, pid: int, count: int, code: str) -> str:
    """A ``repro/`` entry's name: ``train3-pid4242-001-env_crashed``, ``learner0-pid77-001-learner_nonfinite``."""
    return f"{kind}{int(worker_index)}-pid{int(pid)}-{int(count):03d}-{code.lower()}"


#: a Learner's NaN guard (learner/nan_guard.py) logs under ``learners/<module>/flow1/``: the
#: updates whose loss / gradients were NaN/inf, and its dump's name as one number (the metrics
#: carry numbers only; reduced by max, so the rank, pid and count of one dump stay together)
NONFINITE_LOSS, NONFINITE_GRAD, LEARNER_REPRO_ID = "nonfinite_loss", "nonfinite_grad", "repro_id"
_PID_SPAN, _SEQ_SPAN = 2 ** 22, 1000   # Linux pids < 2**22; a Learner dumps < 1000 times


def learner_repro_id(rank: int, pid: int, count: int) -> float:
    return float((int(rank) * _PID_SPAN + int(pid) % _PID_SPAN) * _SEQ_SPAN + int(count) % _SEQ_SPAN)


def learner_repro_entry(repro_id: float, code: str) -> str | None:
    """The entry :func:`learner_repro_id` names (``repro/`` relative), or None for a value that is not one."""
    try:
        n = int(repro_id)
    except (TypeError, ValueError, OverflowError):
        return None
    if n <= 0 or n != repro_id:
        return None
    rest, count = divmod(n, _SEQ_SPAN)
    rank, pid = divmod(rest, _PID_SPAN)
    return f"{REPRO_DIR}/{repro_entry_name('learner', rank, pid, count, code)}"

#: a what-if verdict on one advice (``verdicts.json``'s "verdict"): the judge writes them, the
#: report and the diagnosis read them
WHATIF_HELD, WHATIF_NOT_HELD, WHATIF_HARMFUL, WHATIF_INCONCLUSIVE, WHATIF_NOT_IN_EFFECT = (
    "held", "did not hold", "harmful", "inconclusive", "knob not in effect")
LOG_FILE = "flow1.log"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"

#: the learner table: one row per module ("module": its curves), per layer ("grad") and per
#: activation layer ("activation") and iteration; columns a row does not have are null.
#: Rules add the columns their View charts (flow1_ray.driver.learner_watch.rule_columns).
ENTROPY, ENTROPY_RATIO, MEAN_KL = "entropy", "entropy_ratio", "mean_kl_loss"
POLICY_LOSS, VF_LOSS, TOTAL_LOSS = "policy_loss", "vf_loss", "total_loss"
LEARNING_RATE = "default_optimizer_learning_rate"
GRAD_NORM, GRAD_RMS, DORMANT_SHARE = "grad_norm", "grad_rms", "dormant_share"
VF_PI_TRUNK_RATIO, VF_PI_HEAD_RATIO = "vf_pi_trunk_ratio", "vf_pi_head_ratio"
KIND_MODULE, KIND_GRAD, KIND_ACTIVATION = "module", "grad", "activation"
#: a "grad" or "activation" row's place in its module's network order (learner.layers.layer_order):
#: absent in run directories written before it, null for a layer the order does not know
LAYER_INDEX = "layer_index"
LEARNER_COLUMNS = ("iteration", "module_id", "kind", "layer", ENTROPY, ENTROPY_RATIO, MEAN_KL, POLICY_LOSS,
                   VF_LOSS, TOTAL_LOSS, LEARNING_RATE, GRAD_NORM, VF_PI_TRUNK_RATIO, VF_PI_HEAD_RATIO, GRAD_RMS,
                   DORMANT_SHARE, LAYER_INDEX)
