"""Which container and layout for the columnar event file: size, write and load time of the same 1e7 events.

    python benchmarks/bench_event_format.py [--events 1e7] [--dir DIR] [--baseline TREE [--analyse-events 2e7]]

Candidates: Apache Arrow IPC (uncompressed, LZ4, ZSTD), Parquet (snappy), numpy .npz (stored,
deflated), all with the version-1 columns (every row its phase, lane, name, category and args), and
"arrow-heads": uncompressed Arrow IPC in the version-2 layout (start, duration, step and head per
row, the distinct heads in the schema metadata). "load" = every field as a numpy array in a fresh
process (cold page cache is not forced: the file was just written, as it is when the viewer opens a
fresh analysis); for arrow-heads that includes gathering the five head fields by the rows' head, as
`EventFile.column` does. Each candidate is measured three times; min-max printed.

With `--baseline TREE` (another checkout, its C extensions built, e.g. of the previous event-file
version: `git archive REF | tar -x -C TREE; cd TREE; python setup.py build_ext --inplace`): one
recording of `--analyse-events` events (two per span: 2e7 give 1e7 rows) analysed by this checkout
and by TREE, alternating, each in a fresh process, three times: the event file's write inside
analyse() (write_run_events, the timeline grouped and written, timed around the call; write_event_file
in trees before it), analyse() itself, the file's bytes per row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_core import RECORD_CHILD  # noqa: E402  (benchmarks/ is the script's own folder)

from profiler.formats.columns import EVENT_HEAD_FIELDS  # noqa: E402

LOAD = r"""
import json, re, sys, time
t0 = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
import numpy as np
if kind.startswith("arrow"):
    import pyarrow as pa
    src = pa.memory_map(path)
    reader = pa.ipc.open_file(src)
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]   # zero-copy when uncompressed
    cols = {n: [b.column(j).to_numpy() for b in batches] for j, n in enumerate(reader.schema.names)}
    if kind == "arrow-heads":       # the head fields, gathered by the rows' head as EventFile.column does
        heads = json.loads(reader.schema.metadata[b"profview"])["heads"]
        for n, dtype in json.loads(sys.argv[3]).items():
            field = np.asarray(heads[n], dtype=dtype)
            cols[n] = [field[h] for h in cols["head"]]
    total = sum(int(c[-1][-1]) + int(np.sum(c[0][:1000])) for c in cols.values())
elif kind == "parquet":
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    cols = {n: table.column(n).to_numpy() for n in table.column_names}
    total = sum(int(c[-1]) for c in cols.values())
else:
    with np.load(path) as z:
        cols = {n: z[n] for n in z.files}
    total = sum(int(c[-1]) for c in cols.values())
# this process's peak RSS (ru_maxrss would count the parent's: Linux keeps it across fork and exec)
print(time.perf_counter() - t0, int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read())[1]) / 1024)
"""


def columns(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    start = np.cumsum(rng.integers(50, 400, n)).astype(np.int64)
    return {
        "ph": np.full(n, ord("X"), np.uint8),
        "lane": (np.arange(n) % 5).astype(np.uint16),
        "start_ns": start,
        "dur_ns": rng.integers(100, 300, n).astype(np.int64),
        "name": rng.integers(0, 40, n).astype(np.int32),
        "category": rng.integers(0, 4, n).astype(np.uint16),
        "step": (np.arange(n) // 50_000).astype(np.int32),
        "args": np.full(n, -1, np.int32),
    }


def head_coded(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """The version-2 layout of version-1 columns: start, duration, step and head per row; the distinct heads."""
    fields = [name for name, _ in EVENT_HEAD_FIELDS]
    key = np.zeros(len(cols["start_ns"]), np.int64)
    for name in fields:  # one number per head (mixed radix; the generator's codes are small)
        values = cols[name].astype(np.int64) + 1
        key = key * (int(values.max()) + 1) + values
    distinct, first, head = np.unique(key, return_index=True, return_inverse=True)
    rows = {"start_ns": cols["start_ns"], "dur_ns": cols["dur_ns"], "step": cols["step"], "head": head.astype(np.int32)}
    return rows, {name: cols[name][first].tolist() for name in fields}


def write(kind: str, cols: dict | tuple, path: Path) -> float:
    """Seconds to write `cols` (for arrow-heads: head_coded's rows and heads) as `kind` at `path`."""
    t0 = time.perf_counter()
    if kind.startswith("arrow"):
        import pyarrow as pa

        comp = {"arrow": None, "arrow-heads": None, "arrow-lz4": "lz4", "arrow-zstd": "zstd"}[kind]
        table = (
            pa.table(cols[0]).replace_schema_metadata({"profview": json.dumps({"heads": cols[1]})})
            if kind == "arrow-heads"
            else pa.table(cols)
        )
        with pa.OSFile(str(path), "wb") as sink:
            with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=comp)) as w:
                w.write_table(table, max_chunksize=1 << 20)
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(cols), str(path))
    elif kind == "npz":
        np.savez(path, **cols)
    else:
        np.savez_compressed(path, **cols)
    return time.perf_counter() - t0


ANALYSE = r"""
import json, sys, time
import profiler.export.writers.events as writer
from profiler.export.event_file import read_event_file
from profiler.postprocess.recording import analyse_directory
name = "write_run_events" if hasattr(writer, "write_run_events") else "write_event_file"  # older trees
write, spent = getattr(writer, name), []
def timed(*args):
    t = time.perf_counter()
    try:
        return write(*args)
    finally:
        spent.append(time.perf_counter() - t)
setattr(writer, name, timed)
t = time.perf_counter()
paths = analyse_directory(sys.argv[1], progress=False)
seconds = time.perf_counter() - t
path = [p for p in paths if p.name.startswith("events_")][0]
f = read_event_file(path)
print(json.dumps({"analyse_s": seconds, "write_s": spent[0], "bytes": path.stat().st_size, "rows": f.rows,
                  "version": f.meta["version"]}))
"""

#: bench_core's recording loop (steps of 1000 spans), printing an empty JSON line for `in_tree`
RECORD = RECORD_CHILD + 'print("{}")\n'


def in_tree(tree: Path, code: str, *args: str) -> dict:
    """Run `code` in a fresh process importing profview from `tree`; its last line of output, as JSON."""
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=str(tree),
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if r.returncode != 0:
        raise SystemExit(f"failed in {tree}: {r.stderr.strip().splitlines()[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    return fmt.format(min(values)) + "-" + fmt.format(max(values))


def bench_analyse(base: Path, events: float, baseline: Path) -> None:
    """The event file written inside analyse(): this checkout against `baseline`, on one recording, alternating."""
    print(
        f"== analyse() of one recording of {events:.0e} events, this checkout and {baseline}, alternating, "
        f"fresh processes; load average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    recording = base / "recording"
    in_tree(ROOT, RECORD, str(recording), str(events))
    trees = {"this checkout": ROOT, f"baseline {baseline}": baseline}
    copies = {name: shutil.copytree(recording, base / f"analysed-{i}") for i, name in enumerate(trees)}
    shutil.rmtree(recording)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(3):
        for name, tree in trees.items():
            runs[name].append(in_tree(tree, ANALYSE, str(copies[name])))
    for name, rs in runs.items():
        r = rs[0]
        print(
            f"  {name}: event file version {r['version']}, {r['rows']:,} rows, {r['bytes'] / 1e6:.0f} MB, "
            f"{r['bytes'] / r['rows']:.1f} B/row; its write inside analyse() {span([x['write_s'] for x in rs])} s; "
            f"analyse() {span([x['analyse_s'] for x in rs])} s",
            flush=True,
        )
    print(f"  load average now {os.getloadavg()[0]:.1f}")
    for copy in copies.values():
        shutil.rmtree(copy)


def bench_containers(base: Path, n: int) -> None:
    """Every candidate container on the same `n` synthetic events."""
    cols = columns(n)
    coded = head_coded(cols)
    dtypes = json.dumps(dict(EVENT_HEAD_FIELDS))
    print(
        f"{n:,} events, {sum(c.nbytes for c in cols.values()) / n:.0f} B/event in memory, {len(coded[1]['ph'])} "
        f"distinct heads; load average {os.getloadavg()[0]:.1f} at start"
    )
    print(f"{'format':12} {'size MB':>8} {'B/event':>8} {'write s':>14} {'load s':>14} {'load RSS MB':>12}")
    for kind in ("arrow", "arrow-heads", "arrow-lz4", "arrow-zstd", "parquet", "npz", "npz-deflate"):
        path = base / f"events.{kind}"
        data = coded if kind == "arrow-heads" else cols
        writes = [write(kind, data, path) for _ in range(2 if kind != "npz-deflate" else 1)]
        loads = []
        for _ in range(3):
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    LOAD,
                    kind,
                    str(
                        path
                        if kind.startswith(("arrow", "parquet"))
                        else str(path) + ("" if str(path).endswith(".npz") else ".npz")
                    ),
                    dtypes,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            loads.append((float(out[0]), float(out[1])))
        p = path if path.exists() else Path(str(path) + ".npz")
        size = p.stat().st_size
        print(
            f"{kind:12} {size / 1e6:8.0f} {size / n:8.1f} {min(writes):6.2f}-{max(writes):<6.2f} "
            f"{min(t for t, _ in loads):6.2f}-{max(t for t, _ in loads):<6.2f} {max(rss for _, rss in loads):12.0f}",
            flush=True,
        )
        p.unlink()
    print(f"load average now {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", default="1e7")
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--baseline", type=Path, help="another checkout whose analyse() writes the event file too")
    ap.add_argument("--analyse-events", default="2e7", help="with --baseline: events recorded (two per span)")
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="pv-fmt-"))
    base.mkdir(parents=True, exist_ok=True)
    bench_containers(base, int(float(args.events)))
    if args.baseline:
        bench_analyse(base, float(args.analyse_events), args.baseline.resolve())


if __name__ == "__main__":
    main()
