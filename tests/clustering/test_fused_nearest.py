"""The fused CUDA assignment (``clustering/fused_nearest.py``) run through Triton's own CPU
interpreter: the kernel's masks, blocks, ties and limits checked against float64 labels
where no GPU is. A subprocess, because the interpreter is chosen when the kernel is built;
on a device machine the gpu-marked tests in ``test_state_action.py`` run it compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

CASES = [  # (rows, features, centroids): ragged row blocks, k under and over a block, d under 16
    (1, 3, 1), (129, 5, 7), (1_000, 16, 30), (700, 64, 256), (300, 128, 129), (257, 33, 200)]

SCRIPT = r"""
import json, sys
import numpy as np, torch
from flow1_ray.clustering import fused_nearest as F
out = {}
rng = np.random.default_rng(0)
for n, d, k in json.loads(sys.argv[1]):
    x = torch.as_tensor(rng.normal(0, 1, (n, d)), dtype=torch.float32)
    c = torch.as_tensor(rng.normal(0, 1, (k, d)), dtype=torch.float32)
    ref = (c.double() ** 2).sum(1)[None, :] - 2 * x.double() @ c.double().T
    for precision in F.PRECISIONS:
        labels, dist = F.nearest(x, c, precision)
        out[f"{n},{d},{k},{precision}"] = [float((labels == ref.argmin(1)).double().mean()),
                                           float((dist.double() - ref.min(1).values).abs().max()),
                                           str(labels.dtype), str(dist.dtype)]
c = torch.as_tensor(rng.normal(0, 1, (50, 8)), dtype=torch.float32)   # 3 copies: ties within and across blocks
labels, _ = F.nearest(torch.as_tensor(rng.normal(0, 1, (2_000, 8)), dtype=torch.float32), torch.cat([c, c, c]))
out["ties"] = max(labels.tolist())
out["empty"] = list(F.nearest(torch.empty((0, 4)), c[:, :4])[0].shape)
for bad in ((torch.empty((5, F.MAX_D + 1)), torch.empty((2, F.MAX_D + 1))), (c, c, "fp16")):
    try:
        F.nearest(*bad)
        out.setdefault("errors", []).append(None)
    except ValueError as e:
        out.setdefault("errors", []).append(str(e))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("n,d,k", CASES)
@pytest.mark.parametrize("precision", ["tf32x3", "ieee", "tf32"])
def test_labels_and_distances_are_float64s(interpreted, n, d, k, precision):
    agree, err, label_dtype, dist_dtype = interpreted[f"{n},{d},{k},{precision}"]
    assert agree == 1.0, f"expected the float64 labels on every row, actual {agree:.4%}"
    assert err < 1e-3 * max(1, d), f"expected ||c||^2 - 2 x.c within rounding, actual max error {err}"
    assert (label_dtype, dist_dtype) == ("torch.int64", "torch.float32")


def test_a_tie_goes_to_the_lower_centroid_and_no_rows_give_no_labels(interpreted):
    assert interpreted["ties"] < 50, "expected the first of three equal centroids to win every tie"
    assert interpreted["empty"] == [0]


def test_rows_too_wide_and_an_unknown_precision_are_refused(interpreted):
    wide, precision = interpreted["errors"]
    assert wide == "rows of at most 128 features, got 129"
    assert precision == "precision must be one of ('tf32x3', 'ieee', 'tf32'), got 'fp16'"


def test_a_failing_kernel_hands_the_assignment_to_the_chunked_path_and_says_so(caplog):
    """Compiled (not interpreted) on a machine with no GPU driver, the kernel raises: the
    answer is still the chunked path's, the failure is kept and logged once."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET"):
        pytest.skip("a GPU is visible or Triton interprets: the kernel would run")
    from flow1_ray.clustering.backends import TorchKMeans

    x = torch.randn(500, 8)
    c, x2 = x[:5].clone(), (x * x).sum(1)
    tk = TorchKMeans("cpu", fused=True)
    with caplog.at_level("WARNING", logger="flow1_ray.clustering.backends"):
        labels, dist = tk.nearest(x, c, x2)
        tk.nearest(x, c, x2)
    ref_labels, ref_dist = TorchKMeans("cpu").nearest(x, c, x2)
    assert torch.equal(labels, ref_labels) and torch.allclose(dist, ref_dist)
    assert tk.fused is False and tk.fused_error, tk.fused_error
    assert [r.getMessage() for r in caplog.records].count(
        f"flow1: the fused CUDA assignment failed ({tk.fused_error}); the clusterer assigns with chunked "
        "matrix products from now on") == 1
