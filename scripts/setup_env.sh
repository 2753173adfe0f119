#!/usr/bin/env bash
# Create ./.venv with profview and everything its tests need (shared by demo.sh, test.sh and CI).
# PyTorch is pinned to the CPU build 2.13.0: an unpinned torch would pull gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
# The framework integrations' and trackers' extras (tests/test_integration_*.py, tests/integration/test_trackers.py);
# torch stays pinned in the same command so that no dependency can pull another (CUDA) build, and
# MindSpore at the version the tests were written against (a CPU wheel; it shares numpy with torch).
.venv/bin/python -m pip install --quiet -c <(printf 'torch==2.13.0\nmindspore==2.10.0\n') \
    -e ".[test,transformers,lightning,tensorboard,mlflow,mindspore,benchmark,dask,remote]"
# The reference Ascend-style device the tests, benchmarks and sample runs use: its own distribution,
# registered as a profview.sources plug-in (not part of profview; --no-deps: it runs on the profview above).
.venv/bin/python -m pip install --quiet --no-deps -e sample_runs/reference_device
