"""State-cluster x action maps on synthetic data whose structure is known."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from flow1_ray import analyze_state_actions
from flow1_ray.common import codes as C
from flow1_ray.checks.states.state_action import FIXATED, verdicts
from flow1_ray.clustering.backends import SklearnKMeans, TorchKMeans, resolve_backend
from flow1_ray.clustering.features import flatten_observations, standardize
from state_blobs import EXPECTED, blobs


@pytest.mark.parametrize("backend", ["sklearn", "torch"])
def test_every_blob_gets_its_verdict(backend, tmp_path):
    x, a, f, truth = blobs()
    m = analyze_state_actions(x, a, spaces.Discrete(6), n_clusters=6, backend=backend, failures=f)
    labels_of_truth = {}
    z, _, _ = standardize(x.astype(np.float32))
    owner = ((z[:, None, :] - m.centroids[None]) ** 2).sum(-1).argmin(1)
    for name, verdict in EXPECTED.items():
        clusters = np.unique(owner[truth == name])
        assert len(clusters) == 1, f"{name} split over {clusters}"
        labels_of_truth[name] = int(clusters[0])
        assert m.verdicts[labels_of_truth[name]] == verdict, (name, m.verdicts, m.probs.round(2))
    codes = [e.code for e in m.to_events()]
    assert sorted(codes) == sorted([C.CHAOS, C.BLIND_SPOT, C.ERROR_FIXATION])
    t = m.to_arrow(snapshot=3)
    assert t.num_rows == 6 and set(t.column("verdict").to_pylist()) == set(EXPECTED.values())
    png = m.heatmap(str(tmp_path / "h.png"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_rare_state_and_confidence_without_failure_evidence():
    counts = np.array([[5000, 10], [1, 0], [10, 4990]])
    v = verdicts(counts)
    assert v == [FIXATED, C.RARE_STATE, FIXATED]  # no failure data: confident is not an error


def test_standardisation_keeps_one_large_dimension_from_deciding():
    rng = np.random.default_rng(1)
    n = 3000
    group = rng.integers(0, 2, n)
    x = np.c_[rng.normal(0, 1000, n), group * 10 + rng.normal(0, 0.5, n)]  # noise dim of scale 1000
    m = analyze_state_actions(x, group, spaces.Discrete(2), n_clusters=2, backend="sklearn")
    assert all(v == FIXATED for v in m.verdicts), m.probs  # the clusters follow the informative dim


@pytest.mark.parametrize("space,acts", [
    (spaces.Box(-1.0, 1.0, (2,), np.float32), lambda r, n: r.uniform(-1, 1, (n, 2)).astype(np.float32)),
    (spaces.MultiDiscrete([3, 2]), lambda r, n: np.c_[r.integers(0, 3, n), r.integers(0, 2, n)]),
])
def test_continuous_and_multidiscrete_actions(space, acts):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    m = analyze_state_actions(x, acts(rng, 2000), space, n_clusters=4, backend="sklearn")
    assert m.counts.sum() == 2000 and m.counts.shape[1] == len(m.action_labels)


def test_image_and_dict_observations():
    rng = np.random.default_rng(0)
    space = spaces.Dict({"img": spaces.Box(0, 255, (32, 32, 3), np.uint8), "v": spaces.Box(-1, 1, (2,))})
    obs = {"img": rng.integers(0, 255, (500, 32, 32, 3), dtype=np.uint8), "v": rng.uniform(-1, 1, (500, 2))}
    m = analyze_state_actions(obs, rng.integers(0, 3, 500), spaces.Discrete(3), n_clusters=5, backend="sklearn",
                              observation_space=space)
    assert m.centroids.shape == (5, 8 * 8 * 3 + 2)


@pytest.mark.parametrize("space, pooled", [
    (spaces.Box(-1.0, 1.0, (64, 64, 4), np.float32), 8 * 8 * 4),    # RLlib's Atari wrapper: float frames
    (spaces.Box(0.0, 1.0, (4, 64, 64), np.float32), 8 * 8 * 4),     # channel first
    (spaces.Box(0, 255, (84, 84, 3), np.uint8), 8 * 8 * 3),
    (spaces.Box(-1.0, 1.0, (32, 32), np.float32), 8 * 8),
    (spaces.Box(-1.0, 1.0, (10, 3), np.float32), 30),               # a small matrix of features: as is
    (spaces.Box(-1.0, 1.0, (12, 12, 2), np.float32), 12 * 12 * 2),  # sides under 16: as is
])
def test_frames_of_any_dtype_are_pooled_to_block_means_and_feature_matrices_are_not(space, pooled):
    rng = np.random.default_rng(0)
    x = rng.uniform(space.low.min(), space.high.max(), (5,) + space.shape).astype(space.dtype)
    f = flatten_observations(x, space)
    assert f.shape == (5, pooled) and f.dtype == np.float32
    if pooled < int(np.prod(space.shape)) and space.shape[-1] <= 4:   # (H, W, C): each 8 x 8 block's mean
        h, w = space.shape[:2]
        fh, fw = h // 8, w // 8   # the blocks' sides; the rows and columns past 8 blocks are left out
        crop = x[:, :8 * fh, :8 * fw].astype(np.float64)
        want = crop.reshape(5, 8, fh, 8, fw, -1).mean(axis=(2, 4)).reshape(5, -1)
        np.testing.assert_allclose(f, want, rtol=1e-5, atol=1e-4)


def test_torch_backend_logic_on_cpu_matches_sklearn_inertia():
    x, _, _, _ = blobs(seed=3)
    tk, sk = TorchKMeans("cpu").fit(x.astype(np.float32), 6, seed=0), SklearnKMeans().fit(x, 6, seed=0)
    assert abs(tk.inertia - sk.inertia) / sk.inertia < 0.02
    labels, d2 = TorchKMeans("cpu").assign(x.astype(np.float32), tk.centroids)
    assert (labels == tk.labels).mean() > 0.999 and abs(d2.sum() - tk.inertia) / tk.inertia < 1e-3


def test_chunked_assignment_equals_the_full_distance_matrix():
    """The assignment a chunk of rows at a time (here 1,024-row chunks over 10,000 rows, the
    last one ragged) gives the argmin and the distance of the whole n x k matrix."""
    import torch

    rng = np.random.default_rng(0)
    x, c = rng.normal(size=(10_000, 16)).astype(np.float32), rng.normal(size=(37, 16)).astype(np.float32)
    tk = TorchKMeans("cpu", chunk_bytes=1)
    labels, d2 = tk.assign(x, c)
    full = torch.cdist(torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(c, dtype=torch.float64)) ** 2
    want_d, want_l = full.min(1)
    assert tk._rows_per_chunk(37) == 1024
    assert (labels == want_l.numpy()).mean() > 0.999
    assert np.allclose(d2, want_d.numpy(), rtol=1e-4, atol=1e-3)


def test_seeding_from_a_subsample_keeps_the_inertia_of_sklearn():
    """60,000 rows in 40 blobs: k-means++ seeds from 16,384 of them (the subsample path);
    after Lloyd the inertia is within 2 % of scikit-learn's full k-means++."""
    from flow1_ray.clustering import backends as B

    rng = np.random.default_rng(1)
    centres = rng.normal(0, 3, (40, 16))
    x = (centres[rng.integers(0, 40, 60_000)] + rng.normal(0, 1, (60_000, 16))).astype(np.float32)
    assert len(x) > max(B.SEED_MIN_ROWS, B.SEED_ROWS_PER_CLUSTER * 40)
    tk, sk = TorchKMeans("cpu").fit(x, 40, seed=0), SklearnKMeans().fit(x, 40, seed=0)
    assert abs(tk.inertia - sk.inertia) / sk.inertia < 0.02, (tk.inertia, sk.inertia)


def test_seeding_and_lloyd_steps_never_read_a_value_back_from_the_device():
    """k-means++ and a Lloyd step on the ``meta`` device (tensors with shapes and no values:
    any ``.item()``, ``float()``, ``bincount`` or boolean-mask index raises) run: they queue
    their work on a GPU without waiting for it (each wait was a sync; the fit reads back one
    number per Lloyd step, its convergence test)."""
    import torch

    tk = TorchKMeans("meta")
    x = torch.empty((5_000, 8), device="meta")
    gen = torch.Generator(device="cpu").manual_seed(0)
    c = tk.seed(x, (x * x).sum(1), 40, gen)
    assert c.shape == (40, 8) and c.device.type == "meta"
    new, shift, labels = tk.lloyd_step(x, c, torch.ones(5_000, device="meta"))   # a Lloyd step, likewise
    assert new.shape == (40, 8) and shift.shape == ()


def test_auto_backend_without_gpu_is_sklearn():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert resolve_backend("auto") == "sklearn"
    with pytest.raises(ValueError):
        resolve_backend("faiss")


@pytest.mark.gpu
def test_torch_cuda_backend():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, a, f, _ = blobs()
    m = analyze_state_actions(x, a, spaces.Discrete(6), n_clusters=6, backend="torch", failures=f)
    assert sorted(e.code for e in m.to_events()) == sorted([C.CHAOS, C.BLIND_SPOT, C.ERROR_FIXATION])


def test_streaming_inertia_within_two_percent_of_a_full_refit():
    from flow1_ray.clustering.streaming import StreamingKMeans

    rng = np.random.default_rng(0)
    centres = rng.normal(0, 4, (20, 8))
    def batch(n):
        return (centres[rng.integers(0, 20, n)] + rng.normal(0, 1, (n, 8))).astype(np.float32)
    warm = batch(20_000)
    sk = StreamingKMeans(20, backend="sklearn", seed=0)
    sk.fit(warm)
    seen = [warm]
    for _ in range(5):
        b = batch(5_000)
        sk.partial_fit(b)
        seen.append(b)
    data = np.concatenate(seen)
    full = SklearnKMeans().fit(data, 20, seed=0)
    assert sk.inertia(data) <= full.inertia * 1.02, (sk.inertia(data), full.inertia)
    assert sk.refits == 1  # the distribution did not move: no refit


def test_streaming_refits_when_the_states_move():
    from flow1_ray.clustering.streaming import StreamingKMeans

    rng = np.random.default_rng(1)
    sk = StreamingKMeans(5, backend="sklearn", seed=0)
    sk.fit(rng.normal(0, 1, (5000, 4)).astype(np.float32))
    sk.partial_fit((rng.normal(0, 1, (5000, 4)) * 4 + 10).astype(np.float32))
    assert sk.refits == 2


@pytest.mark.gpu
def test_the_fused_cuda_assignment_matches_float64_labels():
    """On CUDA the assignment is the fused Triton kernel: its labels are float64's (but for
    near-ties), its distances the chunked path's, and a fit through it seeds and converges."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fused, chunked = TorchKMeans("cuda"), TorchKMeans("cuda", fused=False)
    assert fused.fused, "Triton should import beside torch's CUDA build"
    rng = np.random.default_rng(3)
    for n, d, k in ((50_001, 16, 30), (20_000, 64, 256), (3_000, 5, 7)):
        x = torch.as_tensor(rng.normal(0, 1, (n, d)), dtype=torch.float32, device="cuda")
        c = x[torch.as_tensor(rng.choice(n, k, replace=False), device="cuda")]
        x2 = (x * x).sum(1)
        labels, dist = fused.nearest(x, c, x2)
        xd, cd = x.double(), c.double()
        exact = torch.cdist(xd, cd).argmin(1)
        assert float((labels == exact).double().mean()) >= 0.9999, (n, d, k)
        ref_labels, ref_dist = chunked.nearest(x, c, x2)
        assert torch.allclose(dist, ref_dist, rtol=1e-4, atol=1e-3), (n, d, k)
    assert fused.fused and fused.fused_error is None
    xb, _, _, _ = blobs()
    ref = SklearnKMeans().fit(xb, 6).inertia
    assert abs(fused.fit(xb, 6).inertia - ref) / ref < 0.02
