"""Ascend NPU profiling: the raw JOB-directory slices (HWTS task log, training trace, Framework
description files) parsed into tables, converted to a profview Run, and written back in the
MindSpore/MindInsight 2020 output formats. See docs/ascend.md."""

from profiler.importers.ascend.job import (
    IMPORTER,
    AscendJob,
    ascend_job_devices,
    ascend_job_dirs,
    is_ascend_job_dir,
    read_ascend_job,
    read_ascend_jobs,
    to_run,
)

__all__ = [
    "IMPORTER",
    "AscendJob",
    "ascend_job_devices",
    "ascend_job_dirs",
    "is_ascend_job_dir",
    "read_ascend_job",
    "read_ascend_jobs",
    "to_run",
]
