#!/usr/bin/env bash
# Install profview, profile a sample training run, analyse it, and open the report.
#   bash scripts/demo.sh            # serves the report on 127.0.0.1 (Ctrl-C to stop)
#   bash scripts/demo.sh --no-serve # only writes profiler_data/report.html
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
OUT=profiler_data/numpy_mlp
.venv/bin/python sample_runs/numpy_mlp.py --out "$OUT"
.venv/bin/profview "$OUT" --summary
.venv/bin/profview "$OUT" --output profiler_data/report.html
if [ "${1:-}" != "--no-serve" ] && [ -t 0 ]; then
    exec .venv/bin/profview "$OUT"
fi
