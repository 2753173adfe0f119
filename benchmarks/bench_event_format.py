"""Which container for the columnar event file: size, write and load time of the same 1e7 events.

    python benchmarks/bench_event_format.py [--events 1e7] [--dir DIR]

Candidates: Apache Arrow IPC (uncompressed, LZ4, ZSTD), Parquet (snappy), numpy .npz (stored,
deflated). "load" = every column as a numpy array in a fresh process (cold page cache is not
forced: the file was just written, as it is when the viewer opens a fresh analysis). Each
candidate is measured three times; min-max printed.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LOAD = r"""
import sys, time, resource
t0 = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
import numpy as np
if kind.startswith("arrow"):
    import pyarrow as pa
    src = pa.memory_map(path)
    reader = pa.ipc.open_file(src)
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]   # zero-copy when uncompressed
    cols = {n: [b.column(j).to_numpy() for b in batches] for j, n in enumerate(reader.schema.names)}
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
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def columns(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    start = np.cumsum(rng.integers(50, 400, n)).astype(np.int64)
    return {"ph": np.full(n, ord("X"), np.uint8), "lane": (np.arange(n) % 5).astype(np.uint16),
            "start_ns": start, "dur_ns": rng.integers(100, 300, n).astype(np.int64),
            "name": rng.integers(0, 40, n).astype(np.int32), "category": rng.integers(0, 4, n).astype(np.uint16),
            "step": (np.arange(n) // 50_000).astype(np.int32), "args": np.full(n, -1, np.int32)}


def write(kind: str, cols: dict, path: Path) -> float:
    t0 = time.perf_counter()
    if kind.startswith("arrow"):
        import pyarrow as pa
        comp = {"arrow": None, "arrow-lz4": "lz4", "arrow-zstd": "zstd"}[kind]
        table = pa.table(cols)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", default="1e7")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    n = int(float(args.events))
    base = args.dir or Path(tempfile.mkdtemp(prefix="pv-fmt-"))
    cols = columns(n)
    print(f"{n:,} events, {sum(c.nbytes for c in cols.values()) / n:.0f} B/event in memory")
    print(f"{'format':12} {'size MB':>8} {'B/event':>8} {'write s':>14} {'load s':>14} {'load RSS MB':>12}")
    for kind in ("arrow", "arrow-lz4", "arrow-zstd", "parquet", "npz", "npz-deflate"):
        path = base / f"events.{kind}"
        writes = [write(kind, cols, path) for _ in range(2 if kind != "npz-deflate" else 1)]
        loads = []
        for _ in range(3):
            out = subprocess.run([sys.executable, "-c", LOAD, kind, str(path if kind.startswith(("arrow", "parquet"))
                                                                       else str(path) + ("" if str(path).endswith(".npz") else ".npz"))],
                                 capture_output=True, text=True, check=True).stdout.split()
            loads.append((float(out[0]), float(out[1])))
        p = path if path.exists() else Path(str(path) + ".npz")
        size = p.stat().st_size
        print(f"{kind:12} {size / 1e6:8.0f} {size / n:8.1f} {min(writes):6.2f}-{max(writes):<6.2f} "
              f"{min(l[0] for l in loads):6.2f}-{max(l[0] for l in loads):<6.2f} {max(l[1] for l in loads):12.0f}",
              flush=True)
        p.unlink()


if __name__ == "__main__":
    main()
