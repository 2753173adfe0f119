#!/usr/bin/env bash
# Headless Chromium + ChromeDriver for the browser tests (Debian packages). (The offline speedscope
# build that checks our Chrome trace in a third-party viewer is installed by its test, with npm.)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
