#!/usr/bin/env bash
# Install profview, profile the ResNet tuning story (sample_runs/resnet_cifar_torch.py: a slow input
# pipeline, prefetch, a float64 GroupNorm / cast mistake, the fix), compare the stages, and open the report.
#   bash scripts/demo.sh            # serves the report on 127.0.0.1 (Ctrl-C to stop)
#   bash scripts/demo.sh --no-serve # only writes profiler_data/report.html
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
OUT=profiler_data/resnet
.venv/bin/python sample_runs/resnet_cifar_torch.py --out "$OUT"
echo
.venv/bin/profview "$OUT/a_one_worker" --summary
echo
.venv/bin/profview compare "$OUT/a_one_worker" "$OUT/b_prefetch"
.venv/bin/profview "$OUT/a_one_worker" --compare "$OUT/b_prefetch" --output profiler_data/report.html
if [ "${1:-}" != "--no-serve" ] && [ -t 0 ]; then
    exec .venv/bin/profview "$OUT/a_one_worker" --compare "$OUT/b_prefetch"
fi
