#!/usr/bin/env bash
# Install everything (venv, PyTorch CPU, test dependencies, headless Chromium) and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
bash scripts/install_browser.sh
.venv/bin/lint-imports --no-cache                  # the architecture: layers only import downward, no cycles
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
