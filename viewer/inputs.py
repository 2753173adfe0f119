"""What the viewer can open: `load_input(path) -> list[RunData]`.

A profview output directory is read as it is. Anything else is a foreign capture (a Kineto /
PyTorch profiler trace, an Ascend JOB directory, a MindSpore profiler output directory, or a format
an installed package adds) that the importer registry (profiler.importers.registry) recognises: it
is imported (profiler.postprocess.imported) into a temporary directory that lives as long as this
process, and read from there. A new format is added to the registry, not here.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from profiler.errors import InputError
from profiler.formats.documents import regular_file
from profiler.formats.names import info_files
from profiler.importers.base import Importer
from profiler.importers.registry import detect, formats_sentence
from profiler.postprocess.imported import import_capture
from viewer.rundata import RunData, load_profview_dir


def load_capture(path: Path, importer: Importer) -> list[RunData]:
    """A foreign capture of `importer`'s format, imported into a temporary directory that lives as
    long as this process, read back."""
    out = Path(tempfile.mkdtemp(prefix=f"profview-{importer.data_origin}-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    import_capture(path, out, importer.data_origin)
    return load_profview_dir(out)


def _describe_unknown(path: Path) -> str:
    """The sentence for an input that no source recognises."""
    if path.is_dir():
        if not any(path.iterdir()):
            return f"{path} is empty: it holds no profview output (expected profiler_info_<rank>.json)"
        if (path / "raw").is_dir():
            return f"{path} holds a raw store but no analysed output; run `profview analyse {path}` first"
        return f"{path} is not a profview output directory (no profiler_info_<rank>.json in it)"
    if path.is_file() and path.stat().st_size == 0:
        return f"{path} is an empty file, not a profview output directory or a trace"
    try:
        regular_file(path)
    except InputError as exc:  # a FIFO, a device, a dangling symlink: say which
        return f"{exc}: it is not a profview output directory or a trace file"
    return f"{path} is not a profview output directory, nor {formats_sentence()}"


def load_input(path: Path) -> list[RunData]:
    """Load whatever `path` is into one RunData per rank, or raise InputError with one sentence."""
    path = Path(path)
    try:
        if not path.exists():
            broken = " (it is a broken symlink or a symlink loop)" if path.is_symlink() else ""
            raise InputError(f"{shown_path(path)} does not exist{broken}")
        if path.is_dir() and info_files(path):
            runs = load_profview_dir(path)
        else:
            importer = detect(path)
            if importer is None:
                raise InputError(_describe_unknown(path))
            runs = load_capture(path, importer)
        if not runs:
            raise InputError(f"{path} holds no run")
        return runs
    except OSError as exc:  # a name too long, a symlink loop, a directory that vanished
        where = exc.filename if isinstance(exc.filename, str) else path
        raise InputError(f"cannot open {shown_path(Path(where))}: {exc.strerror or exc}") from None


def shown_path(path: Path, limit: int = 200) -> str:
    """A path for a message: whole up to `limit` characters, else its start and end."""
    text = str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"
