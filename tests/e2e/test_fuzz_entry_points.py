"""Fuzzing every `profview` entry point with damaged and foreign input (hypothesis, derandomised).

The rule (docs/viewer.md, "Bad input"): a damaged input gives one clear sentence on stderr and a
non-zero exit — never a Python traceback, a hang (> 60 s) or a death by signal — and exit 0 only
when the input was still valid. Each test item is one (entry point, mutation); hypothesis draws
the mutation's integer seed (which file, where, what value), tests/support/fuzzing.py builds the damaged copy of a
valid seed (a real profview recording, the real Kineto traces, Ascend JOB3, MindSpore outputs),
runs the CLI of this checkout in a subprocess and judges the answer.

Examples are derandomised (the same ones on every run, so CI is reproducible) and few, so the file
runs in a few minutes; PROFVIEW_FUZZ_EXAMPLES=N draws more per item. A failure prints the entry
point, the mutation, the command and the traceback's last lines; hypothesis prints the draws, and
`python benchmarks/fuzz_campaign.py` runs the same corpus at scale.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

try:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("hypothesis is not installed (pip install hypothesis)", allow_module_level=True)

from support import fuzzing as fz

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("PROFVIEW_FUZZ_EXAMPLES", "2"))

PARAMS = [
    pytest.param(entry, mutation, id=f"{entry}-{mutation}")
    for entry in fz.ENTRY_POINTS
    for mutation in fz.mutations_for(entry)
]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> fz.Seeds:
    return fz.build_seeds(tmp_path_factory.mktemp("fuzz-seeds"))


@pytest.fixture(scope="module")
def case_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-cases")


#: Verdicts by (entry, mutation, seed): hypothesis replays a failing example to report it, and a
#: hang should cost its 60 s once, not twice.
_VERDICTS: dict = {}


@pytest.mark.parametrize("entry,mutation", PARAMS)
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=False,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: every example is a subprocess
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_damaged_input_is_refused_in_one_sentence(entry, mutation, data, seeds, case_root):
    seed = data.draw(st.integers(min_value=0, max_value=2**31 - 1), label="seed")
    work = Path(tempfile.mkdtemp(prefix=f"{entry}-{mutation}-", dir=case_root))
    try:
        case = fz.make_case(entry, mutation, seed, seeds, work)
        if case.skip:
            return  # e.g. chmod 000 while running as root
        key = (entry, mutation, seed)
        verdict = _VERDICTS[key] if key in _VERDICTS else _VERDICTS.setdefault(key, fz.run_case(case))
        failed = verdict.failed
        assert not failed, "\n" + fz.report(case, verdict)
    finally:
        fz.remove_tree(work)


def test_the_oracle_recognises_each_outcome(tmp_path):
    """The judge itself, on canned answers: a traceback, a clean refusal, a usage error, a hang."""
    case = fz.Case(
        entry="view-html",
        mutation="m",
        family="f",
        seed=0,
        kind="profview",
        detail="d",
        expect=fz.REFUSE,
        work=tmp_path,
        commands=[["x"]],
    )
    tb = (
        'Traceback (most recent call last):\n  File "/x/y.py", line 3, in main\n    f()\n'
        f'  File "{fz.REPO}/viewer/rundata.py", line 9, in read_json\n    json.loads(data)\n'
        "RecursionError: maximum recursion depth exceeded\n"
    )

    def verdict(code, err):
        return fz.classify(case, [fz.RunResult(["x"], code, "", err, 0.1)])

    v = verdict(1, tb)
    assert (v.kind, v.signature) == (fz.TRACEBACK, "RecursionError @ viewer/rundata.py:read_json")
    assert verdict(1, "profview: warning: w\nprofview: error: x is empty\n").kind == fz.REFUSED
    assert (
        verdict(2, "usage: profview view [-h]\n       [--port P]\nprofview view: error: bad --port\n").kind
        == fz.REFUSED
    )
    assert verdict(1, "profview: error: a\nprofview: error: b\n").kind == fz.MESSY
    assert verdict(1, "").kind == fz.MESSY
    assert verdict(0, "").kind == fz.ACCEPTED_INVALID
    assert verdict(-11, "").kind == fz.SIGNAL
    assert verdict(None, "").kind == fz.HANG


# ---- the round trip: whatever analyse() writes, every reader accepts ---------------------------


def _untyped_keys(doc, spec, where: str = "") -> list[str]:
    """Keys of `doc` that its schema node `spec` does not type (a reader would take them unchecked)."""
    from profiler.formats.documents import ANY_KEY, Nullable

    if isinstance(spec, Nullable):
        return [] if doc is None else _untyped_keys(doc, spec[0], where)
    if isinstance(spec, dict) and isinstance(doc, dict):
        if not spec:  # an object whose content readers do not use
            return []
        return [
            k
            for key, value in doc.items()
            for k in (
                [f"{where}.{key}"]
                if key not in spec and ANY_KEY not in spec
                else _untyped_keys(value, spec.get(key, spec.get(ANY_KEY)), f"{where}.{key}")
            )
        ]
    if isinstance(spec, list) and isinstance(doc, list):
        return [k for i, item in enumerate(doc) for k in _untyped_keys(item, spec[0], f"{where}[{i}]")]
    return []


def test_every_reader_accepts_what_analyse_writes(seeds, tmp_path):
    """The output contract both ways: every file a real analysis lists (a recording, the reference
    device's, two ranks with the cluster files, an imported Kineto trace and Ascend job) is read by
    its validated reader with the values the file holds, every key of every JSON document has a type
    in formats.documents.DOCUMENT_SCHEMAS, and the viewer loads every rank."""
    from profiler.export.event_file import read_event_file
    from profiler.formats.documents import DOCUMENT_SCHEMAS, read_document, read_profiler_info
    from profiler.formats.names import CLUSTER_STEP_TRACE, CLUSTER_SUMMARY, RANK_FILES, info_files
    from profiler.formats.tables import CSV_REQUIRED, read_csv
    from viewer.rundata import load_profview_dir

    kineto, job = tmp_path / "kineto", tmp_path / "job"
    for args in (["import-kineto", seeds.kineto["nccl_data"], "-o", kineto], ["import-ascend", seeds.job, "-o", job]):
        done = fz.run_profview(args)
        assert done.returncode == 0, done.stderr[-2000:]
    read = []
    for directory in (seeds.profview, seeds.refdev, seeds.cluster, kineto, job):
        infos = info_files(directory)
        assert [run.rank for run in load_profview_dir(directory)] == list(infos)
        cluster = [name for name in (CLUSTER_SUMMARY, CLUSTER_STEP_TRACE) if (directory / name).is_file()]
        for rank, info_path in infos.items():
            info = read_profiler_info(info_path)
            kinds = {pattern.format(rank=rank): kind for kind, pattern in RANK_FILES.items()}
            kinds.update({CLUSTER_SUMMARY: "cluster_summary", CLUSTER_STEP_TRACE: "cluster_step_trace"})
            for name in info["outputs"] + (cluster if rank == 0 else []):
                path, kind = directory / name, kinds.get(name)
                if kind in DOCUMENT_SCHEMAS:
                    doc = read_document(path, kind)
                    assert doc == json.loads(path.read_text())
                    assert _untyped_keys(doc, DOCUMENT_SCHEMAS[kind]) == [], f"{path}: keys without a type"
                elif kind in CSV_REQUIRED:
                    lines = [line for line in path.read_text().splitlines()[1:] if line]
                    assert len(read_csv(path, kind)) == len(lines)
                elif kind == "events":
                    assert read_event_file(path).rows > 0
                else:
                    continue
                read.append(f"{directory.name}/{name}")
    assert json.loads((seeds.refdev / "profiler_info_0.json").read_text())["ascend_devices"][0]["device"] == "npu:0"
    documents = sorted(name for name in read if name.endswith(".json"))
    assert documents == sorted(
        [
            "profview_run/report_0.json",
            "profview_run/queue_summary_0.json",
            "refdev_run/report_0.json",
            "cluster_run/report_0.json",
            "cluster_run/queue_summary_0.json",
            "cluster_run/report_1.json",
            "cluster_run/queue_summary_1.json",
            "cluster_run/cluster_summary.json",
            f"{kineto.name}/report_0.json",
            f"{job.name}/report_1.json",
        ]
    )
    assert "cluster_run/cluster_step_trace.csv" in read and len([n for n in read if n.endswith(".arrow")]) == 6


# ---- issue 23's input classes, at the function each one reached -------------------------------

GOOD_CLOCK_SYNC = (
    '{"device_id": 0, "format": "profview-ascend-clock-sync", "syscnt_hz": 100000000, "version": 1}\n'
    '{"host_monotonic_ns": 2878608831630, "syscnt": 73555}\n{"host_step": 4, "iteration": 0}\n'
)


@pytest.mark.parametrize(
    "damage,says",
    [
        (lambda t: t.replace("100000000", "NaN"), "gives a nan Hz device counter"),
        (lambda t: t.replace("73555", '"x"'), "line 2: syscnt is 'x', not a whole number"),
        (lambda t: t.replace("73555", str(10**30)), "line 2: syscnt is 1000000000000000000000000000000"),
        (lambda t: t.replace("2878608831630", "-1"), "line 2: host_monotonic_ns is -1"),
        (lambda t: t.replace('"host_step": 4', '"host_step": "4"'), "line 3: host_step is '4'"),
        (lambda t: t.replace("iteration", "iteration").encode() + b'{"x": "\xff"}\n', "is not UTF-8 text (byte"),
        (lambda t: t + "[1, 2]\n", "line 4 is not a JSON object"),
    ],
)
def test_a_damaged_clock_sync_file_is_one_sentence(tmp_path, damage, says):
    from profiler.errors import ProfviewError
    from profview_reference_device.merge import read_clock_sync

    path = tmp_path / "profview_clock_sync.0.jsonl"
    path.write_text(GOOD_CLOCK_SYNC)
    sync = read_clock_sync(path)
    assert sync.pairs.tolist() == [[2878608831630, 73555]] and sync.host_steps == {0: 4}
    damaged = damage(GOOD_CLOCK_SYNC)
    path.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
    with pytest.raises(ProfviewError) as refused:
        read_clock_sync(path)
    assert says in str(refused.value) and str(refused.value).startswith(path.name)


def test_task_ids_beyond_the_hwts_record_are_skipped_with_a_warning(tmp_path):
    import numpy as np

    from profiler.importers.ascend.framework_desc import parse_task_desc, task_key_map
    from profiler.importers.ascend.slices import Joined

    text = (
        "Default/A-op1 1 25001 0\nDefault/B-op2 1 99999999999999999999 0\nDefault/C-op3 1 -5 0\n"
        "Default/D-op4 1 7 4294967296\nDefault/E-op5 x 7 0\nDefault/F-op6 1 65535 3\n"
    )
    joined = Joined(
        np.frombuffer(text.encode(), dtype=np.uint8), (tmp_path / "task_desc",), np.zeros(1, dtype=np.int64)
    )
    tasks, problems = parse_task_desc(joined)
    assert tasks["full_name"].tolist() == ["Default/A-op1", "Default/F-op6"]
    assert len(problems) == 4 and sum("task_id is out of range (0 to 65535)" in p for p in problems) == 2
    assert sum("stream_id is out of range" in p for p in problems) == 1
    keys, ops = task_key_map(tasks, ["Default/A-op1", "Default/F-op6"])
    assert keys.tolist() == [25001, 65535] and ops.tolist() == [0, 1]


def test_hwts_records_at_one_syscnt_give_zero_shares(seeds, tmp_path):
    """Every HWTS record at one counter value: ops of no time, MindSpore's type table at 0.00 %."""
    import struct

    job = tmp_path / "JOB3"
    fz._copy_writable(seeds.job, job)
    hwts = next(job.glob("hwts.log.data*"))
    data = bytearray(hwts.read_bytes())
    for at in range(0, len(data) // fz.HWTS_RECORD * fz.HWTS_RECORD, fz.HWTS_RECORD):
        struct.pack_into("<Q", data, at + 8, 123456789)
    hwts.write_bytes(bytes(data))
    done = fz.run_profview(["import-ascend", job, "-o", tmp_path / "out", "--format", "mindspore"])
    assert done.returncode == 0, done.stderr[-2000:]
    rows = (tmp_path / "out" / "aicore_intermediate_1_type.csv").read_text().splitlines()
    assert rows[0] == "op_type,execution_time,execution_frequency,percent" and len(rows) > 5
    assert {r.split(",")[1] for r in rows[1:]} == {"0.0"} and {r.split(",")[3] for r in rows[1:]} == {"0.00"}


def _edited(seed: Path, tmp_path: Path, name: str, edit) -> Path:
    out = tmp_path / "run"
    fz._copy_writable(seed, out)
    path = out / name
    if name.endswith(".json"):
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    else:
        lines = path.read_text().split("\n")
        header = lines[0].split(",")
        column, value = edit
        cells = lines[1].split(",")
        cells[header.index(column)] = value
        lines[1] = ",".join(cells)
        path.write_text("\n".join(lines))
    return out


@pytest.mark.parametrize(
    "name,edit,says",
    [
        (
            "report_0.json",
            lambda d: d.update(thresholds="x"),
            'report_0.json is malformed: thresholds should be an object, not "x"',
        ),
        (
            "queue_summary_0.json",
            lambda d: d.update(verdict="x"),
            'queue_summary_0.json is malformed: verdict should be an object, not "x"',
        ),
        (
            "report_0.json",
            lambda d: d["findings"].append({"at_stake_ms": [1]}),
            "findings[{n}].at_stake_ms should be a number or null, not [1]",
        ),
        (
            "queue_summary_0.json",
            lambda d: d["queues"][0].update(capacity=10**30),
            "queues[0].capacity is 1000000000000000000000000000000, beyond what a 64-bit number can hold",
        ),
        (
            "report_0.json",
            lambda d: d["steps"].update(data_wait_measured=1),
            "steps.data_wait_measured should be true or false, not 1",
        ),
        ("step_trace_0.csv", ("total_ms", "1e308"), "step_trace_0.csv is malformed: column total_ms has"),
        (
            "data_queue_0.csv",
            ("capacity", "18446744073709551615"),
            "data_queue_0.csv is malformed: column capacity has '18446744073709551615' on line 2, beyond",
        ),
    ],
)
@pytest.mark.parametrize("command", [["--summary"], ["compare"], ["-o"]], ids=["summary", "compare", "html"])
def test_a_mistyped_or_extreme_output_is_one_sentence_naming_file_and_key(seeds, tmp_path, name, edit, says, command):
    report = json.loads((seeds.profview / "report_0.json").read_text())
    says = says.format(n=len(report["findings"]))
    run = _edited(seeds.profview, tmp_path, name, edit)
    args = {
        "--summary": [run, "--summary"],
        "compare": ["compare", seeds.profview, run],
        "-o": [run, "-o", tmp_path / "r.html"],
    }[command[0]]
    done = fz.run_profview(args)
    verdict = fz.classify(
        fz.Case(
            entry="view",
            mutation=name,
            family="f",
            seed=0,
            kind="profview",
            detail="",
            expect=fz.REFUSE,
            work=tmp_path,
            commands=[args],
        ),
        [done],
    )
    assert verdict.kind == fz.REFUSED and says in done.stderr, done.stderr[-2000:]


def test_a_nul_named_queue_is_drawn_with_its_capacity():
    """pandas' text == misses "\\x00": the occupancy chart groups instead, one row a queue."""
    import pandas as pd

    from viewer.pages.pipeline import occupancy

    queues = pd.DataFrame(
        {
            "queue": pd.array(["\x00", "\x00", "b"], dtype="str"),
            "time_ms": [1.0, 2.0, 1.5],
            "size": [1, 3, 0],
            "capacity": [3, 3, 2],
        }
    )
    fig, _ = occupancy(queues)
    assert [list(t.y) for t in fig.data] == [[1, 3], [0]]
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [2, 3]


def test_block_length_of_steps_beyond_float_range_is_one():
    import numpy as np

    from profiler.analysis.compare import block_length

    with np.errstate(all="ignore"):
        assert block_length(np.array([1e308, -1e308, 1e308] * 20)) == 1
    assert block_length(np.r_[np.ones(30), 2 * np.ones(30)]) > 1  # a drift still asks for blocks
