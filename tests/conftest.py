"""Shared test setup.

The tree mirrors the package: the unit tests of ``flow1_ray/<package>/`` are under
``tests/<package>/``; every test that runs a real Ray or RLlib (the ``ray_session`` fixture, a
training job) is under ``tests/live/`` and marked ``live`` -- ``pytest -m "not live"`` is the
fast tier. Tiny envs with planted faults (``zoo``, ``traps``...) are in ``tests/envs/``,
shared helpers (a headless browser, sick RLModules) in ``tests/fixtures/``, scripts that tests
run as their own process in ``tests/jobs/``, recorded runs in ``tests/data/``. ``envs`` and
``fixtures`` are importable by name, here, in CLI subprocesses and in Ray's workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# one OpenMP/MKL thread per process: the suite runs two pytest workers, their Ray workers and
# CLI subprocesses on two cores, and torch's default of a thread per core made each process's
# threads spin against the others' (measured: test_matrix + test_learner_live, two workers,
# 171-178 s -> 159 s); Ray's own workers get one already. Set before anything imports torch.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# Ray starts its workers at nice 15 (Ray's ``worker_niceness``): beside the other pytest
# worker's driver and CLI subprocesses (nice 0) on two cores, a test's EnvRunners and Learner
# actors got a few percent of a core while their own driver waited on them (measured: APPO's
# build 8 s alone, 66 s beside two nice-0 spinners; 13 s with its workers at nice 0). Ray's job
# submission sets 0 for the same reason; every Ray the suite starts inherits this.
os.environ.setdefault("RAY_worker_niceness", "0")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: the folders whose modules tests, CLI subprocesses and Ray's workers import by name
IMPORTABLE = (str(TESTS / "envs"), str(TESTS / "fixtures"))
sys.path[:0] = IMPORTABLE
#: ... and where Ray's workers and CLI subprocesses find a test module by its name (pytest
#: imports a test file by its basename: an env class or a hook defined in it is pickled as
#: ``test_x.Class``, and a worker that unpickles it must be able to import ``test_x``)
TEST_DIRS = tuple(str(d) for d in sorted(TESTS.iterdir()) if d.is_dir() and any(d.glob("test_*.py")))
WORKER_PATH = IMPORTABLE + TEST_DIRS
LIVE = TESTS / "live"


#: shared fixtures that cost nothing to make twice: each pytest-xdist worker has its own
#: (the tests' Ray of a worker is its own, ``address="local"``)
PER_WORKER = ("ray_session",)


def _ours(func) -> bool:
    import inspect

    try:
        return Path(inspect.getfile(func)).resolve().is_relative_to(TESTS)
    except (TypeError, OSError):
        return False


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's loadgroup reads the groups
def pytest_collection_modifyitems(config, items):
    """``live``: every test under tests/live/, and any test that asks for the shared Ray.

    The suite runs on two pytest-xdist workers (``--dist loadgroup``, pyproject.toml): the
    tests that share a costly module- or session-scoped fixture (a trained run, a cluster, a
    server) form one group that a single worker runs, so that the fixture is made once; the
    live tests come first (each worker takes the next test when it is free), so that the
    many short unit tests fill the end and both workers finish together."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(LIVE) or "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.live)
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name) if info else None
            if not defs or name in PER_WORKER or defs[-1].scope not in ("module", "session") \
                    or not _ours(defs[-1].func):   # pytest's own (tmp_path_factory) are per worker
                continue
            scope = item.module.__name__ if defs[-1].scope == "module" else "session"
            item.add_marker(pytest.mark.xdist_group(f"{scope}.{name}"))
    items.sort(key=lambda item: item.get_closest_marker("live") is None)


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for ``python -m flow1_ray`` subprocesses: zoo importable, no colour."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*WORKER_PATH, env.get("PYTHONPATH", "")) if p)
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
    # Ray's processes inherit this process's environment: a job runtime_env with the same
    # variables cost ~6 % more CPU per live test (each worker's start goes through its agent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*WORKER_PATH, os.environ.get("PYTHONPATH", "")) if p)
    os.environ.update(S3_ENV)   # the loopback S3 of test_object_store.py (moto) takes any key
    # Ray's processes report their metrics at Ray's default interval (10 s): the metrics
    # test waits up to a minute for a series; a 1 s interval cost ~40 s of CPU a suite
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2,
             log_to_driver=False, configure_logging=False, _metrics_export_port=METRICS_PORT)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def s3_uri():
    """A bucket URI on a real S3 endpoint on loopback (moto's standalone server), for the
    object-storage tests; skipped where moto[server] is not installed."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] provides the loopback S3 endpoint")
    for k, v in S3_ENV.items():
        os.environ.setdefault(k, v)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield (f"s3://flow1-runs/team?endpoint_override={host}:{port}&scheme=http&region=us-east-1"
           "&allow_bucket_creation=true")
    server.stop()


@pytest.fixture
def attached_env(cli_env, ray_session) -> dict[str, str]:
    """``cli_env`` with ``RAY_ADDRESS`` of the shared session: a CLI subprocess (``flow1 train``,
    ``flow1 whatif``) joins the tests' Ray as a RayJob joins its cluster, instead of starting and
    stopping a Ray of its own (seconds of CPU each on the 2-core CI machine)."""
    return {**cli_env, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}


@pytest.fixture(scope="session")
def sick_run(ray_session, tmp_path_factory) -> dict:
    """PPO on CartPole made sick on purpose (seed 0, lr 0.05, 10 epochs of 1,000-step batches):
    KL_SPIKE at iteration 1 and ENTROPY_COLLAPSE after it; ``on_fail="checkpoint+stop"`` saves
    the guard's checkpoint beside the run directory and says done. Four iterations. The
    learner test asserts on its findings, the what-if test branches from its checkpoint.

    Returns ``results`` (the four results), ``events`` (the event rows read when it ended,
    before any test wrote beside it) and ``run_dir``."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from flow1_ray import Flow1Callbacks, load_events

    cb = Flow1Callbacks.with_options(output_dir=str(tmp_path_factory.mktemp("sick")), print_events=False,
                                     on_fail="checkpoint+stop", state_actions=False)
    algo = (PPOConfig().environment("CartPole-v1").callbacks(cb).debugging(seed=0)
            .env_runners(num_env_runners=1, sample_timeout_s=20)
            .training(train_batch_size_per_learner=1000, lr=0.05, num_epochs=10)).build_algo()
    try:
        results = [algo.train() for _ in range(4)]
    finally:
        algo.stop()
    run_dir = Path(results[-1]["flow1"]["run_dir"])
    return {"results": results, "events": load_events(run_dir).to_pylist(), "run_dir": run_dir}
