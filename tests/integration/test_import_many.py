"""`profview import` of several ranks at once (profiler/postprocess/import_many.py): the two ranks of a real
NCCL job, imported in two processes, give the files each rank's own import gives, byte for byte, and the
cluster files; a directory of traces is the same as naming them; a damaged capture costs only itself; two
captures of one rank are refused before anything is written. The same on a Dask cluster of worker processes
(`--scheduler`, a LocalCluster): the same files, byte for byte, and the same refusals. Traces named by URL
(fsspec's file:// here, as s3:// or gs:// would be) are imported from local copies: the same files, whose
profiler_info names the URL; a URL that cannot be read is one sentence."""

from __future__ import annotations

import filecmp
import gzip
import json
import shutil
from pathlib import Path

import pytest

from support.device_report import profview

RANKS = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")


@pytest.fixture(scope="module")
def one_by_one(captures: Path, tmp_path_factory) -> Path:
    """Each rank imported on its own into one directory (the single-capture path)."""
    out = tmp_path_factory.mktemp("one_by_one")
    for name in RANKS:
        assert profview("import", str(captures / "kineto" / name), "-o", str(out)).returncode == 0
    return out


def test_two_ranks_in_two_processes_are_each_ranks_own_import(captures: Path, one_by_one: Path, tmp_path: Path):
    out = tmp_path / "job"
    result = profview("import", *(str(captures / "kineto" / n) for n in RANKS), "-o", str(out), "--jobs", "2")
    assert result.returncode == 0, result.stderr
    rank_files = sorted(p.name for p in one_by_one.iterdir())
    assert rank_files and all(p.name in rank_files or p.name.startswith("cluster_") for p in out.iterdir())
    for name in rank_files:
        assert filecmp.cmp(one_by_one / name, out / name, shallow=False), name
    summary = json.loads((out / "cluster_summary.json").read_text())
    assert summary["ranks"]["present"] == [0, 1]
    assert {"cluster_step_trace.csv", "cluster_comm_split.csv", "cluster_timeline.json"} <= set(summary["outputs"])
    assert not [p for p in out.iterdir() if p.name.startswith(".import-")]  # the staging directory is gone
    printed = {Path(line).name for line in result.stdout.splitlines()}
    assert {"profiler_info_0.json", "profiler_info_1.json", "cluster_summary.json"} <= printed


def test_a_directory_of_traces_is_its_traces(captures: Path, tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in RANKS:
        shutil.copy(captures / "kineto" / name, traces / name)
    (traces / "notes.txt").write_text("not a trace")
    out = tmp_path / "job"
    result = profview("import", str(traces), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.glob("profiler_info_*.json")} == {"profiler_info_0.json", "profiler_info_1.json"}
    assert (out / "cluster_summary.json").is_file()


def test_a_damaged_capture_costs_only_itself(captures: Path, tmp_path: Path):
    damaged = tmp_path / "rank2.json.gz"
    damaged.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"'))
    out = tmp_path / "job"
    result = profview("import", str(captures / "kineto" / RANKS[0]), str(damaged), "-o", str(out), "--jobs", "2")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]  # after the progress lines, one sentence
    assert last.startswith("profview: error: 1 of 2 captures were not imported") and "rank2.json.gz" in last
    assert result.stderr.count("not imported") == 1 and "Traceback" not in result.stderr
    assert (out / "profiler_info_0.json").is_file() and (out / "report_0.json").is_file()


def test_two_captures_of_one_rank_are_refused(captures: Path, tmp_path: Path):
    copy = tmp_path / "again.json.gz"
    shutil.copy(captures / "kineto" / RANKS[0], copy)
    out = tmp_path / "job"
    result = profview("import", str(captures / "kineto" / RANKS[0]), str(copy), "-o", str(out), "-j", "2")
    assert result.returncode == 1
    assert "are both rank 0" in result.stderr and "Traceback" not in result.stderr
    assert not list(out.glob("profiler_info_*.json"))  # nothing moved in


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_must_be_a_positive_number(captures: Path, tmp_path: Path, jobs: str):
    result = profview("import", str(captures / "kineto" / RANKS[0]), "-o", str(tmp_path), "--jobs", jobs)
    assert result.returncode == 2 and "is not a whole number of at least 1" in result.stderr


@pytest.fixture(scope="module")
def dask_scheduler():
    """A Dask LocalCluster of two worker processes (one thread each) for the module, its scheduler's address."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        yield cluster.scheduler_address


def test_two_ranks_on_a_dask_cluster_are_each_ranks_own_import(
    captures: Path, one_by_one: Path, tmp_path: Path, dask_scheduler: str
):
    """`profview import --scheduler`: each rank imported by a task on a worker process, which writes the rank's
    files (the workers and the client share this file system); only the cluster views travel back."""
    damaged = tmp_path / "rank9.json.gz"
    damaged.write_bytes(b"\x1f\x8b not really gzip")
    out = tmp_path / "job"
    ranks = [str(captures / "kineto" / n) for n in RANKS]
    result = profview("import", *ranks, str(damaged), "-o", str(out), "--scheduler", dask_scheduler)
    assert result.returncode == 1 and result.stderr.count("profview: error:") == 1, result.stderr
    assert f"1 of 3 captures were not imported: {damaged}: " in result.stderr  # the damaged one costs only itself
    rank_files = sorted(p.name for p in one_by_one.iterdir())
    for name in rank_files:
        assert filecmp.cmp(one_by_one / name, out / name, shallow=False), name
    assert (out / "cluster_summary.json").is_file() and (out / "cluster_comm_ops.csv").is_file()
    assert not [p for p in out.iterdir() if p.name.startswith(".import-")]


def test_an_unreachable_scheduler_is_one_sentence():
    pytest.importorskip("distributed")
    from profiler.errors import ProfviewError
    from profiler.postprocess.import_many import dask_client

    with pytest.raises(ProfviewError, match=r"^cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9 \("):
        dask_client("tcp://127.0.0.1:9", timeout_s=1.0)


def test_the_python_api_takes_a_dask_client(captures: Path, one_by_one: Path, tmp_path: Path, dask_scheduler: str):
    """import_captures(..., client=Client): the imports are the cluster's tasks (the scheduler saw them), the
    files are each rank's own import's."""
    from distributed import Client

    from profiler.postprocess.import_many import import_captures

    with Client(dask_scheduler) as client:
        written = import_captures([captures / "kineto" / n for n in RANKS], tmp_path / "job", client=client)
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert "profview-import" in prefixes
    assert {p.name for p in written} >= {"profiler_info_0.json", "profiler_info_1.json", "cluster_summary.json"}
    for name in ("step_trace_0.csv", "op_detail_1.csv", "kernels_0.csv", "comm_pieces_1.csv"):
        assert filecmp.cmp(one_by_one / name, tmp_path / "job" / name, shallow=False), name


def assert_each_ranks_own_import(expected: Path, out: Path, sources: dict[str, str]) -> None:
    """`out` holds every file of `expected` byte for byte, but profiler_info, whose `source_path` is `sources`'."""
    for path in sorted(expected.iterdir()):
        if path.name.startswith("profiler_info_"):
            want, got = json.loads(path.read_text()), json.loads((out / path.name).read_text())
            assert got.pop("source_path") == sources[path.name] and Path(want.pop("source_path")).is_file()
            assert got == want
        else:
            assert filecmp.cmp(path, out / path.name, shallow=False), path.name


@pytest.fixture
def bucket(captures: Path, tmp_path: Path) -> str:
    """The URL of a directory holding the two ranks' traces and a file that is no trace."""
    traces = tmp_path / "bucket" / "job42"
    traces.mkdir(parents=True)
    for name in RANKS:
        shutil.copy(captures / "kineto" / name, traces / name)
    (traces / "notes.txt").write_text("not a trace")
    return traces.as_uri()


def test_a_directory_url_is_its_traces_each_imported_from_a_local_copy(bucket: str, one_by_one: Path, tmp_path: Path):
    out = tmp_path / "job"
    result = profview("import", bucket, "-o", str(out), "--jobs", "2")
    assert result.returncode == 0, result.stderr
    sources = {f"profiler_info_{rank}.json": f"{bucket}/{name}" for rank, name in enumerate(RANKS)}
    assert_each_ranks_own_import(one_by_one, out, sources)
    assert (out / "cluster_summary.json").is_file()
    one = tmp_path / "one"  # one trace by URL: the single-capture import's files
    assert profview("import", f"{bucket}/{RANKS[1]}", "-o", str(one)).returncode == 0
    assert filecmp.cmp(one / "report_1.json", one_by_one / "report_1.json", shallow=False)


def test_urls_on_a_dask_cluster_are_read_by_the_workers(bucket: str, one_by_one: Path, tmp_path: Path, dask_scheduler):
    out = tmp_path / "job"
    result = profview(
        "import", f"{bucket}/{RANKS[0]}", f"{bucket}/{RANKS[1]}", "-o", str(out), "--scheduler", dask_scheduler
    )
    assert result.returncode == 0, result.stderr
    sources = {f"profiler_info_{rank}.json": f"{bucket}/{name}" for rank, name in enumerate(RANKS)}
    assert_each_ranks_own_import(one_by_one, out, sources)


@pytest.mark.parametrize(
    "url, says",
    [
        ("file:///nonexistent/profview/job", "file:///nonexistent/profview/job does not exist"),
        ("nosuchscheme://bucket/trace.json", "Protocol not known: nosuchscheme"),
        ("oci://bucket/trace.json", "ocifs"),
    ],
    ids=["missing", "unknown scheme", "scheme without its package"],
)
def test_a_url_that_cannot_be_read_is_one_sentence(tmp_path: Path, url: str, says: str):
    result = profview("import", url, "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
