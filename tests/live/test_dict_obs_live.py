"""A Dict-observation env live, behind RLlib's ``FlattenObservations`` connector (RLlib's own
example: ``examples/connectors/flatten_observations_dict_space.py``): the connector writes the
flattened observation back into the episodes, so the state maps read flat vectors where the
env's space is a Dict. Measured before the fix: the maps switched off on an IndexError and the
verdict stayed a plain PASS.

The run is shorter than the snapshot schedule (``heatmap_every`` 10 iterations, 2 run): its
state clusters come from the snapshot taken at stop."""

from __future__ import annotations

import pytest

from flow1_ray import Flow1Callbacks, load_clusters, load_events
from flow1_ray.common import codes as C
from flow1_ray.report.rundir import load_run_report

pytestmark = pytest.mark.slow


def test_ppo_on_a_dict_env_behind_flatten_observations_has_state_maps_and_is_silent(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.examples.envs.classes.cartpole_with_dict_observation_space import (
        CartPoleWithDictObservationSpace)

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, heatmap_every=10,
                                     heatmap_budget=0.0, state_send_interval_s=0.0)
    algo = (PPOConfig().environment(CartPoleWithDictObservationSpace).callbacks(cb)
            .env_runners(num_env_runners=1, env_to_module_connector=lambda env, spaces=None, device=None:
                         FlattenObservations())
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    run_dir = results[-1]["flow1"]["run_dir"]
    events = load_events(run_dir).to_pylist()
    codes = {e["code"] for e in events}
    assert not codes & {C.STATE_MAPS_OFF, C.WATCHER_OFF, C.FLOW1_INTERNAL}, codes
    assert [(e["code"], e["message"][:200]) for e in events if e["status"] != C.PASS] == []
    clusters = load_clusters(run_dir).to_pylist()
    assert clusters and {c["iteration"] for c in clusters} == {2}, "no snapshot at stop"
    # the clusters are described in the env's own terms (its Dict's leaves), not obs[i]
    text = " ".join(str(c.get("description", "")) for c in clusters)
    assert "angular-pos" in text or "velocs" in text or "x-pos" in text, text[:500]
    report = load_run_report(run_dir)   # nothing unwatched; two iterations cannot judge learning, and it says so
    assert not report.blind and report.verdict == "PASS, but learning not judged: not enough data (2 iterations)", \
        report.verdict
