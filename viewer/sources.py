"""What the viewer can open, and the one place to add more: `load_input(path) -> list[RunData]`.

Each `Source` recognises a kind of input by looking at it (cheaply, without parsing it all)
and loads it into `RunData`. Today the viewer reads profview output directories; importers
(Kineto / PyTorch profiler traces, Ascend JOB directories, MindSpore profiler output) plug in
here by giving their `Source` a `load` that runs the importer and then reads the directory it
wrote. Until they exist, such inputs are recognised and refused with a sentence that says what
they are, rather than "not a profview directory".
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from viewer.errors import InputError
from viewer.rundata import RunData, info_files, load_profview_dir


@dataclass(frozen=True)
class Source:
    """One kind of input: how to recognise it and how to load it (None: recognised, not supported yet)."""

    name: str
    detect: Callable[[Path], bool]
    load: Optional[Callable[[Path], list[RunData]]] = None


def _is_profview_dir(path: Path) -> bool:
    return path.is_dir() and bool(info_files(path))


def _is_kineto_trace(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and (name.endswith(".json") or name.endswith(".json.gz") or ".pt.trace." in name)


def _is_ascend_job(path: Path) -> bool:
    return path.is_dir() and (any(path.glob("hwts.log.data.*")) or any(path.glob("JOB*/hwts.log.data.*")))


def _is_mindspore_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "ASCEND_PROFILER_OUTPUT").is_dir() or (path / "FRAMEWORK").is_dir()
                              or any(path.glob("*/ASCEND_PROFILER_OUTPUT")))


def load_kineto_trace(path: Path) -> list[RunData]:
    """A PyTorch profiler (Kineto) trace: imported (profiler.sources.kineto), analysed like a recording,
    written to a temporary directory that lives as long as this process, and read from there."""
    from profiler.analyse import analyse_loaded
    from profiler.export.outputs import write_outputs
    from profiler.sources.kineto import read_kineto_trace

    run = read_kineto_trace(path)
    out = Path(tempfile.mkdtemp(prefix="profview-kineto-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    write_outputs(analyse_loaded(run), out)
    return load_profview_dir(out)


#: Recognised inputs, tried in order. Add importers here.
SOURCES: list[Source] = [
    Source("profview output directory", _is_profview_dir, load_profview_dir),
    Source("Ascend profiling JOB directory", _is_ascend_job),
    Source("MindSpore profiler output directory", _is_mindspore_dir),
    Source("Chrome / Kineto trace file", _is_kineto_trace, load_kineto_trace),
]


def _describe_unknown(path: Path) -> str:
    """The sentence for an input that no source recognises."""
    if path.is_dir():
        if not any(path.iterdir()):
            return f"{path} is empty: it holds no profview output (expected profiler_info_<rank>.json)"
        if (path / "raw").is_dir():
            return (f"{path} holds a raw store but no analysed output; "
                    f"run `profview analyse {path}` first")
        return f"{path} is not a profview output directory (no profiler_info_<rank>.json in it)"
    return f"{path} is not a profview output directory or a trace file the viewer knows"


def load_input(path: Path) -> list[RunData]:
    """Load whatever `path` is into one RunData per rank, or raise InputError with one sentence."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist")
    for source in SOURCES:
        if source.detect(path):
            if source.load is None:
                raise InputError(f"{path} looks like a {source.name}; importing it is not supported yet")
            runs = source.load(path)
            if not runs:
                raise InputError(f"{path} holds no run")
            return runs
    raise InputError(_describe_unknown(path))
