"""The recorded fixtures (tests/data/recorded/, written by scripts/record_fixtures.py): real loops' raw
stores, re-analysed by the deterministic tier into a temporary directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from profiler.postprocess.recording import analyse_directory

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded"


def recorded_names(group: str) -> list[str]:
    """The fixtures recorded under tests/data/recorded/<group>/ (scenarios, advisor)."""
    return sorted(p.name for p in (RECORDED / group).iterdir() if (p / "truth.json").is_file())


def truth(group: str, name: str) -> dict:
    """What the loop measured with its own clock while it was recorded."""
    return json.loads((RECORDED / group / name / "truth.json").read_text())


def analysed_copy(group: str, name: str, dest: Path) -> Path:
    """A copy of the recording `group/name` in `dest`, analysed as `profview analyse` analyses it (every
    rank, and the cluster files when there are several); a job recorded as one directory per rank
    (r0/, r1/, ...) has each of them analysed."""
    shutil.copytree(RECORDED / group / name, dest, ignore=shutil.ignore_patterns("truth.json"))
    for raw in sorted(dest.rglob("raw")):
        analyse_directory(raw.parent, progress=False)
    return dest
