"""`profview import` (and its aliases `import-ascend` / `import-kineto`), and `profview PATH` opening Ascend JOB,
MindSpore and Kineto inputs."""

from __future__ import annotations

import filecmp
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profview_reference_device.device import AscendReferenceDevice
from viewer.inputs import load_input

from support.cli import assert_one_sentence, run_profview

REPO = Path(__file__).resolve().parents[2]


def documented_mindspore_files(device: int) -> list[str]:
    """The MindSpore files docs/ascend.md says write_mindspore_outputs writes, for one device."""
    text = (REPO / "docs" / "ascend.md").read_text()
    listed = text.split("Writes, for device `<dev>`:", 1)[1].split("(files whose", 1)[0]
    return [name.replace("<dev>", str(device)) for name in re.findall(r"`([^`]+)`", listed)]


@pytest.fixture(scope="module")
def ascend(captures: Path) -> Path:
    return captures / "ascend"


@pytest.fixture(scope="module")
def imported_job3(ascend: Path, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("job3") / "out"
    result = run_profview("import-ascend", ascend / "JOB3", "-o", out, "--format", "both")
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_import_ascend_both_writes_the_gold_mindspore_files(ascend, imported_job3):
    out, stdout = imported_job3
    names = documented_mindspore_files(1)
    assert len(names) == 10
    for name in names:
        assert (out / name).read_bytes() == (ascend / "run_1_gold" / name).read_bytes(), name
    assert {Path(line).name for line in stdout.split()} >= set(names) | {"step_trace_1.csv", "profiler_info_1.json"}


def test_import_ascend_both_writes_our_outputs_as_rank_of_the_device(imported_job3):
    out, _ = imported_job3
    assert len(pd.read_csv(out / "step_trace_1.csv")) == 322
    info = json.loads((out / "profiler_info_1.json").read_text())
    assert info["data_origin"] == "ascend" and info["rank"] == 1
    runs = load_input(out)
    assert [r.rank for r in runs] == [1] and len(runs[0].step_trace) == 322


@pytest.mark.parametrize("fmt, ours, theirs", [("profview", True, False), ("mindspore", False, True)])
@pytest.mark.parametrize("command", ["import", "import-ascend"])
def test_import_ascend_formats(ascend, tmp_path, command, fmt, ours, theirs):
    result = run_profview(command, ascend / "JOB3", "-o", tmp_path / "out", "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "step_trace_1.csv").exists() == ours
    assert (tmp_path / "out" / "step_trace_raw_1_detail_time.csv").exists() == theirs


def test_import_ascend_multi_device_job_gives_one_rank_per_device(tmp_path):
    job = tmp_path / "JOB"
    for device in (0, 2):  # two reference devices writing into one JOB directory
        with AscendReferenceDevice(device_id=device, job_dir=job) as dev:
            for _ in range(2):
                dev.fp_start()
                dev.launch("Default/Add-op1", "Add", np.add, np.ones(8), device)
                dev.bp_end()
                dev.iter_end()
    result = run_profview("import-ascend", job, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    for rank in (0, 2):
        assert len(pd.read_csv(tmp_path / "out" / f"step_trace_{rank}.csv")) == 2
        assert pd.read_csv(tmp_path / "out" / f"op_type_{rank}.csv")["device"].tolist() == [f"npu:{rank}"]
    assert [r.rank for r in load_input(job)] == [0, 2]  # `profview JOB` opens every device


def test_import_kineto_gives_a_directory_the_viewer_opens(captures, tmp_path):
    out = tmp_path / "out"
    result = run_profview("import-kineto", captures / "kineto" / "sampled_rank-1.json.gz", "-o", out)
    assert result.returncode == 0, result.stderr
    info = json.loads((out / "profiler_info_1.json").read_text())
    assert info["data_origin"] == "kineto"
    html = tmp_path / "k.html"
    report = run_profview(out, "--output", html)
    assert report.returncode == 0, report.stderr
    assert html.stat().st_size > 1_000_000


def test_import_recognises_every_format(captures, tmp_path):
    """One command for every format: the format is found from the input, ranks as each importer gives them."""
    for source, rank, origin, steps in [
        ("kineto/sampled_rank-1.json.gz", 1, "kineto", 2),
        ("ascend/JOB3", 1, "ascend", 322),
        ("ascend/run_1_gold", 1, "mindspore", 322),
        ("mindspore_cpu/cnn_50steps_ascend_ms", 0, "mindspore", 50),
    ]:
        out = tmp_path / source.replace("/", "_")
        result = run_profview("import", captures / source, "-o", out)
        assert result.returncode == 0, result.stderr
        assert f"{out / f'profiler_info_{rank}.json'}" in result.stdout.split()
        info = json.loads((out / f"profiler_info_{rank}.json").read_text())
        assert (info["data_origin"], info["source_path"]) == (origin, str(captures / source))
        assert len(pd.read_csv(out / f"step_trace_{rank}.csv")) == steps, source


def test_import_bad_inputs(captures, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert_one_sentence(
        run_profview("import", notes, "-o", tmp_path / "out"),
        f"{notes} is not a capture profview imports: "
        "it is not an Ascend profiling JOB directory, a MindSpore profiler output directory or a "
        "PyTorch profiler (Kineto) trace",
    )
    assert_one_sentence(run_profview("import", tmp_path / "nope", "-o", tmp_path / "out"), "nope does not exist")
    done = run_profview("import", captures / "kineto" / "cpu_only.json.gz", "-o", tmp_path / "done")
    assert done.returncode == 0, done.stderr
    assert_one_sentence(
        run_profview("import", tmp_path / "done", "-o", tmp_path / "out"),
        "is already a profview output directory: open it with `profview",
    )
    assert_one_sentence(
        run_profview("import", captures / "kineto" / "cpu_only.json.gz", "-o", tmp_path / "out", "--format", "both"),
        "is read as a PyTorch profiler (Kineto) trace, which is imported as profview outputs only",
    )
    assert_one_sentence(
        run_profview("import", notes, "-o", tmp_path / "out", "--from", "nsight"),
        "no importer is called 'nsight'; the formats are ascend (Ascend profiling JOB directory), "
        "mindspore (MindSpore profiler output directory), kineto (PyTorch profiler (Kineto) trace)",
    )
    assert_one_sentence(run_profview("import", notes, "-o", tmp_path / "out", "--from", "kineto"), "not valid JSON")
    assert not (tmp_path / "out").exists()


def test_import_memory_settings(captures, tmp_path):
    """--memory-limit and --spill-dir: a setting that is none is one sentence; a tight limit, the same files."""
    trace = captures / "kineto" / "sampled_rank-1.json.gz"
    result = run_profview("import", trace, "-o", tmp_path / "out", "--memory-limit", "lots")
    assert result.returncode == 2 and "'lots' is not a memory size such as 1G, 800M or none" in result.stderr
    assert_one_sentence(
        run_profview("import", trace, "-o", tmp_path / "out", "--spill-dir", tmp_path / "nope"),
        f"the spill directory {tmp_path / 'nope'} is not a directory",
    )
    assert not (tmp_path / "out").exists()
    plain, tight = tmp_path / "plain", tmp_path / "tight"
    assert run_profview("import", trace, "-o", plain).returncode == 0
    result = run_profview("import", trace, "-o", tight, "--memory-limit", "1M", "--spill-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"warning: the import's peak memory, [\d,]+ MB, passed --memory-limit 1 MB", result.stderr)
    assert "peak memory" not in run_profview("import", trace, "-o", tmp_path / "again").stderr  # under 1 GB
    names = sorted(p.name for p in plain.iterdir())
    assert filecmp.cmpfiles(plain, tight, names, shallow=False)[1:] == ([], [])


def test_the_peak_said_is_the_imports_own_not_its_parents(captures, tmp_path):
    """A `profview import` started by a big process (a notebook, a test worker) reports its own peak: Linux's
    getrusage keeps the parent's peak across exec, so a 132 MB import under a 600 MB parent would warn."""
    parent_memory = np.ones(600_000_000 // 8)  # touched: resident in this process when it forks the command
    result = run_profview(
        "import", captures / "kineto" / "cpu_only.json.gz", "-o", tmp_path / "out", "--memory-limit", "400M"
    )
    assert result.returncode == 0 and "peak memory" not in result.stderr, result.stderr
    assert parent_memory.sum() == 600_000_000 // 8


def test_profview_opens_a_job_directory(ascend, tmp_path):
    html = tmp_path / "job3.html"
    result = run_profview(ascend / "JOB3", "--output", html)
    assert result.returncode == 0, result.stderr
    assert html.stat().st_size > 1_000_000 and b"npu:1" in html.read_bytes()


@pytest.mark.parametrize("path", ["ascend/run_1_gold", "mindspore_cpu/cnn_50steps_ascend_ms"])
def test_profview_opens_a_mindspore_directory(captures, path):
    result = run_profview(captures / path, "--summary")
    assert result.returncode == 0, result.stderr
    assert "Step breakdown" in result.stdout


def test_profview_opens_a_trace(captures):
    result = run_profview(captures / "kineto" / "alexnet.json.gz", "--summary")
    assert result.returncode == 0, result.stderr
    assert "Top ops" in result.stdout


def test_import_ascend_bad_inputs(ascend, tmp_path):
    assert_one_sentence(run_profview("import-ascend", tmp_path / "nope", "-o", tmp_path / "out"), "does not exist")
    (tmp_path / "notes.txt").write_text("hello")
    assert_one_sentence(run_profview("import-ascend", tmp_path, "-o", tmp_path / "out"), "No Ascend profiling slices")
    (tmp_path / "file").write_text("")
    assert_one_sentence(run_profview("import-ascend", ascend / "JOB3", "-o", tmp_path / "file" / "out"), "cannot write")
    usage = run_profview("import-ascend", ascend / "JOB3", "-o", tmp_path / "out", "--format", "csv")
    assert usage.returncode == 2 and "invalid choice" in usage.stderr and "Traceback" not in usage.stderr


def test_import_kineto_bad_inputs(ascend, tmp_path):
    assert_one_sentence(run_profview("import-kineto", tmp_path / "nope.json", "-o", tmp_path / "out"), "does not exist")
    assert_one_sentence(
        run_profview("import-kineto", ascend / "RAW_FORMATS.md", "-o", tmp_path / "out"), "not valid JSON"
    )
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    assert_one_sentence(run_profview("import-kineto", empty, "-o", tmp_path / "out"), "no usable events")
    assert not (tmp_path / "out").exists()


def test_import_says_each_ranks_warnings_once(captures, tmp_path):
    """What an import skipped, guessed or lost is said on stderr (not only in the info file), each warning once:
    the one the reader said while reading (a cut trace) is not repeated from the info file."""
    whole = run_profview("import", captures / "kineto" / "alexnet.json.gz", "-o", tmp_path / "alexnet")
    assert whole.returncode == 0, whole.stderr
    info = json.loads((tmp_path / "alexnet" / "profiler_info_0.json").read_text())
    no_steps = next(w for w in info["warnings"] if w.startswith("no ProfilerStep#N annotations"))
    assert whole.stderr.count(f"profview: warning: rank 0: {no_steps}\n") == 1
    assert all(line.startswith("profview: warning: ") for line in whole.stderr.splitlines())
    assert all(Path(line).exists() for line in whole.stdout.splitlines())  # stdout lists the files only

    import gzip

    text = gzip.decompress((captures / "kineto" / "sampled_rank-0.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: int(len(text) * 0.6)])
    done = run_profview("import", cut, "-o", tmp_path / "cut")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("is cut short") == 1
    info = json.loads((tmp_path / "cut" / "profiler_info_0.json").read_text())
    assert sum(w in done.stderr for w in info["warnings"]) == len(info["warnings"])  # every one of them said
