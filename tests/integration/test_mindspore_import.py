"""MindSpore / MindInsight profiler output directories -> Runs, checked against numbers computed
here directly from the files."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from profiler.errors import ProfviewError
from profiler.importers.ascend import read_ascend_job, to_run
from profiler.importers.mindspore import is_mindspore_dir, read_mindspore_dir

STEP_TRACE = "step_trace_raw_1_detail_time.csv"


@pytest.fixture(scope="module")
def cpu_dir(captures: Path) -> Path:
    return captures / "mindspore_cpu" / "cnn_50steps_ascend_ms"


@pytest.fixture(scope="module")
def gold_run(gold: Path):
    runs = read_mindspore_dir(gold)
    assert len(runs) == 1
    return runs[0]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _tables(run) -> dict[str, pd.DataFrame]:
    """The run's tables on the absolute device clock, without the source column (for cross-source equality)."""
    origin = run.info["clock"]["origin_device_ns"]
    steps = run.steps.copy()
    for c in ("start_ns", "end_ns", "fp_start_ns", "bp_end_ns"):
        steps[c] += origin
    return {
        "ops": run.ops.drop(columns="source").assign(start_ns=run.ops["start_ns"] + origin),
        "steps": steps,
        "spans": run.spans.assign(start_ns=run.spans["start_ns"] + origin),
        "threads": run.threads,
    }


def test_gold_2020_import_counts(gold_run, gold: Path):
    timeline = (gold / "output_timeline_data_1.txt").read_text().splitlines()[1:]
    names = [line.split(",")[0] for line in timeline]
    duration_ns = sum(int(Decimal(line.split(",")[3]) * 1_000_000) for line in timeline)
    op_type = {r["full_op_name"]: r["op_type"] for r in _csv_rows(gold / "framework_raw_1.csv")}
    ops = gold_run.ops
    assert gold_run.info["data_origin"] == "mindspore" and gold_run.info["rank"] == 1
    assert len(ops) == len(timeline) == 2817
    assert ops["name"].nunique() == len(set(names)) == 199
    assert ops["dur_ns"].sum() == duration_ns
    assert Counter(ops["op_type"]) == Counter(op_type[n] for n in names)
    assert set(ops["device"]) == {"npu:1"} and set(ops["source"]) == {"mindspore"}

    rows = [r for r in _csv_rows(gold / STEP_TRACE) if r["step_num"] != "-"]
    assert len(gold_run.steps) == len(rows) == 322
    origin = gold_run.info["clock"]["origin_device_ns"]
    assert (gold_run.steps["fp_start_ns"] + origin).tolist() == [int(r["fp_point"]) * 10 for r in rows]
    reduce_cells = [
        int(v) for r in rows for k, v in r.items() if k.startswith("stream_") and not k.endswith("_point") and int(v)
    ]
    assert len(gold_run.spans) == len(reduce_cells) == 3542
    assert gold_run.spans["dur_ns"].sum() == 10 * sum(reduce_cells)


def test_gold_import_equals_the_raw_job_parse(gold_run, captures: Path):
    raw_run = to_run(read_ascend_job(captures / "ascend" / "JOB3"))
    imported, parsed = _tables(gold_run), _tables(raw_run)
    for table in ("ops", "steps", "spans", "threads"):
        pd.testing.assert_frame_equal(imported[table], parsed[table], obj=table)


def _newer_naming(rows: list[list[str]], op_type: str) -> list[list[str]]:
    """The 2020 step-trace rows with reduce columns renamed stream_<sid>_<k>_<type> and ordered
    duration, start, end, as MindSpore writes them after mid-2020."""
    header, out = rows[0], [rows[0][:9]]
    blocks = range(9, len(header), 3)
    for i in blocks:
        sid, k = header[i + 2].split("_")[1], header[i + 2].split("_")[3]
        name = f"stream_{sid}_{k}_{'parallel' if sid == '540' else op_type}"  # 540: type unknown
        out[0] += [name, f"{name}_start_point", f"{name}_end_point"]
    for row in rows[1:]:
        out.append(row[:9] + [row[j] for i in blocks for j in (i + 2, i, i + 1)])
    return out


def test_newer_step_trace_naming_gives_the_same_run(gold_run, gold: Path, tmp_path: Path):
    for path in gold.iterdir():
        if path.name != STEP_TRACE:
            shutil.copyfile(path, tmp_path / path.name)
    with open(gold / STEP_TRACE, newline="") as f:
        rows = list(csv.reader(f))
    with open(tmp_path / STEP_TRACE, "w", newline="") as f:
        csv.writer(f).writerows(_newer_naming(rows, "AllReduce"))
    assert "stream_520_0_AllReduce_start_point" in (tmp_path / STEP_TRACE).read_text().splitlines()[0]
    runs = read_mindspore_dir(tmp_path)
    assert len(runs) == 1
    for table, expected in _tables(gold_run).items():
        pd.testing.assert_frame_equal(_tables(runs[0])[table], expected, obj=table)


def test_step_trace_alone_gives_steps_and_spans(gold_run, gold: Path, tmp_path: Path):
    shutil.copyfile(gold / STEP_TRACE, tmp_path / STEP_TRACE)
    with pytest.warns(UserWarning, match="no output_timeline_data file for device npu:1"):
        run = read_mindspore_dir(tmp_path)[0]
    assert run.ops.empty
    assert run.info["clock"]["origin_device_ns"] == 43806850547 * 10  # now the first step's start
    pd.testing.assert_frame_equal(_tables(run)["steps"], _tables(gold_run)["steps"])
    pd.testing.assert_frame_equal(_tables(run)["spans"], _tables(gold_run)["spans"])


def _cpu_launches(cpu_dir: Path) -> list[tuple[str, int, Decimal]]:
    launches = []
    for line in (cpu_dir / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt").read_text().splitlines():
        name, _, triplets = line.split(";")
        for triplet in triplets.split():
            start, dur_ms, _ = triplet.split(",")
            launches.append((name, int(start), Decimal(dur_ms)))
    return launches


def test_mindspore_cpu_import_counts_and_totals(cpu_dir: Path):
    runs = read_mindspore_dir(cpu_dir)
    assert len(runs) == 1
    run, launches = runs[0], _cpu_launches(cpu_dir)
    ops = run.ops
    assert run.info["data_origin"] == "mindspore" and run.info["rank"] == 0 and run.info["warnings"] == []
    assert len(ops) == len(launches) == 2150
    assert ops["name"].nunique() == len({n for n, _, _ in launches}) == 43
    assert ops["dur_ns"].sum() == int(sum(d for _, _, d in launches) * 1_000_000)
    assert run.info["clock"]["origin_unix_ns"] == min(s for _, s, _ in launches)
    assert sorted(ops["start_ns"] + run.info["clock"]["origin_unix_ns"]) == sorted(s for _, s, _ in launches)
    assert set(ops["device"]) == {"cpu"} and set(ops["category"]) == {"compute"} and run.steps.empty

    detail = _csv_rows(cpu_dir / "FRAMEWORK" / "cpu_op_detail_info_0.csv")
    occurrences = Counter()
    for row in detail:
        occurrences[row["full_op_name"]] += int(row["op_occurrences"])
    assert ops["name"].value_counts().to_dict() == dict(occurrences)

    type_info = {r["op_type"]: r for r in _csv_rows(cpu_dir / "FRAMEWORK" / "cpu_op_type_info_0.csv")}
    per_type = ops.groupby("op_type")["dur_ns"].agg(["size", "sum"])
    assert set(per_type.index) == set(type_info)
    for op_type, row in type_info.items():
        assert per_type.loc[op_type, "size"] == int(row["type_occurrences"])
        assert per_type.loc[op_type, "sum"] / 1e6 == pytest.approx(float(row["total_compute_time"]), rel=1e-5)


def test_mindspore_cpu_trace_view_agrees_and_gives_scope_spans(cpu_dir: Path):
    run = read_mindspore_dir(cpu_dir)[0]
    events = json.loads((cpu_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    process = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    cpu_ops = [e for e in events if e["ph"] == "X" and process[e["pid"]] == "CPU OP"]
    scopes = [e for e in events if e["ph"] == "X" and process[e["pid"]] == "Scope Layer"]
    assert len(cpu_ops) == len(run.ops)
    assert int(sum(Decimal(e["dur"]) for e in cpu_ops) * 1000) == run.ops["dur_ns"].sum()
    assert len(run.spans) == len(scopes) == 3463
    assert set(run.spans["kind"]) == {"span"} and run.threads["name"].tolist() == ["scope"]
    assert Counter(run.spans["depth"]) == Counter(e["tid"] for e in scopes)
    assert run.spans["dur_ns"].sum() == int(sum(Decimal(e["dur"]) for e in scopes) * 1000)
    # trace_view times sit a constant few ns after the launch times; spans are moved onto the op clock
    first_scope_us = min(Decimal(e["ts"]) for e in scopes)
    first_launch_ns = min(s for _, s, _ in _cpu_launches(cpu_dir))
    shift = int(first_scope_us * 1000) - first_launch_ns
    assert 0 < shift < 1000 and run.spans["start_ns"].min() == 0


def test_mindspore_cpu_shapes_follow_launch_order(cpu_dir: Path):
    run = read_mindspore_dir(cpu_dir)[0]
    first_lines = (cpu_dir / "FRAMEWORK" / "cpu_framework_0.txt").read_text().splitlines()[:2]
    assert (
        first_lines[0].startswith("Conv2D;Conv2D-op0;")
        and "input_1:[32, 3, 32, 32];input_2:[8, 3, 3, 3]" in first_lines[0]
    )
    first_two = run.ops.sort_values("start_ns", kind="stable").head(2)
    assert first_two["shapes"].tolist() == [
        "[[32, 3, 32, 32], [8, 3, 3, 3]]",
        "[[32, 8, 32, 32], [8], [8], [8], [8], [], [], [], [], []]",
    ]
    per_name = run.ops.groupby("name")["shapes"].nunique()
    assert (per_name == 1).all()  # every op launch of one name had one input signature


def test_malformed_step_trace_row_is_a_warning_and_the_rest_remains(gold: Path, tmp_path: Path):
    """A damaged cell costs its row (step 3, line 4), not the file: the other 321 steps and every op remain."""
    for name in ("output_timeline_data_1.txt", "framework_raw_1.csv"):
        shutil.copyfile(gold / name, tmp_path / name)
    lines = (gold / STEP_TRACE).read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace(lines[3].split(",")[2], "12x4", 1)
    (tmp_path / STEP_TRACE).write_text("".join(lines))
    with pytest.warns(UserWarning, match=rf"{STEP_TRACE}: 1 step row\(s\) .* left out \(line 4\)"):
        run = read_mindspore_dir(tmp_path)[0]
    assert len(run.ops) == 2817 and len(run.steps) == 321 and 2 not in set(run.steps["step"])
    assert run.info["warnings"][0].startswith(f"{STEP_TRACE}: 1 step row(s)")


def test_missing_columns_are_reported(gold: Path, tmp_path: Path):
    shutil.copyfile(gold / "output_timeline_data_1.txt", tmp_path / "output_timeline_data_1.txt")
    (tmp_path / "framework_raw_1.csv").write_text("task_id,stream_id\r\n1,2\r\n")
    with pytest.warns(
        UserWarning, match=r"framework_raw_1.csv: missing column\(s\) \['full_op_name', 'op_type', 'op_info'\]"
    ):
        run = read_mindspore_dir(tmp_path)[0]
    assert len(run.ops) == 2817 and run.ops["op_type"].nunique() == 29  # types then come from the op names


def test_nothing_usable_is_one_sentence(tmp_path: Path):
    (tmp_path / STEP_TRACE).write_text("step_num,start_point\r\n1,abc\r\n")
    with pytest.raises(ProfviewError) as error, pytest.warns(UserWarning):
        read_mindspore_dir(tmp_path)
    message = str(error.value)
    assert message.startswith(f"MindSpore profiler directory {tmp_path} yields no usable run (")
    assert STEP_TRACE in message and "\n" not in message
    with pytest.raises(ProfviewError, match="does not exist"):
        read_mindspore_dir(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProfviewError, match="no MindSpore profiler output files were found"):
        read_mindspore_dir(empty)


def test_detectors(gold: Path, cpu_dir: Path, captures: Path, tmp_path: Path):
    assert is_mindspore_dir(gold) and is_mindspore_dir(cpu_dir)
    assert is_mindspore_dir(cpu_dir.parent)  # a directory of profiler output directories
    assert len(read_mindspore_dir(cpu_dir.parent)) == 1
    assert not is_mindspore_dir(captures / "ascend" / "JOB3") and not is_mindspore_dir(tmp_path)
    assert not is_mindspore_dir(tmp_path / "missing")


def test_an_unusable_rank_is_skipped_with_a_warning(gold: Path, tmp_path: Path):
    good, bad = tmp_path / "rank_1", tmp_path / "rank_0"
    good.mkdir(), bad.mkdir()
    shutil.copyfile(gold / STEP_TRACE, good / STEP_TRACE)
    (bad / "step_trace_raw_0_detail_time.csv").write_text("step_num,start_point,end_point,fp_point\r\n1,2,x,4\r\n")
    with pytest.warns(UserWarning) as caught:
        runs = read_mindspore_dir(tmp_path)
    assert [r.info["rank"] for r in runs] == [1] and len(runs[0].steps) == 322
    messages = [str(w.message) for w in caught]
    assert any(
        m.startswith("skipped rank_0 ascend 0: ") and "step_trace_raw_0_detail_time.csv: 1 step row(s)" in m
        for m in messages
    )
