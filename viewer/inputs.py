"""What the viewer can open, and the one place to add more: `load_input(path) -> list[RunData]`.

Each `InputKind` recognises a kind of input by looking at it (cheaply, without parsing it all)
and loads it into `RunData`. Besides profview output directories, the viewer opens Kineto /
PyTorch profiler traces, Ascend JOB directories and MindSpore profiler output directories: their
`load` runs the importer (profiler.postprocess.imported) into a temporary directory and reads that. An input
that is recognised but has no loader is refused with a sentence that says what it is, rather
than "not a profview directory".
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from profiler.postprocess.imported import ascend_job_dirs, import_ascend_job, import_kineto_trace, import_mindspore_dir
from profiler.errors import InputError
from profiler.formats import info_files, regular_file
from viewer.rundata import RunData, load_profview_dir


@dataclass(frozen=True)
class InputKind:
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
    return bool(ascend_job_dirs(path))


def _is_mindspore_dir(path: Path) -> bool:
    """MindSpore's output files (profiler.importers.mindspore), or just its directory layout (an empty
    or broken output is then refused by the importer with a sentence that names MindSpore)."""
    from profiler.importers.mindspore import is_mindspore_dir

    return path.is_dir() and ((path / "ASCEND_PROFILER_OUTPUT").is_dir() or (path / "FRAMEWORK").is_dir()
                              or any(path.glob("*/ASCEND_PROFILER_OUTPUT")) or is_mindspore_dir(path))


def _imported(importer: Callable[[Path, Path], object], kind: str) -> Callable[[Path], list[RunData]]:
    """A loader that imports its input with `importer(path, out_dir)` into a temporary directory
    that lives as long as this process, and reads the profview outputs from there."""

    def load(path: Path) -> list[RunData]:
        out = Path(tempfile.mkdtemp(prefix=f"profview-{kind}-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        importer(path, out)
        return load_profview_dir(out)

    return load


#: A PyTorch profiler (Kineto) trace, imported, analysed like a recording and read back.
load_kineto_trace = _imported(import_kineto_trace, "kineto")
#: An Ascend JOB directory (every device: one rank each), imported and read back.
load_ascend_job = _imported(import_ascend_job, "ascend")
#: A MindSpore / MindInsight profiler output directory (one rank per device), imported and read back.
load_mindspore_dir = _imported(import_mindspore_dir, "mindspore")


#: Recognised inputs, tried in order. Add importers here.
INPUT_KINDS: list[InputKind] = [
    InputKind("profview output directory", _is_profview_dir, load_profview_dir),
    InputKind("Ascend profiling JOB directory", _is_ascend_job, load_ascend_job),
    InputKind("MindSpore profiler output directory", _is_mindspore_dir, load_mindspore_dir),
    InputKind("Chrome / Kineto trace file", _is_kineto_trace, load_kineto_trace),
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
    if path.is_file() and path.stat().st_size == 0:
        return f"{path} is an empty file, not a profview output directory or a trace"
    try:
        regular_file(path)
    except InputError as exc:                # a FIFO, a device, a dangling symlink: say which
        return f"{exc}: it is not a profview output directory or a trace file"
    return f"{path} is not a profview output directory or a trace file the viewer knows"


def load_input(path: Path) -> list[RunData]:
    """Load whatever `path` is into one RunData per rank, or raise InputError with one sentence."""
    path = Path(path)
    try:
        if not path.exists():
            broken = " (it is a broken symlink or a symlink loop)" if path.is_symlink() else ""
            raise InputError(f"{shown_path(path)} does not exist{broken}")
        for kind in INPUT_KINDS:
            if kind.detect(path):
                if kind.load is None:
                    raise InputError(f"{path} looks like a {kind.name}; importing it is not supported yet")
                runs = kind.load(path)
                if not runs:
                    raise InputError(f"{path} holds no run")
                return runs
        raise InputError(_describe_unknown(path))
    except OSError as exc:                   # a name too long, a symlink loop, a directory that vanished
        where = exc.filename if isinstance(exc.filename, str) else path
        raise InputError(f"cannot open {shown_path(Path(where))}: {exc.strerror or exc}") from None


def shown_path(path: Path, limit: int = 200) -> str:
    """A path for a message: whole up to `limit` characters, else its start and end."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 2:]} ({len(text)} characters)"
