"""The live half of ``tests/hub/test_metrics.py`` (real Ray and RLlib runs). flow1's series on
Ray's Prometheus endpoint during a real local run, and the alert rules and dashboard that read
them name only series flow1 exports."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest

from conftest import METRICS_PORT
from flow1_ray import Flow1Callbacks
from flow1_ray.hub.prometheus import SERIES, WORKERS


def _scrape() -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
    except OSError:
        return ""


def _value(text: str, series: str, **tags: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + "{") and all(f'{k}="{v}"' in line for k, v in tags.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _wait(pred, timeout: float = 60.0) -> str:
    """The endpoint's text once ``pred`` holds: Ray's processes report every 10 s (its
    ``metrics_report_interval_ms``), and the agent exports what it got at the next scrape."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        text = _scrape()
        if pred(text):
            return text
        time.sleep(1.0)
    raise AssertionError(f"not on the endpoint within {timeout} s:\n" +
                         "\n".join(x for x in _scrape().splitlines() if "flow1" in x)[:2000])


@pytest.mark.slow
def test_a_runs_series_reach_rays_prometheus_endpoint(ray_session, tmp_path):
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="Ray's metrics export needs ray[default]")
    from ray.rllib.algorithms.ppo import PPOConfig

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path), print_events=False, state_actions=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb)
            .env_runners(num_env_runners=2, sample_timeout_s=20)
            .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True)
            .training(train_batch_size_per_learner=500, minibatch_size=128, num_epochs=1)).build_algo()
    try:
        run = algo.train()["flow1"]["run_dir"].rsplit("/", 1)[-1]
        text = _wait(lambda t: _value(t, SERIES[WORKERS], run=run, state="alive") == 2)
        assert _value(text, SERIES[WORKERS], run=run, state="dead") == 0
        pid = algo.env_runner_group.foreach_env_runner(lambda er: os.getpid(), local_env_runner=False,
                                                      timeout_seconds=20)[0]
        os.kill(pid, signal.SIGKILL)
        text = _wait(lambda t: _value(t, SERIES["flow1_events"], run=run, status="FAIL", code="WORKER_DIED") == 1)
        assert _value(text, SERIES[WORKERS], run=run, state="dead") == 1
    finally:
        algo.stop()


