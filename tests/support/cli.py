"""Running the profview command line from this checkout, as a user would, and what a refusal looks like."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def python_env() -> dict:
    """The environment of a child Python process that imports profview from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def profview_command(*args: str) -> list[str]:
    """The profview command line, run from this checkout (for Popen and friends)."""
    return [sys.executable, "-m", "viewer.cli", *args]


def run_profview(*args: object) -> subprocess.CompletedProcess:
    """Run the CLI to its end as a user would, in a subprocess; its output as text."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        profview_command(*map(str, args)),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def assert_one_sentence(result: subprocess.CompletedProcess, *fragments: str, code: int = 1) -> None:
    """The command refused its input as profview must: exit `code`, one `profview: error:` line on
    stderr holding every fragment, no traceback."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("profview: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
