"""The output writers' contract: one registered writer per rank file, a new output is one class and one
line, profiler_info lists exactly what was written, earlier outputs no longer written are removed, a
failing writer leaves no partial file and no profiler_info, and the Chrome trace of a step range is
exactly the full trace's rows of those steps."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from profiler.analysis.results import Analysis, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.export import outputs
from profiler.export.chrome_from_events import export_chrome_trace, step_range
from profiler.export.event_file import read_event_file, write_run_events
from profiler.export.files import AtomicWrite
from profiler.export.timeline_model import timeline_events
from profiler.export.writers import WRITERS, AnalysisWriter, TimelineWriter, WriteOptions
from profiler.formats.names import RANK_FILES
from profiler.importers.kineto import read_kineto_trace
from profiler.postprocess.recording import analyse_directory, load_rank

from support.chrome_trace import trace_rows
from support.recordings import record_small_run as record  # a real recording: phases, nested ops, marks, counters


def info_outputs(out: Path) -> list[str]:
    return json.loads((out / "profiler_info_0.json").read_text())["outputs"]


class Toy(AnalysisWriter):
    """A new output: one line per step, or nothing when `silent`."""

    kind = "toy"

    def __init__(self, silent: bool = False, fail: bool = False) -> None:
        self.silent, self.fail = silent, fail

    def write(self, analysis: Analysis, out_dir: Path, options: WriteOptions) -> Optional[Path]:
        if self.silent:
            return None
        with AtomicWrite(self.path(out_dir, analysis.run.rank)) as out:
            out.tmp.write_text("".join(f"{s}\n" for s in analysis.step_trace["step"]))
            if self.fail:
                raise OSError("disk full")
        return out.path


@pytest.fixture
def toy_output(monkeypatch):
    """Register `toy_{rank}.txt` the way a new output is added: its name, its writer in the list."""
    monkeypatch.setitem(RANK_FILES, "toy", "toy_{rank}.txt")

    def register(writer: Toy) -> None:
        monkeypatch.setattr(outputs, "WRITERS", WRITERS[:-2] + [writer] + WRITERS[-2:])

    return register


def test_every_rank_file_has_exactly_one_writer():
    kinds = [w.kind for w in WRITERS]
    assert sorted(kinds) == sorted(set(RANK_FILES) - {"profiler_info"})
    names = outputs.rank_outputs(3)
    assert names[0] == "profiler_info_3.json" and len(names) == len(set(names)) == len(RANK_FILES) + 1
    assert {"timeline_3.json", "timeline_3.json.gz", "events_3.arrow"} <= set(names)
    assert [w.kind for w in WRITERS if isinstance(w, TimelineWriter)] == ["timeline", "events"]


def test_a_registered_writer_is_written_listed_and_removed_when_it_writes_nothing(tmp_path, toy_output):
    record(tmp_path)
    before = info_outputs(tmp_path)
    assert "toy_0.txt" not in before and not (tmp_path / "toy_0.txt").exists()

    toy_output(Toy())
    analyse_directory(tmp_path, progress=False)
    listed = info_outputs(tmp_path)
    assert (tmp_path / "toy_0.txt").read_text() == "".join(f"{s}\n" for s in range(6))  # 6 steps
    # in registry order: the analysis's files, the new one, then the timeline's; profiler_info last
    assert listed == before[:-3] + ["toy_0.txt"] + before[-3:]

    toy_output(Toy(silent=True))
    analyse_directory(tmp_path, progress=False)
    assert not (tmp_path / "toy_0.txt").exists(), "an earlier analysis's output this one does not write"
    assert info_outputs(tmp_path) == before


def test_a_failing_writer_leaves_the_earlier_file_whole_and_no_profiler_info(tmp_path, toy_output):
    record(tmp_path)
    toy_output(Toy())
    analyse_directory(tmp_path, progress=False)
    earlier = (tmp_path / "toy_0.txt").read_bytes()

    toy_output(Toy(fail=True))
    with pytest.raises(OSError, match="disk full"):
        analyse_directory(tmp_path, progress=False)
    assert (tmp_path / "toy_0.txt").read_bytes() == earlier
    assert not (tmp_path / "profiler_info_0.json").exists(), "no index: the viewer does not trust a half-done set"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_analysis_document_without_a_writer_is_refused(tmp_path):
    record(tmp_path)
    analysis = analyse_run(load_rank(tmp_path, 0))
    analysis.extra_json["orphan"] = {"a": 1}
    with pytest.raises(ValueError, match="orphan"):
        outputs.write_outputs(analysis, tmp_path / "out")


def test_atomic_write_names_are_unique_per_writer_and_thread(tmp_path):
    target = tmp_path / "report_0.json"
    names: list[str] = []
    barrier = threading.Barrier(8)

    def write(i: int) -> None:
        barrier.wait()
        for _ in range(20):
            with AtomicWrite(target) as out:
                names.append(out.tmp.name)
                out.tmp.write_text(str(i))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names) == len(set(names)) == 160
    assert all(re.fullmatch(r"\.report_0\.json\.\d+-\d+-\d+\.tmp", n) for n in names)
    assert target.read_text() in {str(i) for i in range(8)}
    assert [p.name for p in tmp_path.iterdir()] == ["report_0.json"]


def test_the_chrome_trace_of_a_step_range_is_the_full_traces_rows_of_those_steps(tmp_path, captures):
    record(tmp_path)
    cases = [
        (load_rank(tmp_path, 0), 2, 4),
        (ensure_steps(read_kineto_trace(captures / "kineto" / "sampled_rank-0.json.gz")), 552, 552),
    ]
    for i, (run, first, last) in enumerate(cases):
        ev = timeline_events(run)
        ef = read_event_file(write_run_events(run, tmp_path / f"events_{i}.arrow"))
        full = export_chrome_trace(ef, tmp_path / f"full_{i}.json")
        part = export_chrome_trace(ef, tmp_path / f"part_{i}.json", step_range(first, last))
        full_rows, full_rest = trace_rows(full)
        part_rows, part_rest = trace_rows(part)
        step = np.concatenate([ev.complete.step[ev.complete_order], ev.points.step[ev.points_order]])
        assert len(step) == len(full_rows)
        keep = (step >= first) & (step <= last)
        assert 0 < keep.sum() < len(full_rows)
        assert part_rows == [row for row, k in zip(full_rows, keep) if k]

        whole, ranged = json.loads(full.read_text()), json.loads(part.read_text())
        assert ranged["otherData"] == whole["otherData"]
        assert [e for e in ranged["traceEvents"] if e["ph"] == "M"] == [
            e for e in whole["traceEvents"] if e["ph"] == "M"
        ]
        launches = run.ops[(run.ops["device"] == "cpu") & (run.ops["correlation"] >= 0)]
        in_range = set(launches.loc[launches["step"].between(first, last), "correlation"].tolist())
        flows = [e for e in ranged["traceEvents"] if e["ph"] in "sf"]
        all_flows = [e for e in whole["traceEvents"] if e["ph"] in "sf"]
        assert flows == [e for e in all_flows if e["id"] in in_range]
        if i == 1:  # the Kineto capture's launches: some of the range's, not all of them
            assert 0 < len(flows) < len(all_flows)
        assert [line for line in part_rest if '"ph":"s"' not in line and '"ph":"f"' not in line] == [
            line for line in full_rest if '"ph":"s"' not in line and '"ph":"f"' not in line
        ]
