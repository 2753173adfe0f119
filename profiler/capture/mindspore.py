"""MindSpore's side of a recording: the run is a MindSpore run, and MindSpore's own Profiler output is merged.

Recording side (`MindSporeCapture`, a Source; `profiler.integrations.mindspore.ProfviewCallback`
adds it, a custom loop may pass it in `Profiler(sources=[...])`). Its presence in a recording
makes the advisor speak MindSpore (sink mode, `num_parallel_workers`, ...). With
`run_profiler=True` it runs MindSpore's own profiler (`mindspore.profiler.profile`) for the
recording, writing into `raw/r{rank}-p{pid}-mindspore/` beside the raw store; with `profiler_dir`
it only names the directory where the user's own MindSpore profiler writes.

Analysis side (`merge_mindspore_profiler`). MindSpore names each output directory
`<host>_<pid>_<time>_ascend_ms`; the ones of the recording's process are read with the MindSpore
importer (`importers.mindspore.read_mindspore_dir`: the MindSpore 2.x CPU layout) and their op
launches join the run's op table. Clock: MindSpore stamps CPU launches in Unix ns, the run counts
from its own Unix origin, so an op's run time is its Unix time minus `origin_unix_ns`. A
directory that cannot be read (not written yet: MindSpore writes at its profiler's stop) leaves
the run as it is, with a warning saying so.

mindspore is imported only when the source starts; `import profiler` never imports it.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from profiler.capture.base import Source
from profiler.errors import ProfviewError
from profiler.importers.mindspore import read_mindspore_dir
from profiler.kernels.intervals import assign_steps
from profiler.model import OP_COLUMNS, Run, conform

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder
    from profiler.store.load import Recording

#: MindSpore's output directory of one process: <host>_<pid>_<time>_ascend_ms
_OUTPUT_DIR = re.compile(r"_(?P<pid>\d+)_\d+_ascend_ms$")
#: the device target -> the profiler activities that cover it (names of mindspore.profiler.ProfilerActivity)
_ACTIVITIES = {"CPU": ("CPU",), "GPU": ("CPU", "GPU"), "Ascend": ("CPU", "NPU")}


class MindSporeCapture(Source):
    """Marks a MindSpore recording and merges MindSpore's own profiler output (see the module doc).

    Args:
        run_profiler: run `mindspore.profiler.profile` from start() to stop() (its output goes to
            `profiler_dir`, default `raw/r{rank}-p{pid}-mindspore/` beside the raw store).
        profiler_dir: where MindSpore's profiler writes (yours, when run_profiler is False).
        **details: facts about the run for profiler_info (dataset_sink_mode, ...).
    """

    name = "mindspore"

    def __init__(
        self, run_profiler: bool = False, profiler_dir: Optional[str | os.PathLike] = None, **details: Any
    ) -> None:
        super().__init__()
        self.run_profiler = run_profiler
        self.profiler_dir = Path(profiler_dir) if profiler_dir is not None else None
        self.details.update(details)
        self._profile: Any = None

    def start(self, recorder: Recorder) -> None:
        try:
            import mindspore
        except ImportError as exc:
            self.status = f"absent: mindspore is not importable ({exc})"
            return
        if self.run_profiler and self.profiler_dir is None:
            raw = Path(recorder.writer.path)
            self.profiler_dir = raw.with_name(f"{raw.stem}-mindspore")
        self.details.update(
            {
                "mindspore": mindspore.__version__,
                "pid": os.getpid(),
                "runs_profiler": self.run_profiler,
                "profiler_dir": str(self.profiler_dir) if self.profiler_dir is not None else None,
            }
        )
        if self.run_profiler:
            self._profile = _start_profile(mindspore, self.profiler_dir)

    def stop(self) -> None:
        """Stop MindSpore's profiler: it writes and parses its output now (a second or so)."""
        profile, self._profile = self._profile, None
        if profile is not None:
            profile.stop()

    @classmethod
    def merge(cls, run: Run, recording: Recording) -> Run:
        """The launches MindSpore's profiler recorded in this process join the op table (merge_mindspore_profiler)."""
        details = recording.tables.sources.get(cls.name, {})
        if not details.get("profiler_dir"):
            return run
        return merge_mindspore_profiler(run, Path(details["profiler_dir"]), int(details.get("pid", 0)))


def _start_profile(mindspore: Any, directory: Path) -> Any:
    """mindspore.profiler.profile over the activities of the device target, writing into `directory`."""
    from mindspore.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    target = str(mindspore.get_context("device_target"))
    activities = [getattr(ProfilerActivity, a) for a in _ACTIVITIES.get(target, ("CPU",))]
    directory.mkdir(parents=True, exist_ok=True)
    prof = profile(activities=activities, on_trace_ready=tensorboard_trace_handler(str(directory)))
    prof.start()
    return prof


def process_output_dirs(directory: Path, pid: int) -> list[Path]:
    """MindSpore's output directories of process `pid` in `directory`, oldest first."""
    found = (
        [
            p
            for p in sorted(directory.iterdir())
            if p.is_dir() and (m := _OUTPUT_DIR.search(p.name)) and int(m["pid"]) == pid
        ]
        if directory.is_dir()
        else []
    )
    return found


def merge_mindspore_profiler(run: Run, directory: Path, pid: int) -> Run:
    """`run` with the CPU op launches of MindSpore's profiler output of process `pid` in `directory`."""
    warns = run.info.setdefault("warnings", [])
    outputs = process_output_dirs(directory, pid)
    if not outputs:
        warns.append(
            f"MindSpore's profiler output of process {pid} is not in {directory} (MindSpore writes it when "
            "its profiler stops): its ops were not merged; `profview analyse` merges it once it is there"
        )
        return run
    origin_unix = int(run.info.get("clock", {}).get("origin_unix_ns", 0))
    ops, merged = [run.ops], []
    for output in outputs:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                found = read_mindspore_dir(output)
        except ProfviewError as exc:
            warns.append(
                f"MindSpore profiler output {output.name} was not merged ({exc}); MindSpore writes its files "
                "when its profiler stops: `profview analyse` merges them once they are there"
            )
            continue
        warns.extend(f"{output.name}: {w.message}" for w in caught)
        for imported in found:
            clock = imported.info.get("clock", {})
            if clock.get("clock") != "host_realtime":
                warns.append(
                    f"MindSpore profiler output {output.name} ({imported.info['mindspore']['layout']} layout) "
                    "has no Unix clock to place it on the recording's: not merged"
                )
                continue
            shift = int(clock["origin_unix_ns"]) - origin_unix
            ops.append(conform(imported.ops.assign(start_ns=imported.ops["start_ns"] + shift), OP_COLUMNS))
            merged.append({"directory": str(output), "rank": imported.rank, "ops": int(len(imported.ops))})
    if merged:
        table = conform(pd.concat(ops, ignore_index=True), OP_COLUMNS)
        table["step"] = assign_steps(table["start_ns"].to_numpy(), run.steps)
        run.ops = table.sort_values("start_ns", kind="stable", ignore_index=True)
    run.info.setdefault("sources", {}).setdefault("mindspore", {})["merged"] = merged
    return run
