"""speedscope's offline build, installed from the npm registry once into a cache, and a quiet file server."""

from __future__ import annotations

import os
import shutil
import subprocess
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest

SPEEDSCOPE = "speedscope@1.25.0"


def speedscope_release() -> Path:
    """speedscope's offline build (dist/release), installed with npm when not cached yet."""
    cache = Path(os.environ.get("PROFVIEW_NPM_CACHE", Path.home() / ".cache" / "profview-tests"))
    release = cache / "node_modules" / "speedscope" / "dist" / "release"
    if not (release / "index.html").exists():
        npm = shutil.which("npm")
        if npm is None:
            if os.environ.get("CI"):
                pytest.fail("npm is not installed (apt-get install npm)")
            pytest.skip("npm is not installed")
        cache.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), SPEEDSCOPE],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
    return release


class QuietHandler(SimpleHTTPRequestHandler):
    """A file server that does not log every request."""

    def log_message(self, format, *args):
        pass
