"""The clusterer's router: each KMeans call on the engine its measured times predict faster
(a GPU engine or scikit-learn), measured where it runs. On this CPU machine the accelerated
engine is torch on the CPU; on a device machine the gpu-marked test runs it on CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from flow1_ray.clustering import crossover as X
from flow1_ray.clustering.backends import SklearnKMeans, TorchKMeans
from flow1_ray.clustering.crossover import CostModel, CrossoverKMeans, choose_engine
from flow1_ray.clustering.streaming import StreamingKMeans


def blobs(n: int, d: int = 8, k: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, (k, d))
    return (centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d))).astype(np.float32)


def test_cost_model_leaves_out_the_first_call_and_fits_a_line():
    m = CostModel()
    m.add(1_000, 2.0)                      # a first call: imports, a device's context
    assert len(m) == 0 and m.tries == 1
    for w in (1_000, 2_000, 4_000, 8_000):
        m.add(w, 0.001 + 1e-6 * w)
    a, b = m.coefficients()
    assert a == pytest.approx(0.001, rel=1e-6) and b == pytest.approx(1e-6, rel=1e-6)
    assert m.predict(16_000) == pytest.approx(0.017, rel=1e-6)
    same = CostModel()
    for t in (0.5, 0.004, 0.003, 0.005):   # one size: the median of the kept calls
        same.add(500, t)
    assert same.coefficients() == (0.004, 0.0)


def _measured(router: CrossoverKMeans, op: str, fast: tuple[float, float], cpu: tuple[float, float]) -> None:
    """The router's own record of calls timed at these lines (a + b * work), as its timer
    leaves them after each engine's first call and MIN_TRIES more."""
    for engine, (a, b) in ((router.fast, fast), (router.cpu, cpu)):
        for w in [1e5] + [1e5 * 4 ** i for i in range(X.MIN_TRIES + 2)]:
            router._model(engine, op).add(w, a + b * w)
    router._last_shape = (30, 16)


def test_the_router_sends_small_calls_to_the_cpu_and_large_ones_to_the_gpu():
    """A GPU-like engine: 5 ms fixed per fit step, 100x cheaper per row than the CPU's 0.1 ms
    + 1 ns per row x k x d: the lines cross at (5 - 0.1) ms / (1 - 0.01) ns = 4.949e6 work,
    10,311 rows at k=30, d=16."""
    router = CrossoverKMeans(TorchKMeans("cpu"), SklearnKMeans())
    _measured(router, "fit", fast=(5e-3, 1e-11), cpu=(1e-4, 1e-9))
    assert router.crossover("fit") == {"rows": 10_311, "below": "sklearn", "above": "torch"}
    assert router.pick("fit", 1_000 * 480) is router.cpu
    assert router.pick("fit", 50_000 * 480) is router.fast
    assert router.status()["crossover"]["assign"] is None      # assign not measured yet


def test_the_slower_engine_is_tried_again_only_when_it_is_not_hopeless():
    router = CrossoverKMeans(TorchKMeans("cpu"), SklearnKMeans())
    _measured(router, "fit", fast=(5e-3, 1e-11), cpu=(1e-4, 1e-9))
    near = 12_000 * 480     # the CPU ~1.1x the GPU's predicted time: re-tried now and then
    far = 1_000_000 * 480   # the CPU ~100x: never re-tried
    picks_near = [router.pick("fit", near) for _ in range(2 * X.EXPLORE_EVERY)]
    assert picks_near.count(router.cpu) == 2 and picks_near.count(router.fast) == 2 * X.EXPLORE_EVERY - 2
    assert all(router.pick("fit", far) is router.fast for _ in range(2 * X.EXPLORE_EVERY))


def test_a_fit_is_not_tried_on_an_engine_whose_assignments_alone_are_hopeless():
    """The CPU's fit not yet measured, its assignments are: at 50,000 rows one assignment
    (0.1 ms + 1 ns per row x k x d: 24 ms) is more than EXPLORE_CAP times the GPU's measured
    Lloyd step (5 ms), so the fit stays on the GPU; at 1,000 rows (0.58 ms) the CPU is tried."""
    router = CrossoverKMeans(TorchKMeans("cpu"), SklearnKMeans())
    _measured(router, "assign", fast=(1e-3, 1e-12), cpu=(1e-4, 1e-9))
    for _ in range(X.MIN_TRIES + 1):
        router._model(router.fast, "fit").add(1e5, 5e-3)
    assert router.pick("fit", 50_000 * 480) is router.fast
    assert router.status()["fits_kept_off"] == {"torch": 0, "sklearn": 1}
    assert router.pick("fit", 1_000 * 480) is router.cpu
    router2 = CrossoverKMeans(TorchKMeans("cpu"), SklearnKMeans())   # no assignment measured: tried
    for _ in range(X.MIN_TRIES + 1):
        router2._model(router2.fast, "fit").add(1e5, 5e-3)
    assert router2.pick("fit", 50_000 * 480) is router2.cpu


def test_both_engines_cluster_a_live_stream_and_the_router_says_what_it_measured():
    """Real engines under the streaming layer: each is tried on the first calls of each
    operation, every answer is a real clustering (inertia within 2 % of scikit-learn's own
    fit), and the status gives the calls per engine and where each operation's lines cross."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    router = CrossoverKMeans(TorchKMeans("cpu"), SklearnKMeans())
    km = StreamingKMeans(12, backend=router, seed=0, refit_drift=0.0, standardize=True)
    for i, n in enumerate((600, 2_400, 9_600, 600, 2_400, 9_600, 600, 2_400)):
        km.partial_fit(blobs(n, seed=i))   # refit_drift 0: every batch refits (fit + assigns)
    st = router.status()
    assert st["engines"]["torch"] >= 3 and st["engines"]["sklearn"] >= 3, st
    assert set(st["crossover"]) == {"fit", "assign"}
    for op in ("fit", "assign"):
        c = st["crossover"][op]
        if c is None and op == "fit":
            # one engine's measured assignments at these sizes already took EXPLORE_CAP times the
            # other's Lloyd step (seen on a loaded machine): its untried fits were kept off, and said
            assert sum(st["fits_kept_off"].values()) > 0, st
            continue
        assert c is not None and c["below"] in ("torch", "sklearn") and c["above"] in ("torch", "sklearn"), st
    assert st["shape_kd"] == [12, 8] and st["fast_failures"] == 0
    x = blobs(9_600, seed=99)
    z = km.transform(x)
    ours = router.fit(z, 12, seed=1)
    ref = SklearnKMeans().fit(z, 12, seed=1)
    assert abs(ours.inertia - ref.inertia) / ref.inertia < 0.02


def test_a_failing_gpu_engine_hands_its_calls_to_the_cpu_and_is_left_after_three():
    """torch on the ``meta`` device (shapes, no values) fails at the first operator it
    has no kernel for, as a lost device fails a call: each failed call is answered by scikit-learn, and after MAX_FAILURES the router
    stops trying the failing engine and says why."""
    pytest.importorskip("torch")
    router = CrossoverKMeans(TorchKMeans("meta"), SklearnKMeans())
    x = blobs(2_000)
    for i in range(X.MAX_FAILURES + 3):
        res = router.fit(x, 12, seed=i)
        assert res.centroids.shape == (12, 8) and np.isfinite(res.inertia)
    st = router.status()
    assert st["fast_failures"] == X.MAX_FAILURES and "meta" in st["fast_last_failure"].lower()
    assert st["engines"] == {"torch": 0, "sklearn": X.MAX_FAILURES + 3}


def test_auto_routes_a_gpu_engine_and_a_named_backend_runs_alone():
    assert isinstance(choose_engine("auto", "torch", "cpu"), CrossoverKMeans)
    assert isinstance(choose_engine("torch", "torch", "cpu"), TorchKMeans)
    assert isinstance(choose_engine("auto", "sklearn"), SklearnKMeans)


@pytest.mark.gpu
def test_the_live_clusterer_routes_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from flow1_ray.hub.clusterer_core import ClustererCore

    core = ClustererCore(n_clusters=12, backend="auto")
    for i in range(6):
        x = blobs(3_000, seed=i)
        core.ingest_rows(x, np.zeros(len(x), np.int64), np.zeros(len(x)), ["a", "b"])
        assert core.compute_snapshot(i) is not None
    routing = core.status()["routing"]
    assert routing["engines"]["torch"] >= 1 and routing["fast_failures"] == 0, routing
