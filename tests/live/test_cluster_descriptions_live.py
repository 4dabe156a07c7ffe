"""The live half of ``tests/clustering/test_cluster_descriptions.py`` (real Ray and RLlib runs).
Clusters a person can read: each state cluster described in the env's own terms (the features
that set its centroid apart, in the observation's units, named from the space), a thumbnail of a
real frame for image envs, a 2-D map -- in clusters/, the heatmap's rows, the findings, the
report and the panel; old and damaged run directories still read."""

from __future__ import annotations

import json
import re

import pytest
from markupsafe import escape

from flow1_ray.clustering.describe import features
from flow1_ray.report.html import render_html
from flow1_ray.report.rundir import load_run_report


# --- naming -----------------------------------------------------------------------------------


# --- a real run ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_ppo_cartpole_run_writes_cluster_descriptions_and_the_report_shows_them(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_clusters
    from test_learner_live import _train

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, heatmap_every=1, n_clusters=6,
                                     state_sample_rate=0.5, state_send_interval_s=0.0)
    _, _, run = _train(PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
                       .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1), 2)
    rows = load_clusters(run).to_pylist()
    last = [r for r in rows if r["iteration"] == max(x["iteration"] for x in rows)]
    assert len(last) == 6 and all(r["description"] and r["label"] for r in last)
    for r in last:
        top = json.loads(r["top_features"])
        assert all(t["feature"] in ("obs[0]", "obs[1]", "obs[2]", "obs[3]") and abs(t["sd"]) >= 0.5 for t in top)
        if top:   # the description is its top features, each in CartPole's units (3 significant digits of
            # the centroid; the stored value is rounded to 6 decimals first, so the last digit may differ by one)
            said = re.match(rf"{re.escape(top[0]['feature'])} ≈ ([+-][0-9.e+-]+) \(mean ", r["description"])
            assert said and float(said.group(1)) == pytest.approx(top[0]["value"], rel=1e-2, abs=1e-9), r["description"]
        assert r["map_x"] is not None and r["thumbnail"] is None   # vector states: no thumbnails
    assert any(json.loads(r["top_features"]) for r in last), "some cluster stands apart"
    page = render_html(load_run_report(run), run)
    for r in last:
        assert escape(r["description"]) in page
    assert 'class="clustermap"' in page
