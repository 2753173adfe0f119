#!/usr/bin/env bash
# Headless Chromium + ChromeDriver for the browser tests (Debian packages), and the offline
# speedscope build used to check that our Chrome trace loads in a third-party viewer.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
