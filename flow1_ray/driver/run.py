"""The run: its actors, their names, and how EnvRunners find them.

The Algorithm process creates the run's actors in ``on_algorithm_init`` (get-or-create by
name): the hub (Recorder, monitor, the hub node's probe and, on CPU, the state clusterer in
one process: :mod:`~flow1_ray.hub.hub`), a NodeProbe on every other node, and a
StateClusterer of its own only when it gets a GPU share. They are owned by that process,
not detached: Ray ends them when it ends, so no flow1 actor outlives its run even if the
driver is killed. EnvRunners need none of them to start: their lock files are found by the
probes, and they only look up the hub (by a key the Algorithm writes into Ray's internal KV
under their actor id) when they have something to send.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from ..common.names import KV_PREFIX, hub_name, kv, local_prefixes_key, states_name
from ..common.names import NAMESPACE
from ..options import Flow1Options
from ..rundir.store import Location
from ..hub.recorder import HEATMAP_DRAIN_S

PROBE_START_TIMEOUT_S = 60.0


#: The share of a GPU the StateClusterer asks for when one is free (None = this, or CPU).
CLUSTERER_GPU_SHARE = 0.1


def clusterer_gpus(opts: Flow1Options) -> float:
    """GPUs for the StateClusterer: the option if set, else a small share when one is free
    now. The Algorithm's learners are placed before on_algorithm_init, so asking only for
    what is free never keeps them from a GPU, and never leaves the clusterer pending."""
    if opts.clusterer_num_gpus is not None:
        return float(opts.clusterer_num_gpus)
    import ray

    free = ray.available_resources().get("GPU", 0.0)
    return CLUSTERER_GPU_SHARE if free >= CLUSTERER_GPU_SHARE else 0.0


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def runner_keys(algorithm: Any) -> list[str]:
    """Actor ids of the Algorithm's remote EnvRunners, training and evaluation.

    Uses the actor manager's mapping (private in RLlib 2.60; stable since 2.x): asking the
    runners themselves would block on a hung one."""
    keys = []
    for group in (getattr(algorithm, "env_runner_group", None), getattr(algorithm, "eval_env_runner_group", None)):
        manager = getattr(group, "_worker_manager", None)
        for handle in getattr(manager, "_actors", {}).values():
            keys.append(handle._actor_id.hex())
    return keys


class Flow1Run:
    """Driver-side handle on one run's actors."""

    def __init__(self, opts: Flow1Options, algorithm: str | None = None, config: dict | None = None) -> None:
        """``algorithm``: the Algorithm's class name (``PPO``) and ``config`` its settings
        (:func:`~flow1_ray.checks.advice.config_settings`), written in ``run.json``."""
        import ray

        from ..hub.hub import make_hub_actor

        self.opts = opts
        self.run_id = opts.run_id or new_run_id()
        self.run_dir = Location(opts.resolved_output_dir()) / self.run_id   # a path or a filesystem URI
        self.run_dir.mkdir()
        self.job_id = ray.get_runtime_context().get_job_id()
        self.local_prefix = f"local-{os.getpid()}-"
        gpus = clusterer_gpus(opts) if opts.state_actions else 0.0
        own_states = opts.state_actions and (gpus > 0 or opts.clusterer_backend == "cuml")
        # a caller's calls in flight: a runner's events and states, the driver's questions
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # the hub lives with the Algorithm, so that losing a worker node never takes the run's
        # Recorder and monitor with it. Hard affinity: measured on a Cluster whose head has no
        # CPU, a soft one put the 0-CPU hub on a worker node; the hub needs no resource, and
        # without the Algorithm's node there is no run to watch
        self.hub = make_hub_actor().options(
            name=hub_name(self.run_id), namespace=NAMESPACE, get_if_exists=True,
            max_pending_calls=3 * opts.max_pending_calls,
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
        ).remote(str(self.run_dir), self.run_id, self.job_id, opts.as_dict(), opts.state_actions and not own_states,
                  os.getpid(), algorithm, config)
        #: where the clusterer's calls go: its own actor with a GPU share, else the hub
        self.states = self.hub if opts.state_actions else None
        self.states_actor = None
        if own_states:
            from ..hub.clusterer import make_clusterer_actor

            self.states = self.states_actor = make_clusterer_actor().options(
                name=states_name(self.run_id), namespace=NAMESPACE, get_if_exists=True,
                num_gpus=gpus, max_pending_calls=opts.max_pending_calls,
            ).remote(hub_name(self.run_id), NAMESPACE, opts.n_clusters, opts.clusterer_backend,
                     dict(opts.thresholds), 0, opts.heatmap_budget, opts.heatmap_every)
        self.hub_started_at: float | None = None
        self.keys: list[str] = []
        self.cursor = 0
        self.closed = False
        self.iteration = 0               # the last training iteration seen
        self.snapshot_iteration = 0      # the iteration of the last snapshot asked for
        self.return_mean: float | None = None

    def after_iteration(self, iteration: int, return_mean: float | None) -> None:
        """Ask for a state snapshot every ``heatmap_every`` iterations (fire-and-forget).
        The run's return is judged with the learner curves (:mod:`flow1_ray.driver.learner_watch`)."""
        self.iteration, self.return_mean = iteration, return_mean
        if self.states is not None and iteration - self.snapshot_iteration >= self.opts.heatmap_every:
            import ray

            self.snapshot_iteration = iteration
            try:
                self.states.snapshot.remote(iteration, return_mean)
            except ray.exceptions.PendingCallsLimitExceeded:
                pass

    def register(self, keys: list[str]) -> None:
        """Tell the probes which lock files are ours and the runners which run they are in."""
        import ray

        new = [k for k in keys if k not in self.keys]
        self.keys = sorted(set(self.keys) | set(keys))
        for k in new:
            kv()._internal_kv_put(KV_PREFIX + k, self.run_id, overwrite=True, namespace=NAMESPACE)
        kv()._internal_kv_put(local_prefixes_key(self.run_id), json.dumps([self.local_prefix]), overwrite=True,
                              namespace=NAMESPACE)
        t = self.opts.get_timeout_s * 5
        ray.get(self.hub.set_keys.remote(self.keys, [self.local_prefix]), timeout=t)
        ray.get(self.hub.ensure_probes.remote(), timeout=t)
        # probes on other nodes start in new processes: wait, so that a runner dying in
        # iteration 1 is seen
        ray.get(self.hub.wait_probes.remote(PROBE_START_TIMEOUT_S), timeout=PROBE_START_TIMEOUT_S + 5)

    def hub_restarted(self, started_at: float | None) -> bool:
        """Whether the hub is a new incarnation (Ray restarted it after a crash): its probes
        then need the run's keys again. The first answer only sets the reference."""
        if started_at is None:
            return False
        before, self.hub_started_at = self.hub_started_at, started_at
        return before is not None and started_at != before

    def reregister(self) -> None:
        """After a hub restart: keys and probes again, without waiting for the probes."""
        self.hub.set_keys.remote(self.keys, [self.local_prefix])
        self.hub.ensure_probes.remote()

    def stopping(self) -> None:
        """Tell the monitor that ``algo.stop()`` begins, before RLlib ends the Learners and
        runners (waited for, at most get_timeout_s: their ends must not read as deaths)."""
        import ray

        try:
            ray.get(self.hub.set_stopping.remote(), timeout=self.opts.get_timeout_s)
        except Exception:
            pass

    def close(self) -> dict:
        """Flush, stop the probes and end the actors; safe to call twice."""
        if self.closed:
            return {}
        self.closed = True
        import ray

        status: dict = {}
        t = self.opts.get_timeout_s * 5
        if self.states is not None:
            # a last snapshot of the states since the previous one (the clusterer knows which
            # requests it spaced: HEATMAPS_SPACED), all delivered
            last = self.iteration if self.iteration > 0 else None
            try:
                ray.get(self.states.finish_states.remote(last, self.return_mean, t), timeout=t + 5)
            except Exception:
                pass
        try:
            ray.get(self.hub.stop_probes.remote(), timeout=t)
        except Exception:
            pass
        try:
            status = ray.get(self.hub.close.remote(), timeout=t + HEATMAP_DRAIN_S)
        except Exception:
            pass
        for k in [KV_PREFIX + k for k in self.keys] + [local_prefixes_key(self.run_id)]:
            try:
                kv()._internal_kv_del(k, namespace=NAMESPACE)
            except Exception:
                pass
        for actor in (self.states_actor, self.hub):
            if actor is None:
                continue
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        return status
