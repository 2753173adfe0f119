#!/usr/bin/env bash
# Install everything (venv, PyTorch CPU, test dependencies, headless Chromium), check the style and the
# architecture, and run a tier of the tests (docs/testing.md):
#
#     bash scripts/test.sh             the deterministic tier (the README's test command): ~6-7 min
#     bash scripts/test.sh --all       the deterministic tier, then the timed tier (CI runs this)
#     bash scripts/test.sh --timed     the timed tier only (scripts/load_check.sh runs this)
#
# Arguments after the tier go to every pytest run (e.g. `-k advisor`, `-x`).
# The tiers are selected by markers (setup.cfg): timing, browser, fuzz, slow. The deterministic tier is
# every test with none of them; the timed tier is every test with one. Tests that time real work
# (`timing`) run one at a time, the others on every core (pytest-xdist).
set -euo pipefail
cd "$(dirname "$0")/.."

TIERS=fast
case "${1:-}" in
    --all) TIERS="fast timed"; shift ;;
    --timed) TIERS=timed; shift ;;
esac

bash scripts/setup_env.sh
bash scripts/install_browser.sh
.venv/bin/ruff check .                             # the style (pyproject.toml)
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache                  # the architecture: layers only import downward, no cycles

status=0
pytest_run() {                                     # a run that selects nothing (exit 5, e.g. with -k) is no failure
    local rc=0
    .venv/bin/python -m pytest -q "$@" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then status=1; fi
}
for tier in $TIERS; do
    case $tier in
        fast)
            echo "== the deterministic tier"
            pytest_run -n auto -m "not (timing or browser or fuzz or slow)" "$@"
            ;;
        timed)
            echo "== the timed tier: browser, fuzz and slow tests on every core"
            pytest_run -n auto -m "(browser or fuzz or slow) and not timing" "$@"
            echo "== the timed tier: tests that time real work, one at a time"
            pytest_run -m "timing" "$@"
            ;;
    esac
done
exit $status
