#!/usr/bin/env bash
# The GPU check for the device machine (torch with CUDA, scikit-learn, numpy; no Ray, no
# cuML, maybe no gymnasium or pytest): the KMeans benchmark's GPU part with its correctness
# check (5 Lloyd steps from the same seeds in torch-CUDA and scikit-learn, within 0.5 %), a
# fit's phases and the fused Triton kernel's shape sweep (--no-sweep skips it, ~90 s), then
# the @pytest.mark.gpu tests when pytest and gymnasium are importable (gymnasium can travel
# as a wheel). One call, for the device tool:  bash scripts/gpu_check.sh [--no-sweep]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
"$PY" scripts/bench_kmeans.py --gpu-only --reps 3 "$@"
rc=$?
if "$PY" -c "import pytest, gymnasium" 2>/dev/null; then
  # -o addopts=: one process (the suite's two pytest-xdist workers need pytest-xdist, maybe absent here)
  "$PY" -m pytest -q -o addopts= -m gpu tests/clustering/test_state_action.py tests/hub/test_clusterer.py tests/clustering/test_crossover.py -p no:cacheprovider || rc=1
else
  echo "pytest or gymnasium missing here: the @pytest.mark.gpu tests were not run"
fi
exit $rc
