"""The live half of ``tests/rundir/test_object_store.py`` (real Ray and RLlib runs). Run
directories on object storage: ``output_dir="s3://bucket/prefix?..."`` through ``pyarrow.fs``,
against a real S3 endpoint on loopback (moto's standalone server). The Recorder writes there
from the hub, and ``load_events`` / ``flow1 report`` read it back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import S3_ENV
from flow1_ray.common import codes as C
from flow1_ray.checks.catalogue import rule
from flow1_ray.rundir.reading import load_events
from flow1_ray.rundir.store import Location


@pytest.mark.slow
def test_a_live_run_writes_its_directory_to_s3_and_flow1_report_reads_it(ray_session, s3_uri, cli_env):
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_metrics

    cb = Flow1Callbacks.with_options(output_dir=s3_uri, print_events=False, heatmap_every=1,
                                     state_send_interval_s=0.0)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    run = results[-1]["flow1"]["run_dir"]
    assert run.startswith("s3://flow1-runs/team/") and "endpoint_override=" in run
    codes = set(load_events(run).column("code").to_pylist())
    assert C.STATE_SNAPSHOT in codes and not [c for c in codes if rule(c).status != C.PASS
                                               and rule(c).module not in ("", C.STATE_ACTION)]
    assert max(load_metrics(run).column("iteration").to_pylist()) == 2
    pngs = [n for n in (Location(run) / "heatmaps").listdir() if n.endswith(".png")]
    assert pngs, "the heatmap PNGs were uploaded"
    out = subprocess.run([sys.executable, "-m", "flow1_ray", "report", run, "--json", "-", "--allow-short"],
                         capture_output=True,
                         text=True, env={**cli_env, **S3_ENV}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"iterations": 2' in out.stdout and "heatmaps/" in out.stdout
