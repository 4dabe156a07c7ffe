"""The live half of ``tests/hub/test_heatmap_cadence.py`` (real Ray and RLlib runs). The state
snapshots' cadence held under ``heatmap_budget`` (flow1_ray/checks/own/budgets.py): a snapshot
asked for sooner than its last one's CPU time / budget is skipped, said once (HEATMAPS_SPACED),
and its states are judged by the next; ``heatmap_budget=0`` runs every one."""

from __future__ import annotations

import time


from flow1_ray.common import codes as C


def test_a_live_run_with_short_iterations_spaces_its_heatmaps(ray_session, tmp_path):
    """A real PPO run asking for a snapshot at every ~1 s iteration (``heatmap_every=1``)
    under a 0.1 % budget: the first snapshot runs, the next requests are skipped (a
    snapshot's clustering and drawing cost tens of ms or more: tens of seconds apart at this
    budget, more than the run lasts however busy the machine; at the default 1 % a loaded
    machine's 2-3 s iterations let every one run), said once as a PASS note; the close still
    judges every state."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_clusters, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, heatmap_every=1, n_clusters=6,
                                     heatmap_budget=0.001, state_sample_rate=0.5, state_send_interval_s=0.0)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)).build_algo()
    try:
        results = [algo.train() for _ in range(4)]
    finally:
        algo.stop()
    run = results[-1]["flow1"]["run_dir"]
    events = load_events(run).to_pylist()
    spaced = [e for e in events if e["code"] == C.HEATMAPS_SPACED]
    assert len(spaced) == 1 and spaced[0]["status"] == C.PASS, [e["code"] for e in events]
    assert "heatmap_budget=0 draws every 1 iterations" in spaced[0]["message"]
    iterations = sorted({r["iteration"] for r in load_clusters(run).to_pylist()})
    assert iterations[0] == 1 and iterations[-1] == 4 and len(iterations) < 4, iterations
    assert not [e for e in events if e["status"] in (C.WARN, C.FAIL) and e["module"] == C.FLOW1]
