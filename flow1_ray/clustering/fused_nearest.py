"""The nearest centroid of every row in one Triton kernel: distance product and argmin fused.

Why: on a GPU the chunked torch assignment (one GEMM, then ``torch.min`` over each block)
spent most of its time in the min, not the product: on an H200 at n=1M, d=64, k=256 it
took 3.0 ms against a 0.49 ms fp32 FLOP floor, and TF32 products saved only 0.3 ms of that.
Here each program holds a block of rows in registers, walks the centroids a block at a
time (``tl.dot`` of rows x centroids, ``||c||^2`` added) and keeps a running min and
argmin, so the n x k distances are never written to memory at all.

Precision: ``tf32x3`` by default, three TF32 tensor-core products that recover fp32's
accuracy; ``ieee`` (fp32 on the CUDA cores) on GPUs older than Ampere; ``tf32`` when asked.
Ties keep the lower centroid index, as ``torch.min`` does. Triton ships with torch's CUDA
wheels; where it does not import or a kernel fails, :class:`~flow1_ray.clustering.backends.TorchKMeans` uses its chunked path.
Nothing here imports Ray.
"""

from __future__ import annotations

from typing import Any

PRECISIONS = ("tf32x3", "ieee", "tf32")
#: rows per program, centroids per inner step (fewer where k is smaller), warps per program:
#: the fastest tf32x3 shape of a sweep on an H200 at n=1M, d=64, k=256 (0.61 ms; 128 x 64
#: with 4 warps 0.79, 64 x 128 in ieee fp32 1.81); tl.dot needs each side >= 16
BLOCK_M = 128
BLOCK_N = 128
NUM_WARPS = 8


def available() -> bool:
    """Triton imports (it comes with torch's CUDA wheels, not with its CPU ones)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:
        return False
    return True


_KERNEL: Any = None


def precision_for(device: Any) -> str:
    """tf32x3 where the GPU has TF32 tensor cores (compute capability 8.0 on, Ampere and
    later), else ieee: fp32 products on the CUDA cores."""
    import torch

    if device.type != "cuda":
        return "tf32x3"
    return "tf32x3" if torch.cuda.get_device_capability(device)[0] >= 8 else "ieee"


def _kernel() -> Any:
    """The jitted kernel, built on first use so importing this module needs no Triton."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def nearest_kernel(x_ptr, c_ptr, c2_ptr, label_ptr, dist_ptr, n, stride_x, stride_c,
                       K: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                       PRECISION: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, BLOCK_D)
        row_ok = rows < n
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + dims[None, :],
                    mask=row_ok[:, None] & (dims[None, :] < D), other=0.0)
        best = tl.full((BLOCK_M,), float("inf"), tl.float32)
        arg = tl.zeros((BLOCK_M,), tl.int32)
        for j in range(0, K, BLOCK_N):
            cols = j + tl.arange(0, BLOCK_N)
            col_ok = cols < K
            ct = tl.load(c_ptr + cols[None, :] * stride_c + dims[:, None],
                         mask=(dims[:, None] < D) & col_ok[None, :], other=0.0)      # (BLOCK_D, BLOCK_N)
            c2 = tl.load(c2_ptr + cols, mask=col_ok, other=float("inf"))
            s = c2[None, :] - 2.0 * tl.dot(x, ct, input_precision=PRECISION)      # ||c||^2 - 2 x.c
            m, a = tl.min(s, axis=1, return_indices=True, return_indices_tie_break_left=True)
            better = m < best                     # strict: an earlier block keeps a tie
            best = tl.where(better, m, best)
            arg = tl.where(better, a + j, arg)
        tl.store(label_ptr + rows, arg.to(tl.int64), mask=row_ok)
        tl.store(dist_ptr + rows, best, mask=row_ok)

    _KERNEL = nearest_kernel
    return _KERNEL


#: widest rows the kernel takes: a block of BLOCK_M rows stays in registers
MAX_D = 128


def nearest(x: Any, c: Any, precision: str | None = None, block_m: int = BLOCK_M, block_n: int | None = None,
            num_warps: int = NUM_WARPS) -> tuple[Any, Any]:
    """(labels int64, ``||c||^2 - 2 x.c`` of the nearest centroid, float32) for float32
    ``x`` (n, d) and ``c`` (k, d) on one device; add ``||x||^2`` for the squared distance.
    The kernel is compiled once per (k, d), which a clusterer keeps fixed."""
    import torch
    import triton

    precision = precision or precision_for(x.device)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    x = x.float().contiguous()
    c = c.float().contiguous()
    n, d = x.shape
    k = c.shape[0]
    labels = torch.empty(n, dtype=torch.int64, device=x.device)
    dist = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return labels, dist
    if d > MAX_D:
        raise ValueError(f"rows of at most {MAX_D} features, got {d}")
    block_d = max(16, triton.next_power_of_2(d))
    block_n = block_n or min(BLOCK_N, max(16, triton.next_power_of_2(k)))
    _kernel()[(triton.cdiv(n, block_m),)](
        x, c, (c * c).sum(1), labels, dist, n, x.stride(0), c.stride(0),
        K=k, D=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, PRECISION=precision,
        num_warps=num_warps)
    return labels, dist
