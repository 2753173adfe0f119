"""Importing foreign captures into a profview output directory (what `profview import` runs).

The importer registry (profiler.importers.registry) finds the capture's format and reads it into
Runs; each is analysed like a recording and written as the usual outputs, one rank per Run: the
viewer and `profview compare` then read the directory like any other. Problems with the input raise
ProfviewError with one sentence.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from profiler.errors import ProfviewError
from profiler.formats.names import info_files
from profiler.importers import ascend
from profiler.importers.base import Importer
from profiler.importers.registry import detect, formats_sentence, importer_named
from profiler.memory import give_back_freed_memory
from profiler.model import Run
from profiler.progress import current as current_progress
from profiler.spill import spilling

#: `profview import --format` values and the outputs each writes. "mindspore" (the MindSpore /
#: MindInsight 2020 files) is written from Ascend JOB directories only.
ASCEND_FORMATS = {"profview": ("profview",), "mindspore": ("mindspore",), "both": ("profview", "mindspore")}


#: The resident memory a big import keeps its spilled pages under unless told otherwise (issue #32's bound).
DEFAULT_MEMORY_LIMIT = 10**9


@dataclass(frozen=True)
class SpillSetting:
    """Where an import spills its big arrays (profiler/spill.py) and the memory it keeps them under
    (`profview import --spill-dir DIR --memory-limit SIZE`; docs/kineto.md, "The memory limit")."""

    directory: Optional[Path] = None  # None: beside the output directory, on its disk
    memory_limit: Optional[int] = DEFAULT_MEMORY_LIMIT  # bytes of RSS; None: pages dropped only between stages


#: Spilling beside the output, under DEFAULT_MEMORY_LIMIT.
DEFAULT_SPILL = SpillSetting()


def import_capture(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    data_origin: Optional[str] = None,
    formats: Sequence[str] = ("profview",),
    spill: SpillSetting = DEFAULT_SPILL,
) -> list[Path]:
    """Import the capture at `path` into `out_dir` and return the files written.

    Its format is the one the registry detects, or the one named `data_origin` ("kineto", "ascend",
    "mindspore", or an installed one). `formats` (ASCEND_FORMATS' values) may add the MindSpore
    files of an Ascend JOB directory. `spill` says where big arrays go and the memory to keep under.
    """
    path = Path(path)
    importer = importer_named(data_origin) if data_origin is not None else capture_format(path)
    if set(formats) != {"profview"}:
        if importer is not ascend.IMPORTER:
            raise ProfviewError(
                f"{path} is read as {importer.title_with_article}, which is imported as profview outputs only: "
                "the MindSpore files (--format mindspore or both) are written from Ascend JOB "
                "directories"
            )
        return import_ascend_job(path, out_dir, formats)
    with spilling_beside(out_dir, spill):
        return write_runs(importer.runs(path), out_dir, source=path)


def spilling_beside(
    out_dir: str | os.PathLike[str], setting: SpillSetting = DEFAULT_SPILL
) -> AbstractContextManager[None]:
    """Spill a big import's arrays (profiler/spill.py) into `setting`'s directory, or else into files on the output
    directory's disk: the directory itself, or the nearest of its parents that exists (it is made when the
    outputs are written); the spilled pages kept under `setting`'s memory limit."""
    if setting.directory is not None:
        directory = Path(setting.directory)
        if not directory.is_dir():
            raise ProfviewError(f"the spill directory {directory} is not a directory")
    else:
        directory = Path(out_dir).absolute()
        while not directory.is_dir() and directory != directory.parent:
            directory = directory.parent
    return spilling(directory, resident_limit=setting.memory_limit)


def capture_format(path: Path) -> Importer:
    """The format of the capture at `path` (profiler.importers.registry.detect), or ProfviewError
    with one sentence saying what `path` is instead."""
    if not path.exists():
        raise ProfviewError(f"{path} does not exist" + (" (it is a broken symlink)" if path.is_symlink() else ""))
    importer = detect(path)
    if importer is not None:
        return importer
    if path.is_dir() and info_files(path):
        raise ProfviewError(f"{path} is already a profview output directory: open it with `profview {path}`")
    raise ProfviewError(f"{path} is not a capture profview imports: it is not {formats_sentence()}")


def write_runs(
    runs: Iterable[Run], out_dir: str | os.PathLike[str], source: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Analyse each run and write its outputs into `out_dir` (one rank each; ranks must differ).

    `source` (what was imported) is kept as `source_path` in profiler_info, for the viewer's titles.
    """
    from profiler.analysis.steps import ensure_steps

    runs = list(runs)
    ranks = [run.rank for run in runs]
    if len(set(ranks)) != len(ranks):
        raise ProfviewError(
            f"the imported runs claim the same rank more than once (ranks {ranks}), "
            "so they cannot share one output directory"
        )
    written: list[Path] = []
    for run in runs:
        if source is not None:
            run.info.setdefault("source_path", str(source))
        written += _writing(out_dir, lambda run=run: _write_run(ensure_steps(run), Path(out_dir)))
    return written


def _write_run(run: Run, out_dir: Path) -> list[Path]:
    """The run's timeline first, which needs only the run (a big trace's timeline tables then do not come on
    top of the analysis's: docs/kineto.md, "Reading in chunks"), then the analysis and every other output."""
    from profiler.analysis.results import analyse_run
    from profiler.export.outputs import write_outputs, write_timeline

    progress = current_progress()
    progress.stage(f"writing the timeline of rank {run.rank}")
    timeline = write_timeline(run, out_dir)
    give_back_freed_memory()
    progress.stage(f"analysing rank {run.rank}")
    analysis = analyse_run(run)
    progress.stage(f"writing the outputs of rank {run.rank}")
    return write_outputs(analysis, out_dir, timeline=lambda: timeline)


def _writing(out_dir: str | os.PathLike[str], write: Callable[[], list[Path]]) -> list[Path]:
    """Run a writer, turning a file-system failure into one sentence about `out_dir`."""
    try:
        return write()
    except OSError as exc:
        raise ProfviewError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None


def import_ascend_job(
    job_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], formats: Sequence[str] = ("profview",)
) -> list[Path]:
    """Import every device of an Ascend JOB directory (or of its JOB* subdirectories) into `out_dir`.

    `formats`: "profview" writes the profview outputs with one rank per device (rank = device
    id); "mindspore" writes the MindSpore/MindInsight 2020 files of each device
    (write_mindspore_outputs). Returns the files written.
    """
    from profiler.export.mindspore import write_mindspore_outputs

    out = Path(out_dir)
    jobs = ascend.read_ascend_jobs(job_dir)
    written: list[Path] = []
    if "mindspore" in formats:
        for job in jobs:
            written += _writing(out, lambda job=job: write_mindspore_outputs(job, out))
    if "profview" in formats:
        written += write_runs([ascend.to_run(job) for job in jobs], out, source=job_dir)
    return written


def import_kineto_trace(trace: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Import a PyTorch profiler (Kineto) trace file into `out_dir` (its rank from the trace)."""
    return import_capture(trace, out_dir, data_origin="kineto")


def import_mindspore_dir(path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Import a MindSpore / MindInsight profiler output directory into `out_dir` (one rank per device)."""
    return import_capture(path, out_dir, data_origin="mindspore")
