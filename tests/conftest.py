"""Shared test setup: the fault zoo is importable as ``zoo`` (also from CLI subprocesses)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for ``python -m flow1_ray`` subprocesses: zoo importable, no colour."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["NO_COLOR"] = "1"
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Ray's Prometheus export port of the shared session (tests scrape flow1's series there)
METRICS_PORT = _free_port()
#: credentials for the loopback S3 server (moto) of the object-storage tests: any key works
S3_ENV = {"AWS_ACCESS_KEY_ID": "flow1-test", "AWS_SECRET_ACCESS_KEY": "flow1-test", "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session: 2 CPUs, no dashboard, a small object store,
    Ray's metrics exported on ``METRICS_PORT``."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    # workers import test-only classes (hooks, zoo envs) from tests/ too
    # address="local": a new Ray of our own, even when another cluster on this machine left its
    # address behind (a killed driver, a multi-node test in another process)
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2,
             log_to_driver=False, configure_logging=False, _metrics_export_port=METRICS_PORT,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
                                       # the loopback S3 of test_object_store.py (moto) takes any key
                                       **S3_ENV}})
    yield ray
    ray.shutdown()
