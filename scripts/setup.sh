#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with the CPU build of
# torch==2.13.0 installed first (so that nothing resolves a multi-GB CUDA build), then
# flow1-ray itself in editable mode with its test extra. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
quiet .venv/bin/python -m pip install -q --upgrade pip
quiet .venv/bin/python -m pip install -q "torch==2.13.0"
quiet .venv/bin/python -m pip install -q -e ".[test]"
echo "flow1-ray installed in .venv ($(.venv/bin/python -c 'import flow1_ray, ray, torch; print(f"flow1_ray {flow1_ray.__version__}, ray {ray.__version__}, torch {torch.__version__}")'))"
