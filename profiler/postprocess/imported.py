"""Importing foreign captures into a profview output directory (what `profview import-*` runs).

Each importer reads a capture into Runs (profiler.importers.*), analyses them like a recording and
writes the usual outputs, one rank per Run: the viewer and `profview compare` then read the
directory like any other. Problems with the input raise ProfviewError with one sentence.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

from profiler.errors import ProfviewError
from profiler.model import Run

#: `import-ascend --format` values and the outputs each writes.
ASCEND_FORMATS = {"profview": ("profview",), "mindspore": ("mindspore",), "both": ("profview", "mindspore")}


def write_runs(runs: Iterable[Run], out_dir: "str | os.PathLike[str]",
               source: "str | os.PathLike[str] | None" = None) -> list[Path]:
    """Analyse each run and write its outputs into `out_dir` (one rank each; ranks must differ).

    `source` (what was imported) is kept as `source_path` in profiler_info, for the viewer's titles.
    """
    from profiler.analysis.results import analyse_run
    from profiler.analysis.steps import ensure_steps
    from profiler.export.outputs import write_outputs

    runs = list(runs)
    ranks = [run.rank for run in runs]
    if len(set(ranks)) != len(ranks):
        raise ProfviewError(f"the imported runs claim the same rank more than once (ranks {ranks}), "
                            "so they cannot share one output directory")
    written: list[Path] = []
    for run in runs:
        if source is not None:
            run.info.setdefault("source_path", str(source))
        written += _writing(out_dir, lambda: write_outputs(analyse_run(ensure_steps(run)), Path(out_dir)))
    return written


def _writing(out_dir: "str | os.PathLike[str]", write: Callable[[], list[Path]]) -> list[Path]:
    """Run a writer, turning a file-system failure into one sentence about `out_dir`."""
    try:
        return write()
    except OSError as exc:
        raise ProfviewError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None


def ascend_job_dirs(path: Path) -> list[Path]:
    """`path` when it is an Ascend JOB directory, else its JOB* subdirectories that are."""
    from profiler.importers.ascend import is_ascend_job_dir

    if is_ascend_job_dir(path):
        return [path]
    return [p for p in sorted(path.glob("JOB*")) if is_ascend_job_dir(p)] if path.is_dir() else []


def import_ascend_job(job_dir: "str | os.PathLike[str]", out_dir: "str | os.PathLike[str]",
                      formats: Sequence[str] = ("profview",)) -> list[Path]:
    """Import every device of an Ascend JOB directory (or of its JOB* subdirectories) into `out_dir`.

    `formats`: "profview" writes the profview outputs with one rank per device (rank = device
    id); "mindspore" writes the MindSpore/MindInsight 2020 files of each device
    (write_mindspore_outputs). Returns the files written.
    """
    from profiler.importers.ascend import ascend_job_devices, read_ascend_job, to_run
    from profiler.export.mindspore import write_mindspore_outputs

    job_dir, out = Path(job_dir), Path(out_dir)
    dirs = ascend_job_dirs(job_dir)
    if not dirs:
        read_ascend_job(job_dir)            # raises the parser's sentence (missing, no slices, ...)
    jobs = [read_ascend_job(d, device) for d in dirs for device in ascend_job_devices(d)]
    devices = [job.device_id for job in jobs]
    if len(set(devices)) != len(devices):
        raise ProfviewError(f"{job_dir} holds the same device more than once across its JOB directories "
                            f"(devices {devices}); import one JOB directory at a time")
    written: list[Path] = []
    if "mindspore" in formats:
        for job in jobs:
            written += _writing(out, lambda: write_mindspore_outputs(job, out))
    if "profview" in formats:
        written += write_runs([to_run(job) for job in jobs], out, source=job_dir)
    return written


def import_kineto_trace(trace: "str | os.PathLike[str]", out_dir: "str | os.PathLike[str]") -> list[Path]:
    """Import a PyTorch profiler (Kineto) trace file into `out_dir` (its rank from the trace)."""
    from profiler.importers.kineto import read_kineto_trace

    return write_runs([read_kineto_trace(trace)], out_dir, source=trace)


def import_mindspore_dir(path: "str | os.PathLike[str]", out_dir: "str | os.PathLike[str]") -> list[Path]:
    """Import a MindSpore / MindInsight profiler output directory into `out_dir` (one rank per device)."""
    from profiler.importers.mindspore import read_mindspore_dir

    return write_runs(read_mindspore_dir(path), out_dir, source=path)
