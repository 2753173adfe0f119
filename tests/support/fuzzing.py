"""A corpus of damaged inputs for the `profview` command, and the oracle that judges its answers.

The product's rule for bad input (a missing / empty / truncated / foreign directory, malformed
CSV or JSON, a crashed run's partial data, corrupted binary logs): one clear sentence on stderr
and a non-zero exit; never a Python traceback, never a hang, never a death by signal, and exit 0
only when the input was still valid.

This module builds *seeds* (valid inputs: a real profview recording made through the public API,
and copies of the real captures in tests/data), derives *cases* from them (one
mutation of one seed, fed to one entry point of the CLI), runs each case as a subprocess of this
checkout and *classifies* the outcome. tests/e2e/test_fuzz_entry_points.py (hypothesis, small and
derandomised) and benchmarks/fuzz_campaign.py (thousands of seeded cases) both drive it.

It deliberately imports nothing from `profiler` / `viewer` (their files are being moved): the
recording is made in a subprocess through `from profiler import Profiler, ProfiledQueue`, and the
raw store's chunk layout is re-implemented here from docs/architecture.md ("The raw store").

A case is a pure function of (entry point, mutation, integer seed) and the seeds: the same triple
always gives the same damage (the recording's own timings differ from run to run, not the damage).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

REPO = Path(__file__).resolve().parents[2]

#: Expectations. REFUSE: the damaged input is certainly invalid, so exit 0 is a failure ("accepted
#: invalid input"). EITHER: a tolerant reader may legitimately accept it (a crashed run's torn
#: chunk, a value that is odd but well-formed), so exit 0 and a clean refusal are both fine.
REFUSE, EITHER = "refuse", "either"

#: Outcome kinds. The first two are fine; every other one is a failure.
REFUSED, ACCEPTED = "refused", "accepted"
TRACEBACK, HANG, SIGNAL = "traceback", "hang", "signal"
MESSY = "messy_refusal"  # non-zero exit without exactly one "profview: error: ..." sentence
ACCEPTED_INVALID = "accepted_invalid"  # exit 0 on an input that is certainly invalid
NO_OUTPUT = "no_output"  # exit 0 but the promised output is not there
WRONG_NUMBER = "wrong_number"  # exit 0 with numbers an oracle can show to be wrong
SKIPPED = "skipped"  # the case cannot be built here (e.g. chmod 000 as root)
FAILURES = (TRACEBACK, HANG, SIGNAL, MESSY, ACCEPTED_INVALID, NO_OUTPUT, WRONG_NUMBER)

DEFAULT_TIMEOUT_S = 60.0
#: `profview watch` gives a writer it cannot check 30 s (store/follow.py UNKNOWN_WRITER_S) + 5 s
WATCH_TIMEOUT_S = 45.0
#: Address-space cap of each CLI process (an input such as /dev/zero must end in a refusal or a
#: MemoryError, not take the machine down).
MEMORY_LIMIT_BYTES = 6 * 1024**3

Arg = Union[str, Path]


# --------------------------------------------------------------------------------------------
# Where the real captures are
# --------------------------------------------------------------------------------------------

#: The read-only real captures kept in the repository (tests/data, see its README).
CAPTURES = REPO / "tests" / "data"


def privileged() -> bool:
    """Whether chmod 000 fails to deny reads here (root, CAP_DAC_OVERRIDE): then the
    'unreadable file' mutations are skipped."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "probe"
        p.write_text("x")
        p.chmod(0)
        try:
            with open(p, "rb"):
                return True
        except PermissionError:
            return False
        finally:
            p.chmod(0o600)


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------

#: The recording, made in a subprocess through the public API only: phases, ops, a counter, a
#: ProfiledQueue fed by a producer thread, a few steps, then analyse().
RECORDING_SCRIPT = r"""
import sys, threading, time
from profiler import Profiler, ProfiledQueue

out = sys.argv[1]
profiler = Profiler(out, host_counters=False, gpu_counters=False, flush_interval_s=0.02)
queue = ProfiledQueue(maxsize=3, name="host_queue")

def produce():
    for i in range(14):
        time.sleep(0.002)
        queue.put(i)

producer = threading.Thread(target=produce, name="producer")
producer.start()
for step in range(12):
    queue.get()
    with profiler.phase("forward"):
        with profiler.op("conv1", op_type="Conv2D"):
            time.sleep(0.001)
        with profiler.op("relu1", op_type="ReLU"):
            pass
        with profiler.op("bn1", op_type="BatchNorm"):
            time.sleep(0.0002)
    with profiler.phase("backward"):
        with profiler.op("conv1_grad", op_type="Conv2DBackprop"):
            time.sleep(0.001)
    with profiler.span("optimizer step"):
        profiler.counter("loss", 1.0 / (step + 1))
    profiler.step()
producer.join()
for path in profiler.analyse(progress=False):
    print(path)
"""

#: The reference-device seed: a recording whose Ascend-style device (profview_reference_device) writes a JOB
#: log and a clock-sync file into raw/, merged by analyse() (device ops, steps from the device).
REFERENCE_DEVICE_SCRIPT = r"""
import sys
import numpy as np
from profiler import Profiler
from profview_reference_device.device import AscendReferenceDevice

profiler = Profiler(sys.argv[1], host_counters=False, gpu_counters=False, flush_interval_s=0.02)
dev = AscendReferenceDevice(profiler, streams=2)
w = np.ones((32, 32))
for step in range(6):
    dev.fp_start()
    h = dev.launch("Default/MatMul-op1", "MatMul", np.matmul, np.ones((32, 32)), w)
    dev.launch("Default/ReLU-op2", "ReLU", np.maximum, h, 0)
    dev.bp_end()
    dev.all_reduce("Default/AllReduce-op3", np.copy, h, stream=1)
    dev.iter_end().result(timeout=30)
    profiler.step()
for path in profiler.analyse(progress=False):
    print(path)
"""

#: Kineto traces small enough to parse and re-serialise for every case.
KINETO_JSON_SEEDS = ("alexnet", "cpu_only", "sampled_rank-0", "nccl_data")


class Seeds:
    """Valid inputs every case starts from (never modified: cases work on copies). A plain class,
    so that hypothesis prints it in one line."""

    def __init__(
        self,
        root: Path,
        profview: Path,
        kineto: dict[str, Path],
        job: Path,
        ms_cpu: Path,
        ms_gold: Path,
        refdev: Path,
        cluster: Path,
        privileged: bool = False,
    ) -> None:
        self.root = root
        self.profview = profview  # an analysed recording, with raw/
        self.refdev = refdev  # an analysed recording with a reference Ascend device in raw/
        self.cluster = cluster  # the profview recording as two ranks: cluster_summary.json too
        self.kineto = kineto  # name -> .json.gz (copies of the real traces)
        self.job = job  # Ascend JOB3
        self.ms_cpu = ms_cpu  # MindSpore 2.x CPU output directory
        self.ms_gold = ms_gold  # MindSpore's 2020 parse of JOB3 (run_1 layout)
        self.privileged = privileged

    def __repr__(self) -> str:
        return f"Seeds({self.root})"

    def kinds(self) -> dict[str, Path]:
        return {
            "profview": self.profview,
            "job": self.job,
            "ms_cpu": self.ms_cpu,
            "ms_gold": self.ms_gold,
            "refdev": self.refdev,
            "cluster": self.cluster,
        }


def _copy_writable(src: Path, dst: Path) -> None:
    """Copy a tree (or file) so that the copy is writable even when the source is read-only."""
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=shutil.copyfile)
        for dirpath, _dirnames, filenames in os.walk(dst):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)


def record_profview_run(
    out: Path, timeout: float = 300, script: str = RECORDING_SCRIPT, env: Optional[dict[str, str]] = None
) -> Path:
    """Make a profview seed: a real recording through the public API (`script`), analysed."""
    result = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=str(out.parent),
        env={**_child_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0 or not (out / "raw").is_dir():
        raise RuntimeError(f"the seed recording failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return out


def record_two_ranks(out: Path, timeout: float = 300) -> Path:
    """The cluster seed: the recording made by rank 0 and rank 1 of a job of two (one after the
    other, into one directory), analysed together (the cluster files)."""
    for rank in (0, 1):
        record_profview_run(out, timeout, env={"RANK": str(rank), "WORLD_SIZE": "2"})
    run_profview(["analyse", out], timeout=timeout)  # both ranks together: the cluster files
    if not (out / "cluster_summary.json").is_file():
        raise RuntimeError(f"the cluster seed wrote no cluster_summary.json: {sorted(p.name for p in out.iterdir())}")
    return out


def build_seeds(root: Path, captures: Path = CAPTURES) -> Seeds:
    """Record the profview seed and copy the real captures into `root`."""
    root.mkdir(parents=True, exist_ok=True)
    profview = record_profview_run(root / "profview_run")
    refdev = record_profview_run(root / "refdev_run", script=REFERENCE_DEVICE_SCRIPT)
    cluster = record_two_ranks(root / "cluster_run")
    kineto = {}
    for trace in sorted((captures / "kineto").glob("*.json.gz")):
        name = trace.name[: -len(".json.gz")]
        _copy_writable(trace, root / "kineto" / trace.name)
        kineto[name] = root / "kineto" / trace.name
    _copy_writable(captures / "ascend" / "JOB3", root / "ascend" / "JOB3")
    _copy_writable(captures / "ascend" / "run_1_gold", root / "mindspore_gold" / "run_1")
    ms_cpu_src = next(p for p in sorted((captures / "mindspore_cpu").iterdir()) if p.is_dir())
    _copy_writable(ms_cpu_src, root / "mindspore_cpu" / ms_cpu_src.name)
    return Seeds(
        root=root,
        profview=profview,
        kineto=kineto,
        job=root / "ascend" / "JOB3",
        ms_cpu=root / "mindspore_cpu" / ms_cpu_src.name,
        ms_gold=root / "mindspore_gold" / "run_1",
        refdev=refdev,
        cluster=cluster,
        privileged=privileged(),
    )


# --------------------------------------------------------------------------------------------
# Byte-level and value-level damage
# --------------------------------------------------------------------------------------------

ONE_MB = 1024 * 1024


def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    n = rng.randrange(len(data)) if data else 0
    return data[:n], f"truncated to {n} of {len(data)} bytes"


def bitflip(data: bytes, rng: random.Random, limit: Optional[tuple[int, int]] = None) -> tuple[bytes, str]:
    if not data:
        return data, "bit flip on an empty file (no-op)"
    buf = bytearray(data)
    lo, hi = limit or (0, len(buf))
    spots = []
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(lo, hi)
        bit = rng.randrange(8)
        buf[i] ^= 1 << bit
        spots.append(f"{i}.{bit}")
    return bytes(buf), f"bits flipped at {', '.join(spots)}"


def zero_fill(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if not data:
        return data, "zero fill of an empty file (no-op)"
    start = rng.randrange(len(data))
    n = min(len(data) - start, rng.choice([1, 8, 64, 512, 4096, 1 << 16]))
    return data[:start] + bytes(n) + data[start + n :], f"{n} bytes zeroed at {start}"


def splice(data: bytes, rng: random.Random, blob: Optional[bytes] = None) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    blob = blob if blob is not None else bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 64, 300])))
    return data[:at] + blob + data[at:], f"{len(blob)} bytes inserted at {at}"


BYTE_DAMAGE = {"truncate": truncate, "bitflip": bitflip, "zero_fill": zero_fill, "splice": splice}


#: Cell values for CSV / text fields: (text, a valid finite number in the contract's decimal form?)
NASTY_CELLS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "",
    "abc",
    "-1",
    "-0.000001",
    "1e300",
    "-1e300",
    "1e400",
    "99999999999999999999999999",
    "-9223372036854775809",
    "0x10",
    "1_000",
    " 5",
    "1,5",
    "true",
    "None",
    "\x00",
    "\x00\x00\x00",
    "1.5",
    "-0",
    "\u202e\u00e9\U0001f600",
    "'; DROP TABLE",
    "<script>alert(1)</script>",
]
DECIMAL = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
INTEGER = re.compile(r"^-?\d+$")


def numeric_ok(text: str, integer: bool = False) -> bool:
    """Whether `text` is a finite number in the output contract's form (docs/formats.md)."""
    if not (INTEGER if integer else DECIMAL).match(text):
        return False
    try:
        value = float(text)
    except ValueError:
        return False
    return value == value and abs(value) != float("inf")


def nasty_cell(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.06:
        return "N" * ONE_MB  # a 1 MB name / value
    if roll < 0.10:
        return "1" * rng.choice([400, 5000])  # a number too long for int64 (and for int() > 4300 digits)
    return rng.choice(NASTY_CELLS)


#: JSON tokens spliced into documents: (raw text, valid JSON per RFC 8259?)
def nasty_json_token(rng: random.Random) -> tuple[str, bool]:
    choices: list[tuple[str, bool]] = [
        ("null", True),
        ("true", True),
        ("false", True),
        ("0", True),
        ("-1", True),
        ("1e300", True),
        ("-1e300", True),
        ("1e400", True),
        ("-0", True),
        ("1.5", True),
        ('""', True),
        ('"x"', True),
        ('"1"', True),
        ("[]", True),
        ("{}", True),
        ('[1, "x", null]', True),
        ('{"a": 1, "a": [2]}', True),
        ('"\\u0000"', True),
        ('"\\ud800"', True),
        ("NaN", False),
        ("Infinity", False),
        ("-Infinity", False),
        ("9223372036854775808", True),
        ("-9223372036854775809", True),
    ]
    roll = rng.random()
    if roll < 0.06:
        return '"' + "N" * ONE_MB + '"', True
    if roll < 0.10:
        return "1" * 5000, True  # Python refuses int() of > 4300 digits
    if roll < 0.14:
        depth = rng.choice([1000, 100_000])
        return "[" * depth + "]" * depth, True  # deeper than the recursion limit
    if roll < 0.17:
        return '"\xff\xfe"', False  # raw non-UTF-8 (written with latin-1)
    return rng.choice(choices)


SENTINEL = "\u2603FUZZ\u2603"


def dumps_with_token(doc, path: Sequence, token: str, compact: bool = True) -> bytes:
    """`doc` as JSON with the node at `path` replaced by the raw `token` text."""
    _set_path(doc, path, SENTINEL)
    text = json.dumps(doc, separators=(",", ":") if compact else None)  # ASCII: escapes everything else
    text = text.replace(json.dumps(SENTINEL), token, 1)
    data = text.encode("utf-8", errors="surrogatepass")
    return data.replace('"\xff\xfe"'.encode(), b'"\xff\xfe"') if "\xff" in token else data


def _set_path(doc, path: Sequence, value) -> None:
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _get_path(doc, path: Sequence):
    for key in path:
        doc = doc[key]
    return doc


def random_json_path(doc, rng: random.Random, max_depth: int = 12) -> list:
    """A random node below the root, by a random walk (cheap on large documents)."""
    path: list = []
    node = doc
    while len(path) < max_depth:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
        if not keys:
            break
        key = rng.choice(keys)
        path.append(key)
        node = node[key]
        if not isinstance(node, (dict, list)) or rng.random() < 0.3:
            break
    return path


def json_strictly_valid(data: bytes) -> bool:
    """Whether `data` is RFC 8259 JSON as Python can hold it (no NaN / Infinity, UTF-8)."""

    def no_constants(name):
        raise ValueError(name)

    try:
        json.loads(data.decode("utf-8"), parse_constant=no_constants)
        return True
    except (ValueError, RecursionError):
        return False


def duplicate_key(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Repeat one `"key": value` of a JSON object with a different value after it."""
    matches = list(re.finditer(rb'"([A-Za-z_]+)"\s*:\s*', data))
    if not matches:
        return data, "no key to duplicate"
    m = rng.choice(matches)
    token, _ = nasty_json_token(rng)
    insert = m.group(0) + token.encode("utf-8", errors="surrogateescape") + b","
    return data[: m.start()] + insert + data[
        m.start() :
    ], f"key {m.group(1).decode()!r} given twice (first: {token[:40]})"


def mutate_json_bytes(data: bytes, rng: random.Random, strict_invalid_refuses: bool) -> tuple[bytes, str, str]:
    """One damage to a JSON document. Returns (bytes, detail, expectation)."""
    how = rng.choice(
        [
            "truncate",
            "bitflip",
            "zero_fill",
            "splice",
            "token",
            "token",
            "token",
            "drop_key",
            "duplicate_key",
            "top_level",
            "non_utf8",
            "nul",
            "deep",
        ]
    )
    if how in BYTE_DAMAGE:
        out, detail = BYTE_DAMAGE[how](data, rng)
    elif how == "duplicate_key":
        out, detail = duplicate_key(data, rng)
    elif how == "top_level":
        token = rng.choice(["[]", '"x"', "1", "null", "{}", "[{}]", ""])
        out, detail = token.encode(), f"document replaced by {token!r}"
    elif how == "non_utf8":
        out, detail = splice(data, rng, b"\xff\xfe\xc3")
        detail = "non-UTF-8 bytes: " + detail
    elif how == "nul":
        out, detail = splice(data, rng, b"\x00" * rng.choice([1, 16]))
        detail = "NUL bytes: " + detail
    elif how == "deep":
        depth = rng.choice([5000, 200_000])
        out, detail = ("[" * depth + "]" * depth).encode(), f"document replaced by {depth} nested lists"
    else:
        try:
            doc = json.loads(data)
        except ValueError:
            out, detail = truncate(data, rng)
        else:
            path = random_json_path(doc, rng) if isinstance(doc, (dict, list)) else []
            if not path:
                out, detail = b"[]", "document replaced by []"
            elif how == "drop_key":
                parent = _get_path(doc, path[:-1])
                del parent[path[-1]]
                out, detail = json.dumps(doc).encode(), f"removed {_show_path(path)}"
            else:
                token, _ = nasty_json_token(rng)
                out = dumps_with_token(doc, path, token, compact=rng.random() < 0.5)
                detail = f"{_show_path(path)} = {token[:60]}{'...' if len(token) > 60 else ''}"
    if not json_strictly_valid(out):
        expect = REFUSE if strict_invalid_refuses else EITHER
    else:
        expect = EITHER
    return out, f"{how}: {detail}", expect


def _show_path(path: Sequence) -> str:
    return "".join(f"[{k!r}]" for k in path)


def mutate_text_lines(data: bytes, rng: random.Random, delimiters: bytes = rb"[ ,;:\t]") -> tuple[bytes, str]:
    """One damage to a line-oriented text file (space / comma / semicolon separated fields)."""
    lines = data.split(b"\n")
    how = rng.choice(
        [
            "token",
            "token",
            "token",
            "drop_token",
            "dup_lines",
            "delete_lines",
            "long_line",
            "truncate",
            "crlf",
            "nul",
            "non_utf8",
            "bitflip",
            "zero_fill",
            "empty",
            "shuffle",
        ]
    )
    i = rng.randrange(len(lines)) if lines else 0
    if how in ("token", "drop_token") and lines and lines[i]:
        parts = re.split(b"(" + delimiters + b")", lines[i])
        slots = list(range(0, len(parts), 2))
        j = rng.choice(slots)
        old = parts[j]
        if how == "token":
            new = nasty_cell(rng).encode("utf-8", errors="surrogateescape")
            parts[j] = new
            detail = f"line {i + 1}: field {j // 2} {old[:40]!r} -> {new[:40]!r}"
        else:
            del parts[j : j + 2]
            detail = f"line {i + 1}: field {j // 2} ({old[:40]!r}) removed"
        lines[i] = b"".join(parts)
        return b"\n".join(lines), detail
    if how == "dup_lines" and lines:
        k = rng.randint(1, 50)
        lines[i:i] = [lines[i]] * k
        return b"\n".join(lines), f"line {i + 1} repeated {k} more times"
    if how == "delete_lines" and lines:
        k = rng.randint(1, max(1, len(lines) // 2))
        del lines[i : i + k]
        return b"\n".join(lines), f"{k} lines deleted from line {i + 1}"
    if how == "long_line":
        lines.insert(i, b"N" * ONE_MB)
        return b"\n".join(lines), f"a 1 MB line inserted at line {i + 1}"
    if how == "crlf":
        return data.replace(b"\n", b"\r\n"), "CRLF line ends"
    if how == "nul":
        out, detail = splice(data, rng, b"\x00" * rng.choice([1, 64]))
        return out, "NUL bytes: " + detail
    if how == "non_utf8":
        out, detail = splice(data, rng, b"\xff\xfe\xc3\x28")
        return out, "non-UTF-8 bytes: " + detail
    if how == "empty":
        return b"", "emptied"
    if how == "shuffle" and len(lines) > 2:
        body = lines[1:]
        rng.shuffle(body)
        return b"\n".join(lines[:1] + body), "lines after the first shuffled"
    if how == "zero_fill":
        return zero_fill(data, rng)
    if how == "bitflip":
        return bitflip(data, rng)
    return truncate(data, rng)


# --------------------------------------------------------------------------------------------
# The profview output contract (docs/formats.md): which CSV columns are numbers
# --------------------------------------------------------------------------------------------

TEXT_COLUMNS = {
    "device",
    "op_type",
    "category",
    "name",
    "shapes",
    "scope",
    "queue",
    "event",
    "source",
    "metric",
    "fp_start_source",
    "bp_end_source",
    "step_source",
    "tc_eligible",
    "tensor_cores",
}
INT_COLUMNS = {
    "step",
    "count",
    "size",
    "capacity",
    "start_unix_ns",
    "fp_start_unix_ns",
    "bp_end_unix_ns",
    "end_unix_ns",
}
#: Numeric cells that may hold a value that is not finite, in exactly the writer's spellings
#: (docs/formats.md: a user counter may be NaN or infinite; device_counters writes nan / inf / -inf).
NON_FINITE_CELLS = {("device_counters", "value"): ("nan", "inf", "-inf")}
#: Columns the viewer must find in each file (a file without one of them is invalid).
REQUIRED_COLUMNS = {
    "step_trace": {"step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms"},
    "op_type": {"device", "op_type", "count", "total_ms", "avg_ms", "share_pct"},
    "op_detail": {"device", "op_type", "name", "count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"},
    "data_queue": {"queue", "time_ms", "size", "capacity"},
    "device_counters": {"source", "device", "metric", "time_ms", "value"},
}


def _csv_kind(name: str) -> str:
    return re.sub(r"_\d+\.csv$", "", name)


def mutate_profview_csv(data: bytes, name: str, rng: random.Random) -> tuple[bytes, str, str]:
    """One damage to one of profview's output CSVs. Returns (bytes, detail, expectation)."""
    text = data.decode("utf-8")
    lines = text.split("\n")
    header = lines[0].split(",")
    rows = [i for i in range(1, len(lines)) if lines[i]]
    kind = _csv_kind(name)
    how = rng.choice(
        [
            "cell",
            "cell",
            "cell",
            "cell",
            "drop_column",
            "rename_column",
            "duplicate_column",
            "extra_column",
            "duplicate_rows",
            "shuffle_rows",
            "short_row",
            "long_row",
            "header_only",
            "empty",
            "semicolons",
            "unbalanced_quote",
            "bom",
            "crlf",
            "non_utf8",
            "nul",
            "truncate",
            "bitflip",
            "zero_fill",
        ]
    )
    if how == "cell" and rows:
        r = rng.choice(rows)
        cells = lines[r].split(",")
        c = rng.randrange(min(len(cells), len(header)))
        value = nasty_cell(rng)
        old = cells[c]
        cells[c] = value if not any(ch in value for ch in ',"\n') else '"' + value.replace('"', '""') + '"'
        lines[r] = ",".join(cells)
        column = header[c]
        expect = EITHER
        if (
            column not in TEXT_COLUMNS
            and not numeric_ok(value, integer=column in INT_COLUMNS)
            and value not in NON_FINITE_CELLS.get((kind, column), ())
        ):
            expect = REFUSE  # a non-number (or NaN / inf) where the contract has a number
        return ("\n".join(lines)).encode("utf-8"), f"cell line {r + 1} {column}: {old!r} -> {value[:40]!r}", expect
    if how in ("drop_column", "rename_column", "duplicate_column") and header:
        c = rng.randrange(len(header))
        column = header[c]
        if how == "drop_column":
            new = [",".join(x for k, x in enumerate(line.split(",")) if k != c) if line else line for line in lines]
            expect = REFUSE if column in REQUIRED_COLUMNS.get(kind, ()) else EITHER
            return "\n".join(new).encode(), f"column {column} removed", expect
        if how == "rename_column":
            header[c] = rng.choice([column.upper(), column + " ", "", "x" * 300, column + "\x00"])
            lines[0] = ",".join(header)
            expect = REFUSE if column in REQUIRED_COLUMNS.get(kind, ()) else EITHER
            return "\n".join(lines).encode(), f"column {column} renamed {header[c][:20]!r}", expect
        new = [line + "," + line.split(",")[c] if line else line for line in lines]
        return "\n".join(new).encode(), f"column {column} duplicated at the end", EITHER
    if how == "extra_column":
        new = [line + (",extra" if i == 0 else ",1") if line else line for i, line in enumerate(lines)]
        return "\n".join(new).encode(), "an extra column", EITHER
    if how == "duplicate_rows" and rows:
        r = rng.choice(rows)
        lines[r:r] = [lines[r]] * rng.randint(1, 5)
        return "\n".join(lines).encode(), f"line {r + 1} repeated", EITHER
    if how == "shuffle_rows" and len(rows) > 1:
        body = [lines[i] for i in rows]
        rng.shuffle(body)
        return "\n".join([lines[0]] + body + [""]).encode(), "rows shuffled", EITHER
    if how in ("short_row", "long_row") and rows:
        r = rng.choice(rows)
        cells = lines[r].split(",")
        if how == "short_row":
            k = rng.randint(1, len(cells) - 1) if len(cells) > 1 else 1
            lines[r] = ",".join(cells[:k])
            missing = header[k:]
            expect = REFUSE if set(missing) & (REQUIRED_COLUMNS.get(kind, set()) - TEXT_COLUMNS) else EITHER
            return "\n".join(lines).encode(), f"line {r + 1} cut to {k} fields", expect
        lines[r] = lines[r] + ",1,2,3"
        return "\n".join(lines).encode(), f"line {r + 1} has 3 fields too many", EITHER
    if how == "header_only":
        return (lines[0] + "\n").encode(), "header only (no rows)", EITHER
    if how == "empty":
        return b"", "emptied", REFUSE
    if how == "semicolons":
        return text.replace(",", ";").encode(), "semicolon-separated", REFUSE
    if how == "unbalanced_quote" and rows:
        r = rng.choice(rows)
        lines[r] = '"' + lines[r]
        return "\n".join(lines).encode(), f"unbalanced quote on line {r + 1}", EITHER
    if how == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 byte-order mark", EITHER
    if how == "crlf":
        return data.replace(b"\n", b"\r\n"), "CRLF line ends", EITHER
    if how == "non_utf8":
        out, detail = splice(data, rng, b"\xff\xfe")
        return out, "non-UTF-8 bytes: " + detail, REFUSE
    if how == "nul":
        out, detail = splice(data, rng, b"\x00")
        return out, "NUL byte: " + detail, EITHER
    if how == "bitflip":
        out, detail = bitflip(data, rng)
        return out, detail, EITHER
    if how == "zero_fill":
        out, detail = zero_fill(data, rng)
        return out, detail, EITHER
    out, detail = truncate(data, rng)
    return out, detail, REFUSE if len(out) == 0 else EITHER


def _floats(row: dict, names: Sequence[str]) -> dict[str, float]:
    return {n: float(row[n]) for n in names if n in row and row[n] not in (None, "")}


def contract_problems(out_dir: Path) -> Optional[str]:
    """What in the profview CSVs of `out_dir` breaks docs/formats.md: a number that is not finite,
    a negative duration, a step that does not add up, a self time above its total, a share above
    100 %, a queue fuller than its capacity, a step number given twice. None when all hold.

    An analysis or import that accepted damaged input must still write numbers that obey the
    contract: anything else is a wrong number in the report."""
    import csv
    import math

    csv.field_size_limit(2**31 - 1)  # 1 MB op names are valid
    eps = lambda x: 2e-5 + 1e-9 * abs(x)
    for path in sorted(out_dir.glob("*.csv")):
        kind = _csv_kind(path.name)
        if kind not in REQUIRED_COLUMNS:
            continue
        try:
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            return f"{path.name} cannot be read back: {exc}"
        seen_steps = set()
        for line, row in enumerate(rows, start=2):
            where = f"{path.name} line {line}"
            numeric = [c for c in row if c is not None and c not in TEXT_COLUMNS]
            try:
                v = _floats(row, numeric)
            except (TypeError, ValueError):
                return f"{where}: a numeric column holds text ({row})"[:300]
            bad = [
                c for c, x in v.items() if not math.isfinite(x) and row[c] not in NON_FINITE_CELLS.get((kind, c), ())
            ]
            if bad:
                return f"{where}: {bad[0]} = {row[bad[0]]} (not a finite number)"
            if kind == "step_trace":
                for c in (
                    "iteration_gap_ms",
                    "fp_bp_ms",
                    "tail_ms",
                    "total_ms",
                    "all_reduce_ms",
                    "all_reduce_overlap_ms",
                    "data_wait_ms",
                    "profiler_overhead_ms",
                ):
                    if v.get(c, 0) < 0:
                        return f"{where}: {c} = {row[c]} (a negative duration)"
                parts = v["iteration_gap_ms"] + v["fp_bp_ms"] + v["tail_ms"]
                if abs(parts - v["total_ms"]) > eps(v["total_ms"]):
                    return f"{where}: total_ms {row['total_ms']} != gap + fp_bp + tail = {parts:.6f}"
                if v.get("all_reduce_overlap_ms", 0) > v.get("all_reduce_ms", 0) + eps(v.get("all_reduce_ms", 0)):
                    return f"{where}: all_reduce_overlap_ms > all_reduce_ms"
                if v["step"] in seen_steps:
                    return f"{where}: step {row['step']} appears twice"
                seen_steps.add(v["step"])
            elif kind in ("op_type", "op_detail"):
                if v["count"] < 1:
                    return f"{where}: count = {row['count']}"
                for c in ("total_ms", "self_ms", "avg_ms", "min_ms", "max_ms", "share_pct"):
                    if v.get(c, 0) < 0:
                        return f"{where}: {c} = {row[c]} (negative)"
                if "self_ms" in v and v["self_ms"] > v["total_ms"] + eps(v["total_ms"]):
                    return f"{where}: self_ms {row['self_ms']} > total_ms {row['total_ms']}"
                if v["share_pct"] > 100 + 1e-4:
                    return f"{where}: share_pct = {row['share_pct']}"
                if abs(v["avg_ms"] * v["count"] - v["total_ms"]) > eps(v["total_ms"]) * max(1.0, v["count"]):
                    return f"{where}: avg_ms x count != total_ms"
                if "min_ms" in v and not v["min_ms"] - 1e-6 <= v["avg_ms"] <= v["max_ms"] + 1e-6:
                    return f"{where}: avg_ms outside [min_ms, max_ms]"
            elif kind == "data_queue":
                if v["size"] < 0 or v["capacity"] < 0 or (v["capacity"] > 0 and v["size"] > v["capacity"]):
                    return f"{where}: size {row['size']} with capacity {row['capacity']}"
                if v.get("wait_ms", 0) < 0:
                    return f"{where}: wait_ms = {row['wait_ms']} (negative)"
    return None


def _both(first: Callable[[Case], Optional[str]], second: Optional[Callable[[Case], Optional[str]]]):
    if second is None:
        return first
    return lambda case: first(case) or second(case)


def _contract_oracle(out_dir: Path) -> Callable[[Case], Optional[str]]:
    return lambda case: contract_problems(out_dir) if out_dir.is_dir() else None


# --------------------------------------------------------------------------------------------
# The raw store's chunks (docs/architecture.md, "The raw store")
# --------------------------------------------------------------------------------------------

CHUNK_PREFIX = struct.Struct("<4sIQI")  # "PVCK", header_len, payload_len, crc32(header + payload)


@dataclass
class RawChunk:
    header: bytes
    payload: bytes

    def encode(self) -> bytes:
        crc = zlib.crc32(self.payload, zlib.crc32(self.header))
        return CHUNK_PREFIX.pack(b"PVCK", len(self.header), len(self.payload), crc) + self.header + self.payload

    def head(self) -> dict:
        try:
            value = json.loads(self.header)
            return value if isinstance(value, dict) else {}
        except ValueError:
            return {}


def split_chunks(data: bytes) -> list[RawChunk]:
    chunks, pos = [], 0
    while pos + CHUNK_PREFIX.size <= len(data):
        magic, hl, pl, _ = CHUNK_PREFIX.unpack_from(data, pos)
        if magic != b"PVCK" or pos + CHUNK_PREFIX.size + hl + pl > len(data):
            break
        body = pos + CHUNK_PREFIX.size
        chunks.append(RawChunk(data[body : body + hl], data[body + hl : body + hl + pl]))
        pos = body + hl + pl
    return chunks


NASTY_INT64 = [0, 1, -1, 2**63 - 1, -(2**63), 2**62, 10**18, -(10**15), 12345678901, 7, 8, 2**31, 2**32 + 1]


def mutate_raw_chunks(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A damage that keeps every chunk's checksum valid, so it reaches past the torn-chunk check."""
    chunks = split_chunks(data)
    if not chunks:
        return truncate(data, rng)
    how = rng.choice(
        [
            "drop",
            "drop",
            "duplicate",
            "reorder",
            "header",
            "header",
            "header_bytes",
            "json_payload",
            "json_payload",
            "json_payload",
            "words",
            "words",
            "words",
            "odd_payload",
            "len_lie",
        ]
    )
    i = rng.randrange(len(chunks))
    table = chunks[i].head().get("table", "?")
    if how == "drop":
        tables = [c.head().get("table") for c in chunks]
        want = rng.choice(["meta", "descriptors", "threads", "end", "sources", "events", "samples", None])
        if want in tables:
            i = tables.index(want)
            table = want
        del chunks[i]
        detail = f"chunk {i} ({table}) removed"
    elif how == "duplicate":
        chunks.insert(i, chunks[i])
        detail = f"chunk {i} ({table}) written twice"
    elif how == "reorder":
        c = chunks.pop(i)
        j = rng.randrange(len(chunks) + 1)
        chunks.insert(j, c)
        detail = f"chunk {i} ({table}) moved to {j}"
    elif how == "header":
        head = chunks[i].head() or {"v": 1}
        key = rng.choice(sorted(head) + ["v", "table", "words", "thread", "first", "dropped", "fmt"])
        token, _ = nasty_json_token(rng)
        if rng.random() < 0.3:
            token = rng.choice(
                [
                    "2",
                    '"1"',
                    "-1",
                    "0",
                    '"events"',
                    '"samples"',
                    '"no-such-table"',
                    "1.5",
                    '"json"',
                    '"bin"',
                    "99999999999999999999",
                ]
            )
        chunks[i].header = dumps_with_token(head, [key], token)
        detail = f"chunk {i} ({table}) header {key} = {token[:60]}"
    elif how == "header_bytes":
        blob = rng.choice(
            [
                b"",
                b"not json",
                b"[1,2]",
                b'"x"',
                b"\xff\xfe",
                b"{" * 10000,
                b"null",
                b'{"v":1,"table":"meta","v":2}',
                b'{"v": NaN, "table": "events"}',
            ]
        )
        chunks[i].header = blob
        detail = f"chunk {i} ({table}) header bytes = {blob[:30]!r}"
    elif how == "json_payload":
        json_chunks = [k for k, c in enumerate(chunks) if c.head().get("fmt") == "json"]
        if json_chunks:
            i = rng.choice(json_chunks)
            table = chunks[i].head().get("table")
        out, d, _ = mutate_json_bytes(chunks[i].payload, rng, strict_invalid_refuses=False)
        chunks[i].payload = out
        detail = f"chunk {i} ({table}) JSON payload {d}"
    elif how in ("words", "odd_payload"):
        bin_chunks = [k for k, c in enumerate(chunks) if c.head().get("words")]
        if bin_chunks:
            i = rng.choice(bin_chunks)
            table = chunks[i].head().get("table")
        payload = bytearray(chunks[i].payload)
        if how == "odd_payload" or len(payload) < 8:
            cut = rng.choice([1, 3, 7, 8, 12, 24])
            chunks[i].payload = bytes(payload[: max(0, len(payload) - cut)])
            detail = f"chunk {i} ({table}) payload shortened by {cut} bytes (not whole records)"
        else:
            edits = []
            for _ in range(rng.randint(1, 4)):
                w = rng.randrange(len(payload) // 8)
                value = rng.choice(NASTY_INT64 + [rng.randrange(-(2**63), 2**63)])
                struct.pack_into("<q", payload, 8 * w, value)
                edits.append(f"word {w}={value}")
            chunks[i].payload = bytes(payload)
            detail = f"chunk {i} ({table}) payload {', '.join(edits)}"
    else:
        c = chunks[i]
        lie = rng.choice([0, 1, 2**32 - 1, 2**63, 2**64 - 1])
        field_ = rng.choice(["header_len", "payload_len"])
        raw = bytearray(c.encode())
        if field_ == "header_len":
            struct.pack_into("<I", raw, 4, lie % 2**32)
        else:
            struct.pack_into("<Q", raw, 8, lie)
        before = b"".join(x.encode() for x in chunks[:i])
        after = b"".join(x.encode() for x in chunks[i + 1 :])
        return before + bytes(raw) + after, f"chunk {i} ({table}) {field_} = {lie} (CRC unchanged)"
    return b"".join(c.encode() for c in chunks), detail


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a mutation works on: a fresh copy of the entry point's seed in `work`."""

    rng: random.Random
    work: Path
    seeds: Seeds
    entry: str  # the entry point the case is for
    kind: str  # seed kind of `input`: profview, kineto, job, ms_cpu, ms_gold
    input: Path  # what the entry point opens (a mutation may replace it)
    args: list[Arg] = field(default_factory=list)  # extra CLI arguments
    output: Optional[Path] = None  # overrides the -o target
    detail: str = ""
    expect: str = EITHER
    skip: str = ""  # non-empty: the case cannot be built here (why)
    check: Optional[Callable[[Case], Optional[str]]] = None  # an oracle for exit 0: a problem or None

    def say(self, detail: str, expect: str = EITHER) -> None:
        self.detail, self.expect = detail, expect


@dataclass(frozen=True)
class Mutation:
    name: str
    family: str  # raw store, outputs, kineto, ascend, mindspore, paths, cli
    kinds: tuple[str, ...]  # seed kinds it applies to ("*": any)
    apply: Callable[[Ctx], None]
    entries: Optional[tuple[str, ...]] = None  # restrict to these entry points


@dataclass
class Case:
    entry: str
    mutation: str
    family: str
    seed: int
    kind: str
    detail: str
    expect: str
    work: Path
    commands: list[list[Arg]]  # CLI argument lists, run in order while they succeed
    output: Optional[Path] = None  # must exist after exit 0
    skip: str = ""
    check: Optional[Callable[[Case], Optional[str]]] = None

    def describe(self) -> str:
        cmds = " && ".join("profview " + " ".join(shlex.quote(_short(a, self.work)) for a in c) for c in self.commands)
        return (
            f"entry point {self.entry}, mutation {self.family}/{self.mutation} (seed {self.seed}, "
            f"input {self.kind}): {self.detail} [expect {self.expect}]\n  $ {cmds}"
        )


def _short(arg: Arg, work: Path) -> str:
    s = os.fsdecode(arg) if isinstance(arg, (bytes, Path)) else str(arg)
    s = s.replace(str(work), "$CASE")
    return s if len(s) < 300 else s[:60] + f"...({len(s)} chars)"


MUTATIONS: dict[str, Mutation] = {}


def mutation(name: str, family: str, kinds: Sequence[str], entries: Optional[Sequence[str]] = None):
    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        MUTATIONS[name] = Mutation(name, family, tuple(kinds), fn, tuple(entries) if entries else None)
        return fn

    return register


def _files(root: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in root.rglob(pattern) if p.is_file() and not p.is_symlink())


# --- raw store ------------------------------------------------------------------------------


def _raw_files(ctx: Ctx) -> list[Path]:
    return sorted((ctx.input / "raw").glob("*.pvraw"))


def _one_raw(ctx: Ctx) -> Path:
    return ctx.rng.choice(_raw_files(ctx))


def _clear_outputs(ctx: Ctx) -> None:
    """Keep only raw/, so whatever `profview DIR` reads afterwards was written by this analysis."""
    for p in ctx.input.iterdir():
        if p.name != "raw":
            p.unlink() if p.is_file() else shutil.rmtree(p)


@mutation("raw_bytes", "raw store", ["profview"], ["analyse", "watch"])
def _raw_bytes(ctx: Ctx) -> None:
    path = _one_raw(ctx)
    how = ctx.rng.choice(["truncate", "truncate", "bitflip", "zero_fill", "splice"])
    data = path.read_bytes()
    if how == "splice" and ctx.rng.random() < 0.5:
        tail = data[: CHUNK_PREFIX.size + ctx.rng.randrange(40)]
        out, detail = data + tail, f"a partial chunk ({len(tail)} bytes) appended"
    else:
        out, detail = BYTE_DAMAGE[how](data, ctx.rng)
    path.write_bytes(out)
    _clear_outputs(ctx)
    ctx.say(f"{path.name}: {detail}", EITHER)  # torn chunks are skipped by design


@mutation("raw_chunks", "raw store", ["profview"], ["analyse", "watch"])
def _raw_chunks(ctx: Ctx) -> None:
    path = _one_raw(ctx)
    out, detail = mutate_raw_chunks(path.read_bytes(), ctx.rng)
    path.write_bytes(out)
    _clear_outputs(ctx)
    ctx.say(f"{path.name}: {detail} (checksums recomputed)", EITHER)


@mutation("raw_empty_or_nul", "raw store", ["profview"], ["analyse", "watch"])
def _raw_empty(ctx: Ctx) -> None:
    path = _one_raw(ctx)
    data = path.read_bytes()
    choice = ctx.rng.choice(["empty", "nul", "random", "magic_only"])
    out = {
        "empty": b"",
        "nul": bytes(len(data)),
        "random": ctx.rng.randbytes(len(data)),
        "magic_only": b"PVCK" * (len(data) // 4),
    }[choice]
    path.write_bytes(out)
    _clear_outputs(ctx)
    ctx.say(f"{path.name}: the only raw file is {choice} ({len(out)} bytes)", REFUSE)


def _count_oracle(seed_dir: Path) -> Callable[[Case], Optional[str]]:
    """After re-analysing a store whose raw file was duplicated, the op counts must be the seed's."""

    def check(case: Case) -> Optional[str]:
        expected = _op_counts(seed_dir / "op_type_0.csv")
        got = _op_counts(case.work / "input" / "op_type_0.csv")
        if expected and got and got != expected:
            return f"op counts changed: seed {expected}, after the duplicate {got} (events counted twice)"
        steps_seed = _line_count(seed_dir / "step_trace_0.csv")
        steps_got = _line_count(case.work / "input" / "step_trace_0.csv")
        if steps_got is not None and steps_seed is not None and steps_got != steps_seed:
            return f"step_trace_0.csv has {steps_got - 1} steps, the recording had {steps_seed - 1}"
        return None

    return check


def _op_counts(path: Path) -> Optional[dict[str, str]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    header = lines[0].split(",")
    if "op_type" not in header or "count" not in header:
        return None
    t, c = header.index("op_type"), header.index("count")
    return {row.split(",")[t]: row.split(",")[c] for row in lines[1:] if row}


def _line_count(path: Path) -> Optional[int]:
    try:
        return len([x for x in path.read_text().splitlines() if x])
    except OSError:
        return None


@mutation("raw_duplicated_pid", "raw store", ["profview"], ["analyse", "watch"])
def _raw_dup(ctx: Ctx) -> None:
    path = _one_raw(ctx)
    m = re.match(r"r(\d+)-p(\d+)\.pvraw", path.name)
    other = f"r{m.group(1)}-p{int(m.group(2)) + ctx.rng.choice([1, 1000, 99999])}.pvraw" if m else "r0-p1.pvraw"
    shutil.copyfile(path, path.with_name(other))
    _clear_outputs(ctx)
    ctx.check = _count_oracle(ctx.seeds.profview)
    ctx.say(f"{path.name} copied to {other} (the same recording twice, under another pid)", EITHER)


@mutation("raw_other_rank", "raw store", ["profview"], ["analyse", "watch"])
def _raw_other_rank(ctx: Ctx) -> None:
    path = _one_raw(ctx)
    name = ctx.rng.choice(
        [
            "r1-p1.pvraw",
            "r-1-p1.pvraw",
            "r99999999999999999999999-p1.pvraw",
            "rX-pY.pvraw",
            ".pvraw",
            "r0-p.pvraw",
            "r٣-p1.pvraw",
            "r0-p1.pvraw.pvraw",
        ]
    )
    shutil.copyfile(path, path.with_name(name))
    _clear_outputs(ctx)
    ctx.say(f"{path.name} also stored as {name!r}", EITHER)


@mutation("raw_special_entry", "raw store", ["profview"], ["analyse", "watch"])
def _raw_special(ctx: Ctx) -> None:
    raw = ctx.input / "raw"
    what = ctx.rng.choice(
        [
            "fifo",
            "symlink_loop",
            "dangling_symlink",
            "directory",
            "dev_zero",
            "dev_null",
            "unreadable",
            "socket_like_fifo_only",
        ]
    )
    name = "r0-p99999.pvraw"
    target = raw / name
    if what == "fifo":
        os.mkfifo(target)
    elif what == "socket_like_fifo_only":
        for p in _raw_files(ctx):
            p.unlink()
        os.mkfifo(target)
    elif what == "symlink_loop":
        os.symlink(name, target)
    elif what == "dangling_symlink":
        os.symlink("no-such-file.pvraw", target)
    elif what == "directory":
        target.mkdir()
        (target / "x").write_text("x")
    elif what == "dev_zero":
        os.symlink("/dev/zero", target)
    elif what == "dev_null":
        os.symlink("/dev/null", target)
    else:
        if ctx.seeds.privileged:
            ctx.skip = "chmod 000 does not deny reads here (running privileged)"
        target = _one_raw(ctx)
        target.chmod(0)
    _clear_outputs(ctx)
    expect = REFUSE if what == "socket_like_fifo_only" else EITHER
    ctx.say(f"raw/{target.name} is {what.replace('socket_like_fifo_only', 'the only entry, a FIFO')}", expect)


@mutation("raw_dir_structure", "raw store", ["profview"], ["analyse", "watch"])
def _raw_structure(ctx: Ctx) -> None:
    raw = ctx.input / "raw"
    what = ctx.rng.choice(
        ["raw_is_file", "raw_empty", "raw_missing", "raw_symlink_loop", "raw_nested", "raw_previous_only"]
    )
    _clear_outputs(ctx)
    if what == "raw_is_file":
        shutil.rmtree(raw)
        raw.write_text("not a directory\n")
    elif what == "raw_empty":
        shutil.rmtree(raw)
        raw.mkdir()
    elif what == "raw_missing":
        shutil.rmtree(raw)
    elif what == "raw_symlink_loop":
        shutil.rmtree(raw)
        os.symlink("raw", raw)
    elif what == "raw_nested":
        sub = raw / "deeper"
        sub.mkdir()
        for p in _raw_files(ctx):
            p.rename(sub / p.name)
    else:
        prev = raw / "previous" / "20250101-000000"
        prev.mkdir(parents=True)
        for p in _raw_files(ctx):
            p.rename(prev / p.name)
    ctx.say(what.replace("_", " "), REFUSE)


# --- profview outputs -------------------------------------------------------------------------

OUTPUT_CSVS = ("step_trace_0.csv", "op_type_0.csv", "op_detail_0.csv", "data_queue_0.csv", "device_counters_0.csv")
OUTPUT_JSONS = ("profiler_info_0.json", "queue_summary_0.json", "report_0.json")
VIEW_ENTRIES = ("view-html", "view-summary", "compare")


@mutation("output_csv", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _output_csv(ctx: Ctx) -> None:
    name = ctx.rng.choice(OUTPUT_CSVS)
    path = ctx.input / name
    out, detail, expect = mutate_profview_csv(path.read_bytes(), name, ctx.rng)
    path.write_bytes(out)
    ctx.say(f"{name}: {detail}", expect)


@mutation("output_json", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _output_json(ctx: Ctx) -> None:
    name = ctx.rng.choice(OUTPUT_JSONS)
    path = ctx.input / name
    out, detail, expect = mutate_json_bytes(path.read_bytes(), ctx.rng, strict_invalid_refuses=True)
    path.write_bytes(out)
    ctx.say(f"{name}: {detail}", expect)


@mutation("output_info_fields", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _info_fields(ctx: Ctx) -> None:
    path = ctx.input / "profiler_info_0.json"
    info = json.loads(path.read_text())
    rng = ctx.rng
    key = rng.choice(
        [
            "schema_version",
            "outputs",
            "rank",
            "world_size",
            "steps",
            "clock",
            "recording",
            "source_path",
            "data_origin",
            "warnings",
            "sources",
            "overhead",
        ]
    )
    values = {
        "schema_version": ["2", '"1"', "1.0", "-1", "null", "true", "99999999999999999999", "0"],
        "outputs": [
            '["no_such_file.csv"]',
            '["../../../etc/passwd"]',
            "[1, null, {}]",
            '"step_trace_0.csv"',
            '["timeline_0.json", "timeline_0.json"]',
            "null",
            '["' + "x" * 5000 + '"]',
        ],
        "rank": ["5", "-1", '"0"', "null", "1e300"],
        "world_size": ["0", "-1", "1000000000", '"x"', "null"],
        "steps": ['{"count": -1, "first": 5, "last": 2}', '{"count": "x"}', "[]", "null"],
        "clock": ['{"origin_unix_ns": "x"}', '{"origin_unix_ns": 1e300}', '{"origin_unix_ns": -1}', "[]", "null"],
        "recording": ['{"dropped_events": -5, "torn_chunks": "x"}', '{"events": 1e400}', "[]", "7"],
        "source_path": ['"' + "p" * 100_000 + '"', "[]", '"\\u0000"', '"\\ud800"', "42"],
        "data_origin": ['"kineto"', '"ascend"', '"unknown"', "null", "[]"],
        "warnings": ['"just a string"', "[1, 2]", "[null]", '["' + "w" * ONE_MB + '"]', "{}"],
        "sources": ['{"markers": "ok"}', "[]", '{"x": {"status": 5}}'],
        "overhead": ['{"total_ms": "x", "per_event_ns": null}', "[]", '{"total_ms": -1e300}'],
    }[key]
    token = rng.choice(values)
    info[key] = SENTINEL
    path.write_bytes(dumps_with_token(info, [key], token, compact=False))
    expect = EITHER
    if key == "schema_version" and token not in ("1.0", "true", "0", "-1"):
        expect = REFUSE if token not in ("null",) else EITHER
    if key == "outputs" and token in ('["no_such_file.csv"]', '["' + "x" * 5000 + '"]'):
        expect = REFUSE
    ctx.say(f"profiler_info_0.json {key} = {token[:60]}", expect)


@mutation("output_timeline", "outputs CSV/JSON", ["profview"], ("view-html", "compare"))
def _timeline(ctx: Ctx) -> None:
    path = ctx.input / "timeline_0.json"
    data = path.read_bytes()
    rng = ctx.rng
    how = rng.choice(
        [
            "line_field",
            "line_field",
            "line_field",
            "bytes",
            "pretty",
            "garbage_line",
            "events_per_line",
            "huge_name",
            "gz_name",
            "empty",
        ]
    )
    if how == "line_field":
        lines = data.split(b"\n")
        event_lines = [i for i, line in enumerate(lines) if line.startswith(b'{"ph"')]
        i = rng.choice(event_lines)
        key = rng.choice([b"ts", b"dur", b"pid", b"tid", b"ph", b"name", b"args", b"cat"])
        m = re.search(b'"' + key + b'":("[^"]*"|[^,}]*|\\{[^}]*\\})', lines[i])
        token = rng.choice(
            [
                "-1",
                "1e300",
                "1e400",
                "NaN",
                "Infinity",
                '"12"',
                "null",
                "[]",
                "-0",
                "99999999999999999999999",
                '"X"',
                '"B"',
                '"E"',
                '"C"',
                "   7",
                "1" * 5000,
            ]
        )
        if m:
            lines[i] = lines[i][: m.start(1)] + token.encode() + lines[i][m.end(1) :]
        path.write_bytes(b"\n".join(lines))
        ctx.say(f"timeline_0.json line {i + 1}: {key.decode()} = {token[:40]}", EITHER)
    elif how == "bytes":
        out, detail = BYTE_DAMAGE[rng.choice(list(BYTE_DAMAGE))](data, rng)
        path.write_bytes(out)
        ctx.say(f"timeline_0.json: {detail}", EITHER)
    elif how == "pretty":
        path.write_text(json.dumps(json.loads(data), indent=rng.choice([1, 4])))
        ctx.say("timeline_0.json pretty-printed (valid)", EITHER)
    elif how == "events_per_line":
        path.write_text(json.dumps(json.loads(data), separators=(",", ":")))
        ctx.say("timeline_0.json on one line (valid)", EITHER)
    elif how == "garbage_line":
        lines = data.split(b"\n")
        i = rng.randrange(1, len(lines))
        lines.insert(
            i, rng.choice([b"garbage", b"{}", b'{"ph":"X"},', b"\x00\x00", b"\xff\xfe,", b'{"ph":"X","ts":,"dur":},'])
        )
        path.write_bytes(b"\n".join(lines))
        ctx.say(f"timeline_0.json: a garbage line at {i + 1}", EITHER)
    elif how == "huge_name":
        doc = json.loads(data)
        doc["traceEvents"][rng.randrange(len(doc["traceEvents"]))]["name"] = "N" * ONE_MB
        path.write_text(json.dumps(doc, separators=(",", ":")).replace("},{", "},\n{"))
        ctx.say("timeline_0.json: a 1 MB event name", EITHER)
    elif how == "gz_name":
        path.rename(path.with_name("timeline_0.json.gz"))
        ctx.say("timeline_0.json renamed timeline_0.json.gz (not gzip)", EITHER)
    else:
        path.write_bytes(b"")
        ctx.say("timeline_0.json emptied", EITHER)


@mutation("output_files", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _output_files(ctx: Ctx) -> None:
    rng = ctx.rng
    name = rng.choice(OUTPUT_CSVS + OUTPUT_JSONS + ("timeline_0.json",))
    path = ctx.input / name
    what = rng.choice(["delete", "directory", "fifo", "symlink_loop", "dev_zero", "unreadable", "dangling_symlink"])
    if what == "unreadable":
        if ctx.seeds.privileged:
            ctx.skip = "chmod 000 does not deny reads here (running privileged)"
        path.chmod(0)
    else:
        path.unlink()
        if what == "directory":
            path.mkdir()
            (path / "x").write_text("x")
        elif what == "fifo":
            os.mkfifo(path)
        elif what == "symlink_loop":
            os.symlink(name, path)
        elif what == "dev_zero":
            os.symlink("/dev/zero", path)
        elif what == "dangling_symlink":
            os.symlink("gone-" + name, path)
    ctx.say(f"{name} is {what.replace('_', ' ')}", REFUSE)  # every one of them is listed in `outputs`


@mutation("output_extra_ranks", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _extra_ranks(ctx: Ctx) -> None:
    rng = ctx.rng
    rank = rng.choice(["1", "7", "00", "99999999999999999999999", "٣", "-1", "0x1"])
    names = ["profiler_info_0.json"] + (list(OUTPUT_CSVS + OUTPUT_JSONS[1:]) if rng.random() < 0.5 else [])
    for name in names:
        shutil.copyfile(ctx.input / name, ctx.input / name.replace("_0.", f"_{rank}."))
    ctx.say(f"rank 0's files copied as rank {rank!r} ({len(names)} files)", EITHER)


@mutation("output_dir_state", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _dir_state(ctx: Ctx) -> None:
    what = ctx.rng.choice(["only_raw", "only_info", "emptied", "info_only_json_list"])
    for p in list(ctx.input.iterdir()):
        if what == "only_raw" and p.name == "raw":
            continue
        if what in ("only_info", "info_only_json_list") and p.name == "profiler_info_0.json":
            continue
        p.unlink() if p.is_file() else shutil.rmtree(p)
    if what == "info_only_json_list":
        info = json.loads((ctx.input / "profiler_info_0.json").read_text())
        info["outputs"] = []
        (ctx.input / "profiler_info_0.json").write_text(json.dumps(info))
        ctx.say("only profiler_info_0.json, listing no outputs", EITHER)
        return
    ctx.say(f"directory {what.replace('_', ' ')}", REFUSE)


#: JSON values of every type (and numbers beyond 64 bits), to put where a reader expects another type.
TYPE_TOKENS = [
    '"x"',
    '""',
    "0",
    "-1",
    "1.5",
    "true",
    "false",
    "null",
    "[]",
    "{}",
    '[1, "a", null]',
    '{"a": {"b": 1}}',
    str(10**30),
    "-1e308",
    "1e308",
    '"1e308"',
]


@mutation("output_json_types", "outputs CSV/JSON", ["profview", "cluster"], VIEW_ENTRIES)
def _json_types(ctx: Ctx) -> None:
    """A key of an output JSON document given a value of another JSON type (or beyond 64 bits)."""
    rng = ctx.rng
    names = list(OUTPUT_JSONS) + (["cluster_summary.json"] * 3 if ctx.kind == "cluster" else [])
    name = rng.choice(names)
    path = ctx.input / name
    doc = json.loads(path.read_text())
    at = random_json_path(doc, rng)
    if not at:
        at = [rng.choice(list(doc))]
    token = rng.choice(TYPE_TOKENS)
    path.write_bytes(dumps_with_token(doc, at, token, compact=rng.random() < 0.5))
    ctx.say(f"{name} {_show_path(at)} = {token}", EITHER)


#: Numbers at and beyond what a 64-bit clock or count holds, and the smallest floats.
EXTREME_CELLS = [
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "99999999999999999999",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "9.3e12",
    "9.2e12",
    "5e-324",
    "1e-300",
    "-0.0",
    "1e15",
    "4503599627370497",
]
#: The largest magnitude docs/formats.md allows in a column: ms (and % / ratios) from the int64 ns
#: clock, whole numbers in int64; device_counters.value is any float.
MAX_WHOLE_CELL = 2.0**63
MAX_MS_CELL = MAX_WHOLE_CELL / 1e6


def _beyond_contract(kind: str, column: str, value: str) -> bool:
    if (kind, column) == ("device_counters", "value"):
        return False
    limit = MAX_MS_CELL if column.endswith(("_ms", "_pct", "_ratio")) else MAX_WHOLE_CELL
    return abs(float(value)) >= limit


@mutation("output_extreme_numbers", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _extreme_numbers(ctx: Ctx) -> None:
    """A numeric cell of an output CSV at or beyond 64 bits (a step of 1e308 ms, a capacity of 2**64)."""
    rng = ctx.rng
    name = rng.choice([n for n in OUTPUT_CSVS if len((ctx.input / n).read_text().splitlines()) > 1])
    path = ctx.input / name
    lines = path.read_text().split("\n")
    header = lines[0].split(",")
    kind = _csv_kind(name)
    columns = [c for c in header if c not in TEXT_COLUMNS and not c.endswith("_source") and c != "event"]
    column = rng.choice(columns)
    c = header.index(column)
    rows = [i for i in range(1, len(lines)) if lines[i]]
    value = rng.choice(EXTREME_CELLS)
    changed = rng.sample(rows, rng.choice([1, len(rows)]) if rows else 0)
    for r in changed:
        cells = lines[r].split(",")
        cells[c] = value
        lines[r] = ",".join(cells)
    path.write_text("\n".join(lines))
    ctx.say(
        f"{name}: {column} = {value} on {len(changed)} line(s)",
        REFUSE if _beyond_contract(kind, column, value) else EITHER,
    )


#: Names an op or a queue may have in a user's program, each valid in a CSV cell without quoting.
NASTY_NAMES = ["\x00", "\x00\x00", " ", "nan", "1", "-inf", "\u202e\u00e9\U0001f600", "<b>x</b>", "a\tb", "\x7f"]


def _renamed(doc, old: str, new: str):
    """`doc` with every string (value or key) equal to `old` replaced by `new`."""
    if isinstance(doc, dict):
        return {(new if k == old else k): _renamed(v, old, new) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_renamed(v, old, new) for v in doc]
    return new if doc == old else doc


@mutation("output_names", "outputs CSV/JSON", ["profview"], VIEW_ENTRIES)
def _output_names(ctx: Ctx) -> None:
    """A queue or an op renamed in every output that names it (a NUL-named op with a probed queue)."""
    rng = ctx.rng
    old = rng.choice(["host_queue", "conv1", "Conv2D", "relu1", "forward"])
    new = rng.choice(NASTY_NAMES)
    for name in OUTPUT_CSVS:
        path = ctx.input / name
        lines = path.read_text().split("\n")
        path.write_text("\n".join(",".join(new if cell == old else cell for cell in line.split(",")) for line in lines))
    for name in ("queue_summary_0.json", "report_0.json"):
        path = ctx.input / name
        path.write_text(json.dumps(_renamed(json.loads(path.read_text()), old, new), indent=2))
    ctx.say(f"{old!r} renamed {new!r} in every CSV and JSON output", EITHER)


# --- Kineto traces ----------------------------------------------------------------------------


def _kineto_events(doc) -> list:
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else []


def _strictly_loadable_trace(path: Path) -> bool:
    """Whether a mutated trace file still holds a parseable trace with events (else: must refuse)."""
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data)
    except (OSError, EOFError, ValueError, RecursionError, zlib.error):
        return False
    return bool(_kineto_events(doc))


@mutation("kineto_bytes", "Kineto", ["kineto"])
def _kineto_bytes(ctx: Ctx) -> None:
    data = ctx.input.read_bytes()
    how = ctx.rng.choice(["truncate", "truncate", "bitflip", "bitflip_body", "zero_fill", "splice", "gzip_trailer"])
    if how == "bitflip_body":
        out, detail = bitflip(data, ctx.rng, (min(10, len(data) - 1), len(data)))
    elif how == "gzip_trailer":
        out, detail = (
            data + ctx.rng.choice([b"\x00" * 8, b"garbage", b"\x1f\x8b\x08\x00"]),
            "bytes after the gzip stream",
        )
    else:
        out, detail = BYTE_DAMAGE[how](data, ctx.rng)
    ctx.input.write_bytes(out)
    # a trace cut short is read up to the cut (docs/kineto.md) when a complete event comes before it
    cut = how == "truncate"
    ctx.say(f"{ctx.input.name}: {detail}", EITHER if cut or _strictly_loadable_trace(ctx.input) else REFUSE)


def _load_kineto_json(ctx: Ctx):
    doc = json.loads(gzip.decompress(ctx.input.read_bytes()))
    return doc


def _write_kineto(ctx: Ctx, data: bytes) -> None:
    """Write a mutated trace as .json.gz or plain .json (both are read)."""
    if ctx.rng.random() < 0.5:
        ctx.input.write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    else:
        plain = ctx.input.with_name(ctx.input.name[:-3])
        ctx.input.unlink()
        plain.write_bytes(data)
        ctx.input = plain


#: The event fields and argument fields Kineto writes.
KINETO_FIELDS = ["ts", "dur", "pid", "tid", "ph", "name", "cat", "args", "id", "s", "bp"]
KINETO_ARGS = [
    "device",
    "stream",
    "correlation",
    "Input Dims",
    "External id",
    "Device Id",
    "Total Allocated",
    "Total Reserved",
    "Bytes",
    "Record function id",
    "Ev Idx",
    "name",
    "labels",
    "sort_index",
]


@mutation("kineto_event_fields", "Kineto", ["kineto"])
def _kineto_fields(ctx: Ctx) -> None:
    rng = ctx.rng
    doc = _load_kineto_json(ctx)
    events = _kineto_events(doc)
    interesting = [i for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") in ("X", "i", "C", "M")]
    i = rng.choice(interesting)
    event = events[i]
    if rng.random() < 0.35 and isinstance(event.get("args"), dict):
        key = rng.choice(sorted(event["args"]) + KINETO_ARGS)
        path = ["traceEvents", i, "args", key] if isinstance(doc, dict) else [i, "args", key]
        event["args"].setdefault(key, None)
    else:
        key = rng.choice(sorted(event) + KINETO_FIELDS)
        event.setdefault(key, None)
        path = (["traceEvents"] if isinstance(doc, dict) else []) + [i, key]
    token, strict = nasty_json_token(rng)
    if rng.random() < 0.3:
        token = rng.choice(
            [
                '"X"',
                '"B"',
                '"E"',
                '"b"',
                '"f"',
                '"M"',
                '"??"',
                '"kernel"',
                '"cpu_op"',
                '"user_annotation"',
                '"ProfilerStep#1"',
                '"gpu_memcpy"',
                '"cuda_sync"',
                "-5",
                "0",
            ]
        )
    data = dumps_with_token(doc, path, token)
    _write_kineto(ctx, data)
    ctx.say(
        f"event {i} ({event.get('cat', event.get('ph'))}) {_show_path(path[-2:])} = {token[:60]}",
        EITHER if strict or "\xff" not in token else REFUSE,
    )


@mutation("kineto_kernels_without_device", "Kineto", ["kineto"])
def _kineto_kernels_without_device(ctx: Ctx) -> None:
    """Host events relabelled `kernel` (a foreign or damaged trace): without a device, with device ids
    the trace never describes, or named like collectives; a correct analysis or one sentence, never a
    traceback (issue 33: KeyError 'comm' in findings/device_compute.py)."""
    rng = ctx.rng
    doc = _load_kineto_json(ctx)
    ops = [e for e in _kineto_events(doc) if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") != "kernel"]
    how = rng.choice(["no_device", "unknown_device", "collective_names", "all_of_them"])
    chosen = rng.sample(ops, k=max(1, len(ops) // rng.choice([1, 2, 4, 10]))) if ops else []
    for e in chosen:
        e["cat"] = "kernel"
        args = e["args"] if isinstance(e.get("args"), dict) else {}
        if how in ("no_device", "all_of_them"):
            args.pop("device", None)
            args.pop("stream", None)
        if how in ("unknown_device", "all_of_them"):
            args["device"], args["stream"] = rng.choice([7, 1074, -1, 2**40]), rng.choice([7, 0, -3])
        if how in ("collective_names", "all_of_them"):
            e["name"] = rng.choice(["c10d::allreduce_", "ncclKernel_AllReduce_RING_LL_Sum_float", "all_gather"])
        e["args"] = args
    _write_kineto(ctx, json.dumps(doc).encode())
    ctx.say(f"{len(chosen)} host events relabelled kernel ({how})", EITHER)


@mutation("kineto_steps", "Kineto", ["kineto"])
def _kineto_steps(ctx: Ctx) -> None:
    rng = ctx.rng
    doc = _load_kineto_json(ctx)
    events = _kineto_events(doc)
    steps = [e for e in events if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    ops = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    how = rng.choice(["rename", "overlap", "duplicate", "zero_length", "reverse_time", "add_steps"])
    if how == "rename" and steps:
        e = rng.choice(steps)
        e["name"] = rng.choice(
            [
                "ProfilerStep#",
                "ProfilerStep#x",
                "ProfilerStep#-1",
                "ProfilerStep#1e400",
                "ProfilerStep#99999999999999999999999",
                "ProfilerStep#" + "9" * 5000,
                "ProfilerStep#١",
                "ProfilerStep#1 ",
                "ProfilerStep#0x10",
            ]
        )
        detail = f"a step renamed {e['name'][:40]!r}"
    elif how == "overlap" and len(steps) > 1:
        a, b = rng.sample(steps, 2)
        b["ts"], b["dur"] = a["ts"], a.get("dur", 0) * 3
        detail = "two steps overlapping"
    elif how == "duplicate" and steps:
        e = rng.choice(steps)
        events.append(dict(e))
        detail = f"{e['name']} twice"
    elif how == "zero_length" and ops:
        for e in rng.sample(ops, min(len(ops), 50)):
            e["dur"] = rng.choice([0, -1, -1e9])
        detail = "50 events with zero or negative durations"
    elif how == "reverse_time" and ops:
        top = max(float(e.get("ts", 0)) for e in ops if isinstance(e.get("ts"), (int, float)))
        for e in ops:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = top - e["ts"]
        detail = "time reversed"
    else:
        base = ops[0] if ops else {"ts": 0, "pid": 1, "tid": 1}
        for k in range(rng.choice([1, 100])):
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{k * 7}",
                    "pid": base.get("pid", 1),
                    "tid": base.get("tid", 1),
                    "ts": base.get("ts", 0),
                    "dur": 1,
                }
            )
        detail = "stacked ProfilerStep annotations at one time"
    _write_kineto(ctx, json.dumps(doc).encode())
    ctx.say(detail, EITHER)


@mutation("kineto_structure", "Kineto", ["kineto"])
def _kineto_structure(ctx: Ctx) -> None:
    rng = ctx.rng
    doc = _load_kineto_json(ctx)
    how = rng.choice(
        [
            "no_events",
            "events_not_list",
            "events_empty",
            "bare_array",
            "junk_events",
            "top_level",
            "meta_fields",
            "deep_args",
            "duplicate_keys",
            "huge_name",
            "non_utf8",
            "nan_literal",
        ]
    )
    expect = REFUSE
    if how == "no_events":
        doc.pop("traceEvents", None)
        data = json.dumps(doc).encode()
    elif how == "events_not_list":
        doc["traceEvents"] = rng.choice([{}, "x", None, 5])
        data = json.dumps(doc).encode()
    elif how == "events_empty":
        doc["traceEvents"] = []
        data = json.dumps(doc).encode()
    elif how == "bare_array":
        data, expect = json.dumps(doc["traceEvents"]).encode(), EITHER  # the Chrome "JSON array" format
    elif how == "junk_events":
        doc["traceEvents"][rng.randrange(len(doc["traceEvents"]))] = rng.choice([1, "x", None, [], [1, 2]])
        data, expect = json.dumps(doc).encode(), EITHER
    elif how == "top_level":
        data = rng.choice([b"[]", b"{}", b"null", b'"trace"', b"1"])
    elif how == "meta_fields":
        key = rng.choice(
            [
                "schemaVersion",
                "deviceProperties",
                "distributedInfo",
                "displayTimeUnit",
                "baseTimeNanoseconds",
                "traceName",
                "record_shapes",
            ]
        )
        doc[key] = SENTINEL
        token, _ = nasty_json_token(rng)
        if key == "distributedInfo" and rng.random() < 0.6:
            token = rng.choice(
                [
                    '{"rank": -1}',
                    '{"rank": "x"}',
                    '{"rank": 1e300}',
                    '{"rank": 99999999999999999999}',
                    '{"world_size": 0, "rank": 3}',
                    '{"rank": null}',
                ]
            )
        data, expect = dumps_with_token(doc, [key], token), EITHER
    elif how == "deep_args":
        e = rng.choice(doc["traceEvents"])
        if isinstance(e, dict):
            e["args"] = SENTINEL
        depth = rng.choice([1000, 100_000])
        data, expect = (
            json.dumps(doc).encode().replace(json.dumps(SENTINEL).encode(), b"[" * depth + b"]" * depth, 1),
            EITHER,
        )
    elif how == "duplicate_keys":
        data, _ = duplicate_key(json.dumps(doc).encode(), rng)
        expect = EITHER
    elif how == "huge_name":
        e = rng.choice([e for e in doc["traceEvents"] if isinstance(e, dict)])
        e["name"] = "N" * ONE_MB
        data, expect = json.dumps(doc).encode(), EITHER
    elif how == "non_utf8":
        data, _ = splice(json.dumps(doc).encode(), rng, b"\xff\xfe")
    else:
        e = rng.choice([e for e in doc["traceEvents"] if isinstance(e, dict) and "dur" in e] or doc["traceEvents"])
        e["dur"] = float(rng.choice(["nan", "inf", "-inf"]))
        data, expect = json.dumps(doc).encode(), EITHER  # Python writes NaN / Infinity literals
    _write_kineto(ctx, data)
    if expect == REFUSE and _strictly_loadable_trace(ctx.input):
        expect = EITHER
    ctx.say(how.replace("_", " "), expect)


# --- Ascend JOB directories -------------------------------------------------------------------


def _job_file(ctx: Ctx, prefix: str) -> Path:
    return next(p for p in _files(ctx.input) if p.name.startswith(prefix))


HWTS_RECORD, TT_RECORD = 64, 20
#: Entry points that read an Ascend JOB directory: the importers and viewer, and (the reference
#: device's, inside a raw store) analyse.
ASCEND_ENTRIES = ("import-ascend", "view-foreign", "compare", "analyse")


@mutation("ascend_hwts", "Ascend", ["job", "refdev"], ASCEND_ENTRIES)
def _ascend_hwts(ctx: Ctx) -> None:
    rng = ctx.rng
    path = _job_file(ctx, "hwts.log.data")
    data = bytearray(path.read_bytes())
    how = rng.choice(
        [
            "record",
            "record",
            "record",
            "truncate",
            "cut_record",
            "bitflip",
            "zero_fill",
            "empty",
            "shuffle",
            "all_same",
            "syscnt_constant",
        ]
    )
    n = len(data) // HWTS_RECORD
    if how == "record":
        edits = []
        for _ in range(rng.randint(1, 20)):
            r = rng.randrange(n)
            fld = rng.choice(["type", "task_id", "stream", "syscnt", "syscnt_back", "pmu", "blank"])
            at = r * HWTS_RECORD
            if fld == "type":
                data[at] = rng.choice([2, 3, 4, 5, 7, 0x08, 0xFF, 0x0C])
            elif fld == "task_id":
                struct.pack_into("<H", data, at + 6, rng.choice([0, 1, 24999, 25000, 65535]))
            elif fld == "stream":
                struct.pack_into("<I", data, at + 16, rng.choice([0, 2**32 - 1, 2**31]))
            elif fld == "syscnt":
                struct.pack_into("<Q", data, at + 8, rng.choice([0, 1, 2**64 - 1, 2**63, 2**63 - 1]))
            elif fld == "syscnt_back":
                (cur,) = struct.unpack_from("<Q", data, at + 8)
                struct.pack_into("<Q", data, at + 8, max(0, cur - 10 ** rng.randint(3, 11)))
            elif fld == "pmu":
                data[at] = 4 | (data[at] & 0xF0)
                struct.pack_into("<Q", data, at + 24, rng.choice([0, 2**64 - 1]))
            else:
                data[at : at + HWTS_RECORD] = b" " * HWTS_RECORD
            edits.append(f"record {r} {fld}")
        out, detail = bytes(data), ", ".join(edits[:6]) + (" ..." if len(edits) > 6 else "")
    elif how == "cut_record":
        cut = rng.randrange(1, HWTS_RECORD)
        out, detail = bytes(data[: len(data) - cut]), f"last record cut by {cut} bytes"
    elif how == "empty":
        out, detail = b"", "emptied"
    elif how == "shuffle":
        records = [bytes(data[i : i + HWTS_RECORD]) for i in range(0, n * HWTS_RECORD, HWTS_RECORD)]
        rng.shuffle(records)
        out, detail = b"".join(records), "records shuffled (syscnt no longer monotonic)"
    elif how == "all_same":
        out, detail = bytes(data[:HWTS_RECORD]) * n, "every record the first one"
    elif how == "syscnt_constant":
        value = rng.choice([0, 123456789, 2**64 - 1])
        for r in range(n):
            struct.pack_into("<Q", data, r * HWTS_RECORD + 8, value)
        out, detail = bytes(data), f"the system counter never advances (every syscnt {value})"
    else:
        out, detail = BYTE_DAMAGE[how](bytes(data), rng)
    path.write_bytes(out)
    _device_damaged(ctx)
    ctx.say(f"{path.name}: {detail}", EITHER)


@mutation("ascend_training_trace", "Ascend", ["job", "refdev"], ASCEND_ENTRIES)
def _ascend_tt(ctx: Ctx) -> None:
    rng = ctx.rng
    path = _job_file(ctx, "training_trace")
    data = bytearray(path.read_bytes())
    n = len(data) // TT_RECORD
    how = rng.choice(
        [
            "record",
            "record",
            "record",
            "truncate",
            "cut_record",
            "bitflip",
            "zero_fill",
            "empty",
            "duplicate_steps",
            "reverse",
        ]
    )
    if how == "record":
        edits = []
        for _ in range(rng.randint(1, 20)):
            r = rng.randrange(n)
            at = r * TT_RECORD
            fld = rng.choice(["tag", "syscnt", "stream"])
            if fld == "tag":
                struct.pack_into("<Q", data, at, rng.choice([0, 1, 2, 3, 4, 254, 255, 256, 2**64 - 1, 10010]))
            elif fld == "syscnt":
                struct.pack_into("<Q", data, at + 12, rng.choice([0, 1, 2**64 - 1, 2**63, 10**9]))
            else:
                struct.pack_into("<H", data, at + 10, rng.choice([0, 65535]))
            edits.append(f"record {r} {fld}")
        out, detail = bytes(data), ", ".join(edits[:6]) + (" ..." if len(edits) > 6 else "")
    elif how == "cut_record":
        cut = rng.randrange(1, TT_RECORD)
        out, detail = bytes(data[: len(data) - cut]), f"last record cut by {cut} bytes"
    elif how == "empty":
        out, detail = b"", "emptied"
    elif how == "duplicate_steps":
        k = rng.randrange(n)
        out, detail = bytes(data[: k * TT_RECORD]) * 2 + bytes(data[k * TT_RECORD :]), "the first steps written twice"
    elif how == "reverse":
        records = [bytes(data[i : i + TT_RECORD]) for i in range(0, n * TT_RECORD, TT_RECORD)]
        out, detail = b"".join(reversed(records)), "records reversed"
    else:
        out, detail = BYTE_DAMAGE[how](bytes(data), rng)
    path.write_bytes(out)
    _device_damaged(ctx)
    ctx.say(f"{path.name}: {detail}", EITHER)


@mutation("ascend_text", "Ascend", ["job", "refdev"], ASCEND_ENTRIES)
def _ascend_text(ctx: Ctx) -> None:
    prefixes = [
        "Framework.host.vm.task_desc_info",
        "Framework.host.vm.graph_desc_info",
        "Framework.host.vm.point",
        "host_start.log",
    ]
    names = [p.name for p in _files(ctx.input)]
    prefix = ctx.rng.choice([p for p in prefixes if any(n.startswith(p) for n in names)])
    path = _job_file(ctx, prefix)
    out, detail = mutate_text_lines(path.read_bytes(), ctx.rng)
    path.write_bytes(out)
    _device_damaged(ctx)
    ctx.say(f"{path.name}: {detail}", EITHER)


#: Task ids, stream ids, block dims and point tags as a damaged or hostile Framework file may hold them.
ID_TOKENS = [
    "x",
    "",
    "-1",
    "-9223372036854775809",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "65535",
    "65536",
    "4294967296",
    "1e3",
    "1.5",
    "nan",
    "0x10",
    "1_000",
    "\u0663",
    "\u00b2",
    "+5",
    " 7",
]


@mutation("ascend_task_ids", "Ascend", ["job", "refdev"], ASCEND_ENTRIES)
def _ascend_task_ids(ctx: Ctx) -> None:
    """task_desc's task / stream ids and block dims, and point tags: non-numeric, negative, beyond int64."""
    rng = ctx.rng
    point = rng.random() < 0.25
    path = _job_file(ctx, "Framework.host.vm.point" if point else "Framework.host.vm.task_desc_info")
    lines = path.read_text().split("\n")
    rows = [i for i, line in enumerate(lines) if line.strip()]
    edits = []
    for i in rng.sample(rows, min(len(rows), rng.choice([1, 1, 3, len(rows)]))):
        fields = lines[i].split(" ")
        k = 0 if point else rng.choice([1, 2, 2, 2, 3, 3])
        token = rng.choice(ID_TOKENS).encode().decode("unicode_escape")
        if k < len(fields):
            fields[k] = token
            lines[i] = " ".join(fields)
            edits.append(f"line {i + 1} field {k} = {token!r}")
    path.write_bytes("\n".join(lines).encode("utf-8"))
    _device_damaged(ctx)
    ctx.say(f"{path.name}: " + ", ".join(edits[:5]) + (" ..." if len(edits) > 5 else ""), EITHER)


# --- the reference device's sidecar (clock-sync) file ------------------------------------------


def _device_damaged(ctx: Ctx) -> None:
    """A reference device's files were damaged: analyse the raw store afresh."""
    if ctx.kind == "refdev":
        _clear_outputs(ctx)


def _left_out_oracle(case: Case) -> Optional[str]:
    """After a clock-sync file no run can write, the device must be left out with a warning."""
    try:
        info = json.loads((case.work / "input" / "profiler_info_0.json").read_text())
    except (OSError, ValueError):
        return None  # the viewer's own checks judge a missing info
    warnings = info.get("warnings") if isinstance(info, dict) else None
    if any(isinstance(w, str) and "npu:0" in w and "not merged" in w for w in warnings or []):
        return None
    return "the damaged clock-sync file was accepted: no 'npu:0 ... not merged' warning in profiler_info_0.json"


#: Values of the clock-sync file's numbers that no reference device writes (left out with a warning),
#: and some it may (0, a float that equals the whole number).
CLOCK_BAD = [
    '"x"',
    "NaN",
    "Infinity",
    "-1",
    "1e30",
    str(10**30),
    str(2**63),
    "true",
    "null",
    "[]",
    "{}",
    "1.5",
    '"100000000"',
]
CLOCK_ODD = ["0", "1", str(2**62)]


@mutation("refdev_clock_sync", "reference device", ["refdev"], ("analyse",))
def _refdev_clock_sync(ctx: Ctx) -> None:
    rng = ctx.rng
    path = next(p for p in _files(ctx.input / "raw") if p.name.startswith("profview_clock_sync."))
    lines = path.read_bytes().split(b"\n")
    docs = [json.loads(line) if line.strip() else None for line in lines]
    pairs = [i for i, d in enumerate(docs) if isinstance(d, dict) and "host_monotonic_ns" in d]
    iterations = [i for i, d in enumerate(docs) if isinstance(d, dict) and "iteration" in d]
    how = rng.choice(
        [
            "hz",
            "pair",
            "pair",
            "host_step",
            "host_step",
            "non_utf8",
            "not_object",
            "torn",
            "no_pairs",
            "empty",
            "removed",
            "odd_values",
        ]
    )
    warned = True
    if how in ("hz", "pair", "host_step", "odd_values"):
        i = {
            "hz": 0,
            "pair": rng.choice(pairs),
            "odd_values": rng.choice(pairs),
            "host_step": rng.choice(iterations or [0]),
        }[how]
        key = {
            "hz": "syscnt_hz",
            "pair": rng.choice(["host_monotonic_ns", "syscnt"]),
            "odd_values": rng.choice(["host_monotonic_ns", "syscnt"]),
            "host_step": rng.choice(["host_step", "iteration"]),
        }[how]
        token = rng.choice(CLOCK_ODD if how == "odd_values" else CLOCK_BAD)
        docs[i][key] = SENTINEL
        lines[i] = dumps_with_token(docs[i], [key], token)
        detail = f"line {i + 1} {key} = {token}"
        warned = how != "odd_values"
    elif how == "non_utf8":
        i = rng.randrange(len(lines) - 1)
        lines[i] = lines[i][:5] + b"\xff\xfe" + lines[i][5:]
        detail = f"non-UTF-8 bytes on line {i + 1}"
    elif how == "not_object":
        i = rng.randrange(len(lines))
        lines.insert(i, rng.choice([b"[1, 2]", b"5", b'"x"', b"null"]))
        detail = f"a JSON line that is not an object at line {i + 1}"
    elif how == "torn":
        last = max(i for i, line in enumerate(lines) if line.strip())
        lines[last] = lines[last][: rng.randrange(1, len(lines[last]))]
        detail, warned = "the last line torn", False
    elif how == "no_pairs":
        lines = [line for i, line in enumerate(lines) if i not in pairs]
        detail = "every clock pair removed"
    elif how == "empty":
        lines = []
        detail = "emptied"
    else:
        path.unlink()
        detail = "removed"
    if how != "removed":
        path.write_bytes(b"\n".join(lines))
    _clear_outputs(ctx)
    if warned:
        ctx.check = _left_out_oracle
    ctx.say(f"{path.name}: {detail}", EITHER)


@mutation("ascend_layout", "Ascend", ["job"])
def _ascend_layout(ctx: Ctx) -> None:
    rng = ctx.rng
    job = ctx.input
    how = rng.choice(
        [
            "remove_needed",
            "only_unneeded",
            "extra_slice",
            "slice_names",
            "two_jobs_same_device",
            "nested_jobs",
            "data_is_file",
            "empty_slices",
            "device_mismatch",
            "done_files",
        ]
    )
    expect = EITHER
    if how == "remove_needed":
        prefix = rng.choice(
            [
                "hwts.log.data",
                "training_trace",
                "Framework.host.vm.task_desc_info",
                "Framework.host.vm.graph_desc_info",
                "Framework.host.vm.point",
            ]
        )
        _job_file(ctx, prefix).unlink()
        detail = f"{prefix}.* removed"
    elif how == "only_unneeded":
        for p in _files(job):
            if not p.name.startswith(("DATA_PREPROCESS", "host_start")):
                p.unlink()
        detail, expect = "only the AI CPU / TDT logs and host_start.log left", REFUSE
    elif how == "extra_slice":
        p = _job_file(ctx, rng.choice(["hwts.log.data", "training_trace", "Framework.host.vm.task_desc_info"]))
        shutil.copyfile(p, p.with_name(p.name[:-1] + rng.choice(["1", "2", "10"])))
        detail = f"{p.name} also stored as a later slice"
    elif how == "slice_names":
        p = _job_file(ctx, rng.choice(["hwts.log.data", "training_trace", "Framework.host.vm.point"]))
        new = p.name[: -len("slice_0")] + rng.choice(
            ["slice_x", "slice_-1", "slice_", "slice_99999999999999999999", "slice_٣", "slice_0.done", "slice_0 "]
        )
        p.rename(p.with_name(new))
        detail = f"{p.name} renamed {new!r}"
    elif how == "two_jobs_same_device":
        parent = ctx.work / "jobs"
        parent.mkdir()
        job.rename(parent / "JOB3")
        shutil.copytree(parent / "JOB3", parent / "JOB4")
        ctx.input = parent
        detail, expect = "a directory of JOB3 and a copy JOB4 (the same device twice)", REFUSE
    elif how == "nested_jobs":
        parent = ctx.work / "jobs"
        (parent / "JOBX").mkdir(parents=True)
        job.rename(parent / "JOBX" / "JOB3")
        ctx.input = parent
        detail, expect = "JOB3 two levels down (jobs/JOBX/JOB3)", REFUSE
    elif how == "data_is_file":
        shutil.rmtree(job / "data")
        (job / "data").write_text("x")
        detail = "data/ (with the training trace) replaced by a file"
    elif how == "empty_slices":
        for p in _files(job):
            p.write_bytes(b"")
        detail, expect = "every file emptied", REFUSE
    elif how == "device_mismatch":
        p = _job_file(ctx, rng.choice(["hwts.log.data", "training_trace", "Framework.host.vm.task_desc_info"]))
        p.rename(p.with_name(p.name.replace(".1.slice_0", ".2.slice_0")))
        detail = f"{p.name} claims device 2 (the others device 1)"
    else:
        for p in _files(job):
            shutil.copyfile(p, p.with_name(p.name + ".done"))
        detail = ".done copies of every file"
    ctx.say(detail, expect)


# --- MindSpore outputs ------------------------------------------------------------------------


@mutation("mindspore_cpu_files", "MindSpore", ["ms_cpu"])
def _ms_cpu(ctx: Ctx) -> None:
    rng = ctx.rng
    files = _files(ctx.input)
    path = rng.choice(files)
    data = path.read_bytes()
    if path.suffix == ".json":
        out, detail, _ = mutate_json_bytes(data, rng, strict_invalid_refuses=False)
        if rng.random() < 0.5:
            out, detail = _ms_trace_view_fields(data, rng)
    elif path.suffix == ".csv":
        out, detail, _ = mutate_profview_csv(data, path.name, rng)
    else:
        out, detail = mutate_text_lines(data, rng)
    path.write_bytes(out)
    ctx.say(f"{path.relative_to(ctx.input)}: {detail}", EITHER)


def _ms_trace_view_fields(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """trace_view.json's "ts" / "dur" are strings of µs: give one a nasty value."""
    doc = json.loads(data)
    i = rng.randrange(len(doc))
    key = rng.choice(["ts", "dur", "pid", "tid", "ph", "name", "args"])
    token = rng.choice(
        [
            '"-1"',
            '"1e400"',
            '"nan"',
            '"inf"',
            '"abc"',
            '""',
            '"1795245674352900.963.5"',
            "12.5",
            "null",
            '"' + "9" * 400 + '"',
            '"1,5"',
            "[]",
            '"-0"',
            '" 12"',
        ]
    )
    doc[i].setdefault(key, None)
    return dumps_with_token(doc, [i, key], token, compact=False), f"event {i} {key} = {token[:40]}"


@mutation("mindspore_cpu_layout", "MindSpore", ["ms_cpu"])
def _ms_cpu_layout(ctx: Ctx) -> None:
    rng = ctx.rng
    how = rng.choice(
        ["remove_file", "empty_framework", "output_is_file", "only_trace_view", "empty_files", "rank_names"]
    )
    expect = EITHER
    if how == "remove_file":
        p = rng.choice(_files(ctx.input))
        p.unlink()
        detail = f"{p.name} removed"
    elif how == "empty_framework":
        shutil.rmtree(ctx.input / "FRAMEWORK")
        (ctx.input / "FRAMEWORK").mkdir()
        detail = "FRAMEWORK/ emptied"
    elif how == "output_is_file":
        shutil.rmtree(ctx.input / "ASCEND_PROFILER_OUTPUT")
        (ctx.input / "ASCEND_PROFILER_OUTPUT").write_text("[]")
        detail = "ASCEND_PROFILER_OUTPUT is a file"
    elif how == "only_trace_view":
        shutil.rmtree(ctx.input / "FRAMEWORK")
        detail = "FRAMEWORK/ removed"
    elif how == "empty_files":
        for p in _files(ctx.input):
            p.write_bytes(b"")
        detail, expect = "every file emptied", REFUSE
    else:
        for p in _files(ctx.input / "FRAMEWORK"):
            p.rename(p.with_name(p.name.replace("_0.", rng.choice(["_x.", "_-1.", "_99999999999999999999.", "_."]))))
        detail = "FRAMEWORK files renamed to a strange rank"
    ctx.say(detail, expect)


@mutation("mindspore_gold_files", "MindSpore", ["ms_gold"])
def _ms_gold(ctx: Ctx) -> None:
    rng = ctx.rng
    path = rng.choice(_files(ctx.input))
    data = path.read_bytes()
    if path.suffix == ".json":
        out, detail, _ = mutate_json_bytes(data, rng, strict_invalid_refuses=False)
    elif path.suffix == ".csv":
        out, detail, _ = mutate_profview_csv(data, path.name, rng)
    else:
        out, detail = mutate_text_lines(data, rng)
    path.write_bytes(out)
    ctx.say(f"{path.name}: {detail}", EITHER)


@mutation("mindspore_gold_layout", "MindSpore", ["ms_gold"])
def _ms_gold_layout(ctx: Ctx) -> None:
    rng = ctx.rng
    how = rng.choice(["remove_file", "keep_one", "rename_device", "two_devices", "empty_files"])
    files = _files(ctx.input)
    expect = EITHER
    if how == "remove_file":
        p = rng.choice(files)
        p.unlink()
        detail = f"{p.name} removed"
    elif how == "keep_one":
        keep = rng.choice(files)
        for p in files:
            if p != keep:
                p.unlink()
        detail = f"only {keep.name} left"
    elif how == "rename_device":
        new = rng.choice(["x", "-1", "99999999999999999999", "01"])
        for p in files:
            p.rename(p.with_name(p.name.replace("_1", "_" + new)))
        detail = f"device id 1 -> {new!r} in every file name"
    elif how == "two_devices":
        for p in files:
            if "_1" in p.name:
                shutil.copyfile(p, p.with_name(p.name.replace("_1", "_2")))
        detail = "every file also as device 2"
    else:
        for p in files:
            p.write_bytes(b"")
        detail, expect = "every file emptied", REFUSE
    ctx.say(detail, expect)


# --- paths and special files ----------------------------------------------------------------

FILE_INPUT = ("kineto",)


@mutation(
    "path_special",
    "paths/special files",
    ["*"],
    ("view-html", "view-summary", "analyse", "import-kineto", "import-ascend", "compare", "view-foreign"),
)
def _path_special(ctx: Ctx) -> None:
    rng = ctx.rng
    name = ctx.input.name
    what = rng.choice(
        [
            "missing",
            "empty_dir",
            "file_for_dir",
            "dir_for_file",
            "fifo",
            "symlink_loop",
            "dangling_symlink",
            "too_long",
            "long_component",
            "dev_zero",
            "dev_null",
            "unreadable",
            "empty_file",
            "nul_file",
            "non_utf8_name",
            "symlink_to_seed",
            "dot_name",
        ]
    )
    holder = ctx.work / "special"
    holder.mkdir()
    target = holder / name
    expect = REFUSE
    if what == "missing":
        pass
    elif what == "empty_dir":
        target.mkdir()
    elif what == "file_for_dir":
        target.write_text("hello\n")
    elif what == "dir_for_file":
        target.mkdir()
        (target / "traceEvents.json").write_text("{}")
    elif what == "fifo":
        os.mkfifo(target)
    elif what == "symlink_loop":
        os.symlink(name, target)
    elif what == "dangling_symlink":
        os.symlink("no-such-thing", target)
    elif what == "too_long":
        target = holder / ("L" * 100_000)
    elif what == "long_component":
        target = holder / ("L" * 256)
    elif what == "dev_zero":
        os.symlink("/dev/zero", target)
    elif what == "dev_null":
        os.symlink("/dev/null", target)
    elif what == "unreadable":
        if ctx.seeds.privileged:
            ctx.skip = "chmod 000 does not deny reads here (running privileged)"
        shutil.move(str(ctx.input), str(target))
        target.chmod(0)
    elif what == "empty_file":
        target.write_bytes(b"")
    elif what == "nul_file":
        target.write_bytes(b"\x00" * 4096)
    elif what == "non_utf8_name":
        target = holder / os.fsdecode(b"run-\xff\xfe-" + os.fsencode(name))
        shutil.move(str(ctx.input), str(target))
        expect = EITHER  # a valid input under an odd name
    elif what == "symlink_to_seed":
        os.symlink(ctx.input, target)
        expect = EITHER
    else:
        target = holder / "..." / name
        target.parent.mkdir()
        shutil.move(str(ctx.input), str(target))
        expect = EITHER
    ctx.input = target
    ctx.say(f"input is {what.replace('_', ' ')}", expect)


@mutation(
    "output_path",
    "paths/special files",
    ["*"],
    ("view-html", "view-foreign", "import-kineto", "import-ascend", "compare"),
)
def _output_path(ctx: Ctx) -> None:
    rng = ctx.rng
    # (Not a FIFO: writing a report into a named pipe nobody reads blocks, as the user asked.)
    what = rng.choice(
        ["missing_parent", "is_dir", "is_file", "dev_full", "under_file", "non_utf8", "too_long", "is_symlink_loop"]
    )
    expect = REFUSE
    if what == "missing_parent":
        ctx.output = ctx.work / "no" / "such" / "dir" / "out"
        expect = EITHER  # creating the parents is fine too
    elif what == "is_dir":
        ctx.output = ctx.work / "a_dir"
        ctx.output.mkdir()
        (ctx.output / "keep").write_text("x")
        if ctx.entry.startswith("import-"):
            expect = EITHER  # import -o names a directory: an existing one is fine
    elif what == "dev_full":
        ctx.output = Path("/dev/full")
    elif what == "under_file":
        (ctx.work / "a_file").write_text("x")
        ctx.output = ctx.work / "a_file" / "out"
    elif what == "is_file":
        ctx.output = ctx.work / "a_file"
        ctx.output.write_text("x")
        if not ctx.entry.startswith("import-"):
            expect = EITHER  # -o report.html over an existing file: overwriting is fine
    elif what == "non_utf8":
        ctx.output = ctx.work / os.fsdecode(b"out-\xff\xfe")
        expect = EITHER
    elif what == "too_long":
        ctx.output = ctx.work / ("L" * 300)
    else:
        ctx.output = ctx.work / "loop_out"
        os.symlink("loop_out", ctx.output)
    ctx.say(f"output path {what.replace('_', ' ')}", expect)


# --- CLI arguments --------------------------------------------------------------------------


@mutation("cli_port_host", "CLI args", ["profview"], ("serve",))
def _port_host(ctx: Ctx) -> None:
    rng = ctx.rng
    port = rng.choice(
        [
            "-1",
            "65536",
            "70000",
            "2147483648",
            "18446744073709551616",
            "-9223372036854775808",
            "99999999999999999999",
            "1e3",
            "0x50",
            "",
        ]
    )
    host = rng.choice([None, None, "256.256.256.256", "no-such-host.invalid", "::::", "h" * 300, "1.2.3"])
    if host is not None and rng.random() < 0.5:
        port = rng.choice(["65536", "-1", "99999999999999999999"])
    ctx.args += ["--port", port] + (["--host", host] if host is not None else [])
    ctx.say(f"--port {port!r}" + (f" --host {host[:40]!r}" if host is not None else ""), REFUSE)


@mutation("cli_view_args", "CLI args", ["profview"], ("view-html", "view-summary"))
def _view_args(ctx: Ctx) -> None:
    rng = ctx.rng
    which = rng.choice(["steps", "steps", "rank", "compare"])
    if which == "steps":
        value = rng.choice(
            [
                "5:3",
                "a:b",
                "1e3",
                "-5:-1",
                "99999999999999999999:",
                ":",
                "0:0",
                "100:200",
                "3:",
                ":-1",
                "--1",
                "1:2:3",
                "٣:٥",
                " 1 : 2 ",
            ]
        )
        ctx.args += ["--steps", value]
        refuse = value in ("5:3", "a:b", "1e3", "1:2:3", "--1")
        ctx.say(f"--steps {value!r}", REFUSE if refuse else EITHER)
    elif which == "rank":
        value = rng.choice(["-1", "1", "999", "99999999999999999999", "x", "1.5", "٣"])
        ctx.args += ["--rank", value]
        ctx.say(f"--rank {value!r} (the seed has rank 0 only)", REFUSE)
    else:
        other = rng.choice(["missing", "file", "empty_dir"])
        path = ctx.work / f"other-{other}"
        if other == "file":
            path.write_text("x")
        elif other == "empty_dir":
            path.mkdir()
        ctx.args += ["--compare", path]
        ctx.say(f"--compare with a {other.replace('_', ' ')}", REFUSE)


@mutation("cli_thresholds", "CLI args", ["profview"], ("analyse",))
def _thresholds(ctx: Ctx) -> None:
    value = ctx.rng.choice(
        [
            "input_gap_pct=nan",
            "input_gap_pct=inf",
            "input_gap_pct=-1",
            "input_gap_pct=1e400",
            "warmup_steps=1.5",
            "warmup_steps=99999999999999999999",
            "warmup_steps=-3",
            "nosuch=1",
            "=1",
            "input_gap_pct=",
            "input_gap_pct",
            "severity_high_pct=0",
            "tail_pct=100000",
            "outlier_min_pct=-inf",
            "warmup_steps=1e3",
        ]
    )
    ctx.args += ["--threshold", value]
    refuse = any(s in value for s in ("nan", "inf", "=-", "1e400", "nosuch", "=1.5")) or value in (
        "=1",
        "input_gap_pct=",
        "input_gap_pct",
    )
    ctx.say(f"--threshold {value!r}", REFUSE if refuse else EITHER)


@mutation("cli_compare_args", "CLI args", ["profview"], ("compare",))
def _compare_args(ctx: Ctx) -> None:
    rng = ctx.rng
    which = rng.choice(["gate", "gate", "json", "rank"])
    if which == "gate":
        value = rng.choice(["nan", "inf", "-5%", "1e400", "%", "5%%", "0x5", "", "nan%", "-inf%", "1e308%", "5 %"])
        ctx.args += ["--fail-if-slower", value]
        refuse = value in ("nan", "1e400", "%", "5%%", "0x5", "", "nan%", "-inf%", "inf")
        ctx.say(f"--fail-if-slower {value!r}", REFUSE if refuse else EITHER)
    elif which == "json":
        target = rng.choice(["dir", "dev_full", "missing_parent"])
        path = {"dir": ctx.work, "dev_full": Path("/dev/full"), "missing_parent": ctx.work / "no" / "x.json"}[target]
        ctx.args += ["--json", path]
        ctx.say(f"--json to {target.replace('_', ' ')}", REFUSE)
    else:
        value = rng.choice(["-1", "3", "99999999999999999999"])
        ctx.args += ["--rank", value]
        ctx.say(f"--rank {value}", REFUSE)


@mutation("cli_format", "CLI args", ["job"], ("import-ascend",))
def _format(ctx: Ctx) -> None:
    value = ctx.rng.choice(["xml", "", "PROFVIEW", "both,mindspore", "profview "])
    ctx.args += ["--format", value]
    ctx.say(f"--format {value!r}", REFUSE)


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    name: str
    kinds: tuple[str, ...]  # seed kinds it opens
    build: Callable[[Ctx], tuple[list[list[Arg]], Optional[Path]]]  # -> commands, the output to expect


def _out(ctx: Ctx, default: str) -> Path:
    return ctx.output if ctx.output is not None else ctx.work / default


def _view_html(ctx: Ctx):
    out = _out(ctx, "report.html")
    return [[ctx.input, "-o", out, *ctx.args]], out


def _view_summary(ctx: Ctx):
    return [[ctx.input, "--summary", *ctx.args]], None


def _analyse(ctx: Ctx):
    # Re-analyse, then read what the analysis wrote: damage in the store must not turn into
    # output the viewer chokes on, nor into numbers that break the output contract.
    ctx.check = _both(_contract_oracle(ctx.input), ctx.check)
    return [["analyse", ctx.input, *ctx.args], [ctx.input, "--summary"]], None


def _import_kineto(ctx: Ctx):
    out = _out(ctx, "imported")
    ctx.check = ctx.check or _contract_oracle(out)
    return [["import-kineto", ctx.input, "-o", out, *ctx.args]], out


def _import_ascend(ctx: Ctx):
    fmt = (
        []
        if any(str(a) == "--format" for a in ctx.args)
        else ["--format", ctx.rng.choice(["profview", "mindspore", "both"])]
    )
    out = _out(ctx, "imported")
    ctx.check = ctx.check or _contract_oracle(out)
    return [["import-ascend", ctx.input, "-o", out, *fmt, *ctx.args]], out


def _compare(ctx: Ctx):
    """The damaged input on one side, a valid profview run on the other."""
    other = ctx.work / "valid_other"
    if not other.exists():
        _copy_writable(ctx.seeds.profview, other)
    pair = [ctx.input, other] if ctx.rng.random() < 0.5 else [other, ctx.input]
    extra = list(ctx.args)
    out = None
    if ctx.output is not None:
        extra += ["-o", ctx.output]
        out = ctx.output
    elif ctx.rng.random() < 0.3:
        extra += ["--json", "-"]
    return [["compare", *pair, *extra]], out


def _view_foreign(ctx: Ctx):
    out = _out(ctx, "report.html")
    return [[ctx.input, "-o", out, *ctx.args]], out


def _watch(ctx: Ctx):
    """Follow the damaged store as `profview watch` does; a stopped recording must end the watch, and a
    store with no readable recording is waited for until --timeout, then refused in one sentence."""
    return [["watch", ctx.input, "--plain", "--interval", "0.2", "--timeout", "10"]], None


def _serve(ctx: Ctx):
    return [[ctx.input, "--no-browser", *ctx.args]], None


ENTRY_POINTS: dict[str, Entry] = {
    "view-html": Entry("view-html", ("profview", "cluster"), _view_html),
    "view-summary": Entry("view-summary", ("profview", "cluster"), _view_summary),
    "analyse": Entry("analyse", ("profview", "refdev"), _analyse),
    "import-kineto": Entry("import-kineto", ("kineto",), _import_kineto),
    "import-ascend": Entry("import-ascend", ("job",), _import_ascend),
    "compare": Entry("compare", ("profview", "cluster", "kineto", "job", "ms_cpu", "ms_gold"), _compare),
    "view-foreign": Entry("view-foreign", ("kineto", "job", "ms_cpu", "ms_gold"), _view_foreign),
    "serve": Entry("serve", ("profview",), _serve),
    "watch": Entry("watch", ("profview",), _watch),
}


def mutations_for(entry: str, family: Optional[str] = None) -> list[str]:
    """The mutations that apply to an entry point (optionally: of one family), in a stable order."""
    kinds = ENTRY_POINTS[entry].kinds
    out = []
    for name, m in MUTATIONS.items():
        if m.entries is not None and entry not in m.entries:
            continue
        if "*" not in m.kinds and not set(m.kinds) & set(kinds):
            continue
        if family is not None and m.family != family:
            continue
        out.append(name)
    return out


def families_for(entry: str) -> list[str]:
    seen: list[str] = []
    for name in mutations_for(entry):
        fam = MUTATIONS[name].family
        if fam not in seen:
            seen.append(fam)
    return seen


def make_case(entry: str, mutation_name: str, seed: int, seeds: Seeds, work: Path) -> Case:
    """Copy the right seed into `work`, damage it, and say how to run it. Deterministic in `seed`."""
    rng = random.Random(f"{entry}/{mutation_name}/{seed}")
    m = MUTATIONS[mutation_name]
    e = ENTRY_POINTS[entry]
    kinds = [k for k in e.kinds if "*" in m.kinds or k in m.kinds]
    kind = rng.choice(kinds)
    work.mkdir(parents=True, exist_ok=True)
    if kind == "kineto":
        names = (
            KINETO_JSON_SEEDS
            if mutation_name in ("kineto_event_fields", "kineto_steps", "kineto_structure")
            else sorted(seeds.kineto)
        )
        trace = seeds.kineto[rng.choice(names)]
        target = work / "input" / trace.name
    else:
        trace = seeds.kinds()[kind]
        target = work / "input" / trace.name if kind in ("job", "ms_gold", "ms_cpu") else work / "input"
    _copy_writable(trace, target)
    ctx = Ctx(rng=rng, work=work, seeds=seeds, entry=entry, kind=kind, input=target)
    m.apply(ctx)
    commands, output = e.build(ctx)
    return Case(
        entry=entry,
        mutation=mutation_name,
        family=m.family,
        seed=seed,
        kind=kind,
        detail=ctx.detail,
        expect=ctx.expect,
        work=work,
        commands=commands,
        output=output,
        skip=ctx.skip,
        check=ctx.check,
    )


# --------------------------------------------------------------------------------------------
# Running and judging
# --------------------------------------------------------------------------------------------

#: Runs `viewer.cli` like the `profview` script does, under an address-space cap.
LAUNCHER = (
    "import resource, runpy, sys\n"
    "limit = int(sys.argv.pop(1))\n"
    "if limit: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "sys.argv[0] = 'profview'\n"
    "runpy.run_module('viewer.cli', run_name='__main__', alter_sys=True)\n"
)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env["BROWSER"] = "true"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@dataclass
class RunResult:
    argv: list[Arg]
    returncode: Optional[int]  # None: killed after the timeout
    stdout: str
    stderr: str
    seconds: float


def run_profview(
    args: Sequence[Arg],
    timeout: float = DEFAULT_TIMEOUT_S,
    cwd: Optional[Path] = None,
    memory_limit: int = MEMORY_LIMIT_BYTES,
) -> RunResult:
    """One `profview ARGS` in a subprocess of this checkout (own session, killed whole on timeout)."""
    argv = [sys.executable, "-c", LAUNCHER, str(memory_limit), *[os.fspath(a) for a in args]]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=str(cwd or REPO),
        env=_child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        code: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        code = None
    return RunResult(
        list(args), code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - started
    )


@dataclass
class Verdict:
    kind: str
    signature: str = ""  # failures: what makes two failures the same bug
    message: str = ""  # the error sentence, or the traceback's last lines
    command: int = 0  # which of the case's commands it is about
    results: list[RunResult] = field(default_factory=list, repr=False)

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
ERROR_LINE = re.compile(r"^profview(?: [\w-]+)?: error: (?P<msg>.*\S)\s*$")
WARNING_LINE = re.compile(r"^profview: warning: ")


def traceback_signature(stderr: str) -> tuple[str, str, list[str]]:
    """(exception type, innermost project frame 'path:function', the traceback's last lines) of the
    last traceback in `stderr`."""
    lines = stderr.splitlines()
    start = max(i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback (most recent call last)"))
    block = [line[len(line) - len(line.lstrip()) :] if k == 0 else line for k, line in enumerate(lines[start:])]
    frames = [FRAME.match(line) for line in block]
    project = None
    for m in frames:
        if m is None:
            continue
        try:
            rel = Path(m.group("file")).resolve().relative_to(REPO)
        except (ValueError, OSError):
            continue
        if rel.parts and rel.parts[0] in ("profiler", "viewer"):
            project = f"{rel.as_posix()}:{m.group('func')}"
    exc_type = "?"
    last_frame = max((k for k, m in enumerate(frames) if m), default=0)
    for line in block[last_frame + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            exc_type = re.split(r"[:\s]", line, maxsplit=1)[0]
            break
    tail = [line for line in block if line.strip()][-6:]
    return exc_type, project or "(no project frame)", tail


def classify(case: Case, results: list[RunResult]) -> Verdict:
    """Judge a case's runs by the product's rule (module docstring)."""
    for n, r in enumerate(results):
        last = n == len(results) - 1
        if r.returncode is None and case.entry == "watch" and _watch_waiting(r.stdout):
            # `profview watch` on a directory with no readable recording yet waits for one to start,
            # as documented (docs/live.md); that is not a hang.
            return Verdict(ACCEPTED, message="waits for a recording to start", command=n, results=results)
        if r.returncode is None:
            return Verdict(
                HANG,
                f"hang in {case.entry} ({case.family}/{case.mutation})",
                f"no answer after {r.seconds:.0f} s",
                n,
                results,
            )
        if "Traceback (most recent call last)" in r.stderr:
            exc, frame, tail = traceback_signature(r.stderr)
            return Verdict(TRACEBACK, f"{exc} @ {frame}", "\n".join(tail), n, results)
        if r.returncode < 0 or "Fatal Python error" in r.stderr:
            name = signal.Signals(-r.returncode).name if r.returncode < 0 else "fatal error"
            return Verdict(SIGNAL, f"{name} in {case.entry}", r.stderr.strip()[-800:], n, results)
        if r.returncode != 0:
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            errors = [ERROR_LINE.match(line) for line in lines]
            errors = [m for m in errors if m]
            others = [line for line in lines if not ERROR_LINE.match(line) and not WARNING_LINE.match(line)]
            if r.returncode == 2:  # argparse: a usage block before its one error line
                others = [line for line in others if not line.startswith(("usage: ", " ", "\t"))]
            if r.returncode not in (1, 2) or len(errors) != 1 or others:
                why = f"exit {r.returncode}, {len(errors)} error line(s)" + (
                    f", other output: {others[0][:120]!r}" if others else ""
                )
                return Verdict(
                    MESSY,
                    f"messy refusal in {case.entry}: {why.split(',')[0]}",
                    why + "\n" + r.stderr.strip()[-800:],
                    n,
                    results,
                )
            return Verdict(REFUSED, message=errors[0].group("msg"), command=n, results=results)
        if not last:
            continue
        if case.expect == REFUSE:
            return Verdict(
                ACCEPTED_INVALID,
                f"accepted invalid input: {case.family}/{case.mutation}",
                f"exit 0 on: {case.detail}",
                n,
                results,
            )
        if case.output is not None and n == 0 and not _output_present(case.output):
            return Verdict(NO_OUTPUT, f"exit 0 without output: {case.entry}", f"{case.output} missing", n, results)
        if case.check is not None:
            problem = case.check(case)
            if problem:
                rule = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", problem.split(":", 1)[-1].split("(")[0]).strip()
                file_kind = re.sub(r"_\d+\.csv.*", "", problem.split(":", 1)[0])
                return Verdict(WRONG_NUMBER, f"wrong numbers in {file_kind}: {rule[:80]}", problem, n, results)
        return Verdict(ACCEPTED, command=n, results=results)
    return Verdict(ACCEPTED, results=results)


def _watch_waiting(stdout: str) -> bool:
    """Whether `profview watch --plain`'s last status line says it is waiting for a recording."""
    status = [line for line in stdout.splitlines() if line.startswith("profview-watch ")]
    return bool(status) and " status=waiting" in f" {status[-1]}"


def _output_present(path: Path) -> bool:
    if str(path) == "/dev/full":
        return True
    if path.is_dir():
        return any(path.iterdir())
    return path.is_file() and path.stat().st_size > 0


def run_case(case: Case, timeout: float = DEFAULT_TIMEOUT_S) -> Verdict:
    if case.skip:
        return Verdict(SKIPPED, message=case.skip)
    results = []
    if case.entry == "watch":  # it waits for a recording that never starts: no need for the full minute
        timeout = min(timeout, WATCH_TIMEOUT_S)
    for argv in case.commands:
        r = run_profview(argv, timeout=timeout, cwd=case.work)
        results.append(r)
        if r.returncode != 0:
            break
    return classify(case, results)


def report(case: Case, verdict: Verdict) -> str:
    """A failure, as the test prints it: entry point, mutation, and the traceback's last lines."""
    r = verdict.results[verdict.command] if verdict.results else None
    lines = [f"{verdict.kind.upper()}: {verdict.signature}", case.describe()]
    if r is not None:
        lines.append(f"  command {verdict.command + 1} exit {r.returncode} after {r.seconds:.1f} s")
    lines += ["  | " + line for line in verdict.message.splitlines()[-12:]]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Keeping failing inputs
# --------------------------------------------------------------------------------------------


def copy_case_tree(src: Path, dst: Path) -> None:
    """Copy a case directory without opening special files: FIFOs are re-made, symlinks kept
    as links, unreadable files copied with their mode restored afterwards."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(src):
        s, d = Path(entry.path), dst / entry.name
        st = os.lstat(s)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
        elif stat.S_ISDIR(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)
            os.chmod(s, mode | 0o700)
            copy_case_tree(s, d)
            os.chmod(s, mode)
            os.chmod(d, mode)
        elif stat.S_ISFIFO(st.st_mode):
            os.mkfifo(d)
        elif stat.S_ISREG(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)
            os.chmod(s, mode | 0o600)
            shutil.copyfile(s, d)
            os.chmod(s, mode)
            os.chmod(d, mode)


def save_case(case: Case, verdict: Verdict, dest: Path) -> Path:
    """Keep a failing case for reproduction: its whole directory, `repro.sh`, `case.json`, `stderr.txt`."""
    dest.mkdir(parents=True, exist_ok=True)
    copy_case_tree(case.work, dest / "case")
    lines = [
        "#!/bin/sh",
        "# " + case.describe().splitlines()[0].replace("\n", " "),
        'cd "$(dirname "$0")/case" || exit 1',
        f'REPO="${{PROFVIEW_REPO:-{REPO}}}"',
        f'PY="${{PROFVIEW_PYTHON:-{sys.executable}}}"',
        f"ulimit -v {MEMORY_LIMIT_BYTES // 1024}   # the campaign's address-space cap (an input may be /dev/zero)",
    ]
    for argv in case.commands:
        args = " ".join(
            shlex.quote(os.fsdecode(a) if not isinstance(a, str) else a).replace(str(case.work), ".")
            if len(os.fspath(a)) < 1000
            else f'"$(python3 -c \'print("L"*{len(os.fspath(a)) - 20})\')"'
            for a in argv
        )
        lines.append(f'PYTHONPATH="$REPO" "$PY" -m viewer.cli {args} || exit $?')
    (dest / "repro.sh").write_text("\n".join(lines) + "\n", errors="surrogateescape")
    (dest / "repro.sh").chmod(0o755)
    r = verdict.results[verdict.command] if verdict.results else None
    (dest / "stderr.txt").write_text(r.stderr if r else "", errors="surrogateescape")
    (dest / "case.json").write_text(
        json.dumps(
            {
                "entry": case.entry,
                "mutation": case.mutation,
                "family": case.family,
                "seed": case.seed,
                "input_kind": case.kind,
                "detail": case.detail[:2000],
                "expect": case.expect,
                "verdict": verdict.kind,
                "signature": verdict.signature,
                "message": verdict.message[-3000:],
                "commands": [[_short(a, case.work) for a in c] for c in case.commands],
            },
            indent=2,
        )
    )
    return dest


def remove_tree(path: Path) -> None:
    """Delete a case directory, whatever its modes."""
    if not path.exists() and not path.is_symlink():
        return
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)
