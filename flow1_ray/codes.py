"""Every module name, status and finding code of flow1_ray, defined once.

Codes are stable machine identifiers: tests, CI gates and users' dashboards match on them,
so they are plain strings declared here and nowhere else. Each code is registered with its
module and default status in :data:`CATALOGUE`; a check may raise a code at a stricter
status than its default (e.g. ENTROPY_COLLAPSE turns FAIL below its hard floor).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- statuses ---------------------------------------------------------------------------
PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
STATUSES = (PASS, WARN, FAIL)
STATUS_RANK = {PASS: 0, WARN: 1, FAIL: 2}


def worst(statuses) -> str:
    """The most severe status of an iterable (PASS for an empty one)."""
    best = PASS
    for s in statuses:
        if STATUS_RANK[s] > STATUS_RANK[best]:
            best = s
    return best


# --- modules ----------------------------------------------------------------------------
ENV_SPEC = "ENV_SPEC"
ACTION_PIPE = "ACTION_PIPE"
OBS_FLOW = "OBS_FLOW"
REWARD_STATS = "REWARD_STATS"
TRAIN_CURVES = "TRAIN_CURVES"
GRADIENT_FLOW = "GRADIENT_FLOW"
WORKER = "WORKER"
RESOURCE = "RESOURCE"
STATE_ACTION = "STATE_ACTION"
MEMORY = "MEMORY"
IMPORT_RESOLVE = "IMPORT_RESOLVE"
FLOW1 = "FLOW1"
MODULES = (
    ENV_SPEC, ACTION_PIPE, OBS_FLOW, REWARD_STATS, TRAIN_CURVES, GRADIENT_FLOW,
    WORKER, RESOURCE, STATE_ACTION, MEMORY, IMPORT_RESOLVE, FLOW1,
)


@dataclass(frozen=True)
class CodeSpec:
    """A catalogue entry: where a code belongs and how severe it is by default."""

    code: str
    module: str
    status: str
    trigger: str


CATALOGUE: dict[str, CodeSpec] = {}


def _code(code: str, module: str, status: str, trigger: str) -> str:
    CATALOGUE[code] = CodeSpec(code, module, status, trigger)
    return code


# The PASS row a clean module writes; its module is the module checked (hence "").
CHECKS_PASSED = _code("CHECKS_PASSED", "", PASS, "every check of a module passed; evidence has its statistics")

# --- ENV_SPEC ---------------------------------------------------------------------------
SPACE_INVALID = _code("SPACE_INVALID", ENV_SPEC, FAIL,
                      "Discrete n<=0, Box low>high, NaN/infinite bounds where not allowed, not a gymnasium space")
OBS_SHAPE_MISMATCH = _code("OBS_SHAPE_MISMATCH", ENV_SPEC, FAIL,
                           "a reset/step observation's shape differs from observation_space")
OBS_DTYPE_MISMATCH = _code("OBS_DTYPE_MISMATCH", ENV_SPEC, FAIL,
                           "a reset/step observation's type or dtype differs from observation_space")
REWARD_NOT_SCALAR = _code("REWARD_NOT_SCALAR", ENV_SPEC, FAIL,
                          "reward is not a Python/NumPy real scalar")
DONE_NOT_BOOL = _code("DONE_NOT_BOOL", ENV_SPEC, FAIL,
                      "terminated/truncated is not bool or np.bool_")
INFO_NOT_DICT = _code("INFO_NOT_DICT", ENV_SPEC, FAIL, "reset/step info is not a dict")
INFO_MUTATION_DETECTED = _code("INFO_MUTATION_DETECTED", ENV_SPEC, WARN,
                               "the same info dict is returned twice, or a returned info changes later")
OBS_ALIASED = _code("OBS_ALIASED", ENV_SPEC, WARN,
                    "a returned observation array is later modified in place by the env")
NONDETERMINISTIC_RESET = _code("NONDETERMINISTIC_RESET", ENV_SPEC, WARN,
                               "reset(seed=s) twice gives different observations")
EPISODE_NEVER_ENDS = _code("EPISODE_NEVER_ENDS", ENV_SPEC, WARN,
                           "no terminated/truncated within the budget extended 20x (at most 100,000 steps, 30 s); "
                           "an advisory when one ended after the budget")
STEP_DURATION_OUTLIER = _code("STEP_DURATION_OUTLIER", ENV_SPEC, WARN,
                              "p95 or max step time > 3x the median, above an absolute floor")
ENV_CRASHED = _code("ENV_CRASHED", ENV_SPEC, FAIL,
                    "reset/step raised an exception, or the env's process died (signal, exit) inside it")
ENV_HUNG = _code("ENV_HUNG", ENV_SPEC, FAIL,
                 "make/reset/step did not return within its timeout (flow1 check), with the env's stack")
# the multi-agent contract of RLlib's MultiAgentEnv (new API stack: MultiAgentEpisode.add_env_step)
MA_DICT_INVALID = _code("MA_DICT_INVALID", ENV_SPEC, FAIL,
                        "a multi-agent reset/step value is not a dict, or is keyed by an id that is not one of "
                        "the env's possible_agents (besides '__all__' in terminateds/truncateds, '__common__' "
                        "in infos)")
MA_ALL_DONE_MISSING = _code("MA_ALL_DONE_MISSING", ENV_SPEC, FAIL,
                            "terminateds has no '__all__' key, or every agent of the episode is done while "
                            "'__all__' stays False")
MA_AGENT_AFTER_DONE = _code("MA_AGENT_AFTER_DONE", ENV_SPEC, FAIL,
                            "an observation, reward or info for an agent after its own terminated/truncated "
                            "in the same episode")
MA_REWARD_MISSING = _code("MA_REWARD_MISSING", ENV_SPEC, FAIL,
                          "an agent acted and got its next observation but no reward entry")
MA_TRUNCATED_WITHOUT_OBS = _code("MA_TRUNCATED_WITHOUT_OBS", ENV_SPEC, FAIL,
                                 "an agent acted, then was truncated (its own flag or '__all__') without a "
                                 "last observation")
MA_REWARD_LOST = _code("MA_REWARD_LOST", ENV_SPEC, WARN,
                       "a non-zero reward for an agent before its first action of the episode, or under "
                       "'__all__': RLlib credits it to no action")

# --- OBS_FLOW ---------------------------------------------------------------------------
OBS_OUT_OF_BOUNDS = _code("OBS_OUT_OF_BOUNDS", OBS_FLOW, WARN,
                          "observation outside its space's bounds, or rejected by its space's contains()")
OBS_NAN_INF = _code("OBS_NAN_INF", OBS_FLOW, FAIL, "NaN or inf in an observation")
OBS_UNNORMALIZED_IMAGE = _code("OBS_UNNORMALIZED_IMAGE", OBS_FLOW, PASS,
                               "advisory: uint8 image observations in [0, 255] reach the model unscaled")
PRECISION_LOSS = _code("PRECISION_LOSS", OBS_FLOW, WARN,
                       "float64 -> float32 round trip loses more than the relative-error threshold")
OBS_DISTRIBUTION_DRIFT = _code("OBS_DISTRIBUTION_DRIFT", OBS_FLOW, WARN,
                               "KL between early and recent reset-observation histograms > threshold")

# --- ACTION_PIPE ------------------------------------------------------------------------
ACTION_OUT_OF_BOUNDS = _code("ACTION_OUT_OF_BOUNDS", ACTION_PIPE, WARN,
                             "policy actions outside the action space before clipping (or rejected by its contains())")
GRADIENT_VANISHING_RISK = _code("GRADIENT_VANISHING_RISK", ACTION_PIPE, WARN,
                                "d(final action)/d(raw output) through the squashing < threshold")
ACTION_CAST_WARNING = _code("ACTION_CAST_WARNING", ACTION_PIPE, WARN,
                            "action dtype, shape or value changed between the sender and env.step")

# --- REWARD_STATS -----------------------------------------------------------------------
REWARD_NAN = _code("REWARD_NAN", REWARD_STATS, FAIL, "NaN/inf reward")
REWARD_SPARSE = _code("REWARD_SPARSE", REWARD_STATS, PASS,
                      "advisory: non-zero reward ratio < threshold under random actions")
REWARD_SPIKES = _code("REWARD_SPIKES", REWARD_STATS, WARN,
                      "CV > 0.5 and rewards beyond 10x the median |non-zero reward| carry > 50% of the total |reward|")
REWARD_SCALE = _code("REWARD_SCALE", REWARD_STATS, WARN, "max |reward| < threshold")
REWARD_DROP = _code("REWARD_DROP", REWARD_STATS, WARN,
                    "recent mean episode return < 0.7 x the best block mean, and significant")

# --- TRAIN_CURVES / GRADIENT_FLOW (learner side; seed 004, checks/learner_curves.py) --------
# Each curve finding needs two independent signals (the seed's cross-check), and says the
# RLlib knob to turn with a value computed from the run's own config (checks/advice.py).
ENTROPY_COLLAPSE = _code("ENTROPY_COLLAPSE", TRAIN_CURVES, WARN,
                         "entropy / max entropy < 0.2 on 2 iterations (FAIL < 0.05) and falling steeply "
                         "(slope fit) or with the return stalled or dropped")
KL_TOO_LOW = _code("KL_TOO_LOW", TRAIN_CURVES, WARN,
                   "median KL < 0.005 over 5 iterations while the entropy stays near its maximum and the "
                   "return does not rise: updates do not move the policy")
KL_TOO_HIGH = _code("KL_TOO_HIGH", TRAIN_CURVES, WARN,
                    "median KL > 0.05 over 5 iterations, with the return stalled or the entropy falling steeply")
KL_SPIKE = _code("KL_SPIKE", TRAIN_CURVES, FAIL,
                 "one iteration's KL > 10x the running median (10x kl_target before 3 readings) and > 0.05")
POLICY_LOSS_STUCK = _code("POLICY_LOSS_STUCK", TRAIN_CURVES, WARN,
                          "|policy loss| < 1e-3 and KL < 5e-4 for 5 iterations: no effective policy gradient")
VALUE_DOMINATES = _code("VALUE_DOMINATES", TRAIN_CURVES, WARN,
                        "shared trunk (vf_share_layers): the value head's gradient into the shared layers "
                        ">= 100x the policy head's, and vf_loss_coeff x vf_loss > 3x |policy_loss|")
LR_DECAYED = _code("LR_DECAYED", TRAIN_CURVES, WARN,
                   "the learning rate fell below 10% of its first value while the policy stopped moving "
                   "(KL < 0.005) or the return stalled")
LEARNER_SNAPSHOT = _code("LEARNER_SNAPSHOT", TRAIN_CURVES, PASS,
                         "the latest train batch and per-layer gradient norms were saved under snapshots/ "
                         "(after a return drop or a loss plateau)")
GRADIENT_VANISHING = _code("GRADIENT_VANISHING", GRADIENT_FLOW, WARN,
                           "a layer's gradient RMS < 1e-3 x the median layer's of its own stack, on 3 traces")
GRADIENT_EXPLODING = _code("GRADIENT_EXPLODING", GRADIENT_FLOW, WARN,
                           "a module's gradient norm > 100x its own running median (FAIL: NaN/inf gradients)")
GRADIENT_ZERO = _code("GRADIENT_ZERO", GRADIENT_FLOW, FAIL,
                      "a trained layer's gradient exactly 0 on 2 traces in a row (a broken graph), naming the layer")
DORMANT_UNITS = _code("DORMANT_UNITS", GRADIENT_FLOW, WARN,
                      "loss of plasticity: > 50% of a hidden layer's units dormant (normalised mean "
                      "|activation| <= 0.025, Sokar et al. 2023) on 3 traces")
GUARD_ACTION = _code("GUARD_ACTION", FLOW1, PASS,
                     "on_fail: flow1 saved a checkpoint and/or stopped the run because of a FAIL")

# --- WORKER / RESOURCE / MEMORY ---------------------------------------------------------
WORKER_DIED = _code("WORKER_DIED", WORKER, FAIL, "an EnvRunner's lock was released: its process is gone")
WORKER_STALLED = _code("WORKER_STALLED", WORKER, FAIL, "lock held but no heartbeat for stall_timeout_s")
LEARNER_DIED = _code("LEARNER_DIED", WORKER, FAIL, "a Learner actor's lock was released: its process is gone")
LEARNER_STALLED = _code("LEARNER_STALLED", WORKER, FAIL,
                        "a Learner actor inside update() made no gradient step for stall_timeout_s")
NODE_LOST = _code("NODE_LOST", WORKER, FAIL,
                  "a node's probe stopped answering and its raylet does not accept connections: its runners "
                  "are gone (named before Ray's health check declares the node dead)")
NO_SAMPLES = _code("NO_SAMPLES", WORKER, WARN,
                   "training iterations sampled 0 env steps several times in a row (runners dropped or late)")
STOP_STALLED = _code("STOP_STALLED", WORKER, WARN,
                     "algo.stop() has not returned for stop_timeout_s, with the driver's stack")
DRIVER_STALLED = _code("DRIVER_STALLED", WORKER, WARN,
                       "train() has not returned for max(120 s, 5x the median iteration), with the driver's stack")
WORKER_RESTARTED = _code("WORKER_RESTARTED", WORKER, WARN, "a new process took over a worker index")
RESOURCE_CONTENTION = _code("RESOURCE_CONTENTION", RESOURCE, WARN,
                            ">= 3 workers (or all) with step time > 3x their own baseline")
ACTOR_UNPLACEABLE = _code("ACTOR_UNPLACEABLE", RESOURCE, FAIL,
                          "the Algorithm's build waited > 15 s for actors the cluster cannot place now (who "
                          "waits for what, who holds it), or its config asks for more than the cluster has")
MEMORY_LEAK_SUSPECTED = _code("MEMORY_LEAK_SUSPECTED", MEMORY, WARN, "RSS slope > 1 MB per 1000 env steps")

# --- STATE_ACTION -----------------------------------------------------------------------
CHAOS = _code("CHAOS", STATE_ACTION, WARN, "near-uniform P(action | cluster)")
BLIND_SPOT = _code("BLIND_SPOT", STATE_ACTION, WARN, "every action probability < 0.3 in a cluster")
ERROR_FIXATION = _code("ERROR_FIXATION", STATE_ACTION, WARN,
                       "one action > 0.95 in a cluster that leads to failure more often than average")
RARE_STATE = _code("RARE_STATE", STATE_ACTION, WARN, "cluster holds < 0.01% of visited states")
STATE_SNAPSHOT = _code("STATE_SNAPSHOT", STATE_ACTION, PASS,
                       "a state-cluster x action snapshot was taken (verdict counts, heatmap path)")
STATE_MAPS_OFF = _code("STATE_MAPS_OFF", STATE_ACTION, PASS,
                       "state-action maps are off for an RLModule whose spaces they cannot take (said once)")
LOST_STATES_GROWING = _code("LOST_STATES_GROWING", STATE_ACTION, WARN,
                            "share of visited states in CHAOS/BLIND_SPOT clusters rose at each of the last "
                            "3 snapshots, by >= 0.1 in all")
NEW_FIXATION = _code("NEW_FIXATION", STATE_ACTION, WARN,
                     "clusters holding >= 5% of states became fixated (one action > 0.95) since the last "
                     "snapshot while the episode return rose < 5%")

# --- IMPORT_RESOLVE / FLOW1 -------------------------------------------------------------
GYM_ALIASED = _code("GYM_ALIASED", IMPORT_RESOLVE, FAIL,
                    "`import gym` resolves to gymnasium, or two gym APIs are mixed")
FLOW1_INTERNAL = _code("FLOW1_INTERNAL", FLOW1, WARN, "flow1's own error, caught so that training goes on")
SAMPLES_DROPPED = _code("SAMPLES_DROPPED", FLOW1, WARN, "diagnostic batches dropped under back-pressure")
WATCHER_OFF = _code("WATCHER_OFF", FLOW1, WARN,
                    "a part of flow1 stopped watching (liveness, a probe, contention, the clusterer, the "
                    "Recorder, learner tracing, the driver watchdog): what is no longer seen is named; a run "
                    "with a watcher off is never a plain PASS")
HUB_RESTARTED = _code("HUB_RESTARTED", FLOW1, PASS,
                      "Ray restarted flow1's hub; it rebuilt its workers and open incidents from the run "
                      "directory (how long it was down, what it may have lost)")
