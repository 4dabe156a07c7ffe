"""KMeans costs: flow1's streaming layer and analyze_state_actions against scikit-learn.

(a) CPU, n=200k, d=32, k=50: the cost per snapshot of the streaming layer (assign + one
mini-batch step on a new 20k batch) against a full scikit-learn refit per snapshot (what a
refit inside a forward hook, on every batch, costs); and analyze_state_actions against a
bare scikit-learn KMeans fit of the same data (20 Lloyd iterations): the overhead of flow1's own layer.
(b) GPU (``--gpu``; needs CUDA): n=1M, d=64, k=256, torch-CUDA against scikit-learn, and
the time per Lloyd iteration against the FLOP floor 2*n*k*d / peak; then the crossover at the
live clusterer's shape, measured size by size, and what the clusterer's router
(``clustering/crossover.py``) learns from its own timed fits over the same sizes, with its
regret (its engine's time / the faster one's) at each. Imports no Ray.

    python scripts/bench_kmeans.py [--reps 3] [--gpu] [--peak-tflops 67]
    python scripts/bench_kmeans.py --crossover-cpu   # the crossover with torch on the CPU
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def timed(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def blobs(n: int, d: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (k, d))
    return (centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d))).astype(np.float32)


def cpu(reps: int) -> None:
    from gymnasium import spaces
    from sklearn.cluster import KMeans

    from flow1_ray.clustering.state_action_map import analyze_state_actions
    from flow1_ray.clustering.streaming import StreamingKMeans

    n, d, k, batch = 200_000, 32, 50, 20_000
    x = blobs(n, d, k)
    new = blobs(batch, d, k, seed=1)
    stream = StreamingKMeans(k, backend="sklearn", seed=0, refit_drift=10.0)
    stream.fit(x)
    t_stream = timed(lambda: stream.partial_fit(new), reps)
    both = np.concatenate([x, new])
    t_refit = timed(lambda: KMeans(k, n_init=1, max_iter=20, random_state=0).fit(both), reps)
    print(f"(a) CPU n={n} d={d} k={k}, new batch {batch}: streaming snapshot {t_stream * 1e3:.1f} ms vs full "
          f"scikit-learn refit {t_refit * 1e3:.0f} ms -> ratio {t_stream / t_refit:.3f} (goal <= 0.1)")
    acts = np.random.default_rng(0).integers(0, 4, n)
    t_bare = timed(lambda: KMeans(k, n_init=1, max_iter=20, random_state=0).fit(x), reps)
    t_flow1 = timed(lambda: analyze_state_actions(x, acts, spaces.Discrete(4), n_clusters=k, backend="sklearn"),
                    reps)
    print(f"    analyze_state_actions {t_flow1 * 1e3:.0f} ms vs bare scikit-learn fit {t_bare * 1e3:.0f} ms -> "
          f"ratio {t_flow1 / t_bare:.2f} (goal <= 1.3)")


def gpu(reps: int, peak_tflops: float, sweep: bool = True) -> None:
    import torch
    from sklearn.cluster import KMeans

    from flow1_ray.clustering.backends import TorchKMeans

    if not torch.cuda.is_available():
        print("(b) GPU: no CUDA device here; nothing measured")
        return
    n, d, k = 1_000_000, 64, 256
    x = blobs(n, d, k)
    tk = TorchKMeans("cuda")
    tk.fit(x[:100_000], k, max_iter=2)  # warm-up
    torch.cuda.synchronize()
    t_torch = timed(lambda: (tk.fit(x, k, max_iter=20), torch.cuda.synchronize()), reps)
    xt = tk._t(x)
    c = xt[:k].clone()
    x2 = (xt * xt).sum(1)
    torch.cuda.synchronize()
    t_iter = timed(lambda: (tk.nearest(xt, c), torch.cuda.synchronize()), max(reps, 5))
    gen = torch.Generator(device="cpu").manual_seed(0)
    t_seed = timed(lambda: (tk.seed(xt, x2, k, gen), torch.cuda.synchronize()), reps)
    # the unchunked assignment (the whole n x k matrix, then its argmin) beside it, for the record
    t_full = timed(lambda: (torch.addmm((c * c).sum(1)[None, :], xt, c.T, beta=1.0, alpha=-2.0).argmin(1),
                            torch.cuda.synchronize()), max(reps, 5))
    floor = 2 * n * k * d / (peak_tflops * 1e12)
    sk = KMeans(k, n_init=1, max_iter=20, random_state=0)
    t_sk = timed(lambda: sk.fit(x), 1)
    res = tk.fit(x, k, max_iter=20)
    gap = (res.inertia - sk.inertia_) / sk.inertia_
    print(f"    quality: torch-CUDA inertia {res.inertia:.4g} vs scikit-learn {sk.inertia_:.4g} ({gap:+.2%}; each "
          f"from its own seeds: one seed's luck moves either by ~10 % on blobs, so this is a reading, not the check)")
    # the check: 5 Lloyd steps from the same seeds in both; the same algorithm must give the same inertia
    c0 = tk.seed(xt, x2, k, torch.Generator(device="cpu").manual_seed(1))
    ones = torch.ones(n, dtype=torch.float64, device=xt.device)
    c = c0
    for _ in range(5):
        c, _shift, _labels = tk.lloyd_step(xt, c, ones)
    ours = float(tk.nearest(xt, c, x2)[1].double().sum())
    ref = KMeans(k, init=c0.cpu().numpy(), n_init=1, max_iter=5, tol=0.0).fit(x)
    same = (ours - ref.inertia_) / ref.inertia_
    print(f"    correctness: 5 Lloyd steps from the same seeds, torch-CUDA {ours:.6g} vs scikit-learn {ref.inertia_:.6g} "
          f"({same:+.3%}; check: within 0.5 %: {'yes' if abs(same) <= 0.005 else 'NO'})")
    print(f"(b) GPU {torch.cuda.get_device_name()} n={n} d={d} k={k}: torch-CUDA fit {t_torch:.2f} s vs "
          f"scikit-learn {t_sk:.1f} s -> {t_sk / t_torch:.0f}x (goal >= 20x); one Lloyd assignment "
          f"{t_iter * 1e3:.2f} ms vs FLOP floor {floor * 1e3:.3f} ms at {peak_tflops:g} TFLOP/s -> "
          f"{t_iter / floor:.1f}x (goal <= 3x; the whole n x k matrix then its argmin: {t_full * 1e3:.2f} ms, "
          f"{t_full / floor:.1f}x); k-means++ seeding {t_seed * 1e3:.0f} ms of the fit")
    phases(tk, x, k, reps, sweep)
    crossover(tk, reps)


def phases(tk, x: np.ndarray, k: int, reps: int, sweep: bool = True) -> None:
    """Where a fit's time goes (the copy in, the seeding, one Lloyd step and its parts), and
    the assignment at other chunk sizes and with TF32 matrix products (labels compared with
    the fp32 ones): the figures the next change is chosen from."""
    import torch

    from flow1_ray.clustering.backends import TorchKMeans

    def run(fn):
        return timed(lambda: (fn(), sync(tk)), max(reps, 5))

    n, d = x.shape
    t_copy = run(lambda: tk._t(x))
    xt = tk._t(x)
    x2 = (xt * xt).sum(1)
    c = tk.seed(xt, x2, k, torch.Generator(device="cpu").manual_seed(0))
    ones = torch.ones(n, dtype=torch.float64, device=xt.device)
    labels = tk.nearest(xt, c)[0]
    t_step = run(lambda: tk.lloyd_step(xt, c, ones))
    t_near = run(lambda: tk.nearest(xt, c))
    t_sums = run(lambda: torch.zeros_like(c).index_add_(0, labels, xt))
    t_counts = run(lambda: torch.zeros(k, dtype=ones.dtype, device=xt.device).index_add_(0, labels, ones))
    onehot_sums = lambda: torch.zeros(k, n, dtype=xt.dtype, device=xt.device).index_put_(  # noqa: E731
        (labels, torch.arange(n, device=xt.device)), torch.ones((), dtype=xt.dtype, device=xt.device)) @ xt
    t_onehot = run(onehot_sums)
    order = lambda: torch.sort(labels)  # noqa: E731
    t_sort = run(order)
    print(f"    phases n={n} d={d} k={k} (ms): copy in {t_copy * 1e3:.2f}; Lloyd step {t_step * 1e3:.2f} = assignment "
          f"{t_near * 1e3:.2f} + sums by index_add_ {t_sums * 1e3:.2f} + counts {t_counts * 1e3:.2f} (+ the rest); "
          f"sums as a one-hot GEMM {t_onehot * 1e3:.2f}, sort of the labels {t_sort * 1e3:.2f}")
    # the reference labels: float64 distances
    xd, cd = xt.double(), c.double()
    exact = torch.addmm((cd * cd).sum(1)[None, :], xd, cd.T, beta=1.0, alpha=-2.0).argmin(1)
    del xd, cd
    chunked = TorchKMeans(str(tk.device), fused=False)
    print(f"    the assignment as run: {'fused (Triton)' if tk.fused else 'chunked'}")
    for mb in (8, 32, 128, 512):
        other = TorchKMeans(str(tk.device), chunk_bytes=mb * 1024**2, fused=False)
        print(f"    chunked assignment with {mb} MB chunks: {run(lambda: other.nearest(xt, c)) * 1e3:.2f} ms")
    agree = float((chunked.nearest(xt, c)[0] == exact).double().mean())
    print(f"    chunked assignment's labels as float64's on {agree:.4%} of rows")
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        t_tf32 = run(lambda: chunked.nearest(xt, c))
        same = float((chunked.nearest(xt, c)[0] == exact).double().mean())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    print(f"    chunked assignment with TF32 products: {t_tf32 * 1e3:.2f} ms, labels as float64's on {same:.4%} of rows")
    if tk.device.type == "cuda" and sweep:
        fused_sweep(xt, c, exact, run)


def fused_sweep(xt, c, exact, run) -> None:
    """The fused kernel's block shapes, warps and product precisions, each timed and its
    labels compared with float64's."""
    from flow1_ray.clustering import fused_nearest

    if not fused_nearest.available():
        print("    fused assignment: Triton does not import here")
        return
    rows = []
    for precision in fused_nearest.PRECISIONS:
        for bm in (64, 128, 256):
            for bn in (32, 64, 128):
                for warps in (4, 8):
                    try:
                        fn = lambda: fused_nearest.nearest(xt, c, precision, bm, bn, warps)  # noqa: E731
                        agree = float((fn()[0] == exact).double().mean())
                        rows.append((run(fn), precision, bm, bn, warps, agree))
                    except Exception as e:  # a shape the compiler refuses: say so, go on
                        print(f"    fused {precision} {bm}x{bn} warps {warps}: {type(e).__name__}: {str(e)[:120]}")
    rows.sort()
    for t, precision, bm, bn, warps, agree in rows[:6] + [r for r in rows[6:] if r[1:5] == (
            "tf32x3", fused_nearest.BLOCK_M, fused_nearest.BLOCK_N, fused_nearest.NUM_WARPS)]:
        print(f"    fused {precision:6s} rows {bm:3d} x centroids {bn:3d}, {warps} warps: {t * 1e3:.3f} ms, "
              f"labels as float64's on {agree:.4%}")
    for precision in fused_nearest.PRECISIONS:
        best = min(r for r in rows if r[1] == precision)
        print(f"    best {precision}: {best[0] * 1e3:.3f} ms at {best[2]}x{best[3]}, {best[4]} warps ({best[5]:.4%})")


def crossover(tk, reps: int) -> None:
    """Where the accelerated engine starts to beat scikit-learn at the live clusterer's shape
    (k=30, d=16, 20 Lloyd iterations; scikit-learn on one thread, as the clusterer actor
    limits it): measured size by size, then what the live clusterer's router
    (:class:`CrossoverKMeans`) learns from its own timed calls over the same sizes."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    from flow1_ray.clustering.backends import SklearnKMeans
    from flow1_ray.clustering.crossover import CrossoverKMeans

    k, d, first, sizes = 30, 16, None, (1_000, 4_000, 16_000, 64_000, 256_000)
    faster = {}
    with threadpool_limits(limits=1):
        for n in sizes:
            x = blobs(n, d, k, seed=2)
            t_gpu = timed(lambda: (tk.fit(x, k, max_iter=20), sync(tk)), reps)
            t_cpu = timed(lambda: KMeans(k, n_init=1, max_iter=20, random_state=0, tol=0.0).fit(x), reps)
            steps = (tk.fit(x, k, max_iter=20).iterations,
                     KMeans(k, n_init=1, max_iter=20, random_state=0, tol=0.0).fit(x).n_iter_)
            faster[n] = (t_gpu, t_cpu)
            if first is None and t_gpu < t_cpu:
                first = n
            print(f"    crossover k={k} d={d} n={n}: torch-{tk.device.type} {t_gpu * 1e3:.1f} ms ({steps[0]} Lloyd "
                  f"steps), scikit-learn (1 thread) {t_cpu * 1e3:.1f} ms ({steps[1]} steps)")
        print(f"    torch-{tk.device.type} is faster from n={first} rows" if first
              else "    scikit-learn faster at every size tried")
        router = CrossoverKMeans(tk, SklearnKMeans())
        for _ in range(4):
            for n in sizes:
                router.fit(blobs(n, d, k, seed=3), k, max_iter=20)
        # the router's regret at each size: its engine's time measured above / the faster one's
        regret = [faster[n][0 if router.preferred("fit", float(n * k * d)) is tk else 1] / min(faster[n])
                  for n in sizes]
        print(f"    the router after {sum(router.chosen.values())} timed fits: {router.status()['crossover']['fit']}; "
              f"its engine's time / the faster's, size by size: {', '.join(f'{r:.2f}' for r in regret)}")


def sync(tk) -> None:
    if tk.device.type == "cuda":
        import torch
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--gpu-only", action="store_true", help="skip (a): for machines without gymnasium")
    ap.add_argument("--peak-tflops", type=float, default=67.0, help="fp32 peak of the GPU (H200: 67)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the fused kernel's shape sweep")
    ap.add_argument("--crossover-cpu", action="store_true",
                    help="only the crossover, torch on the CPU (one thread) against scikit-learn: "
                         "the router's test where no GPU is")
    a = ap.parse_args()
    if a.crossover_cpu:
        import torch

        from flow1_ray.clustering.backends import TorchKMeans

        torch.set_num_threads(1)
        tk = TorchKMeans("cpu")
        tk.fit(blobs(4_000, 16, 30), 30, max_iter=2)  # warm-up
        crossover(tk, a.reps)
        return
    if not a.gpu_only:
        cpu(a.reps)
    if a.gpu or a.gpu_only:
        gpu(a.reps, a.peak_tflops, not a.no_sweep)


if __name__ == "__main__":
    main()
