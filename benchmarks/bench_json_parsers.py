"""Which JSON parser for a streaming Kineto import (issue 32): time and peak memory of each candidate
reading a large trace into the fields the importer needs, each in its own process.

Builds a plain-JSON trace of about `--events` events from the real capture
tests/data/kineto/sampled_rank-0.json.gz (bench_kineto_import.replicated_trace: copies shifted in time),
then, for every parser, starts a fresh interpreter that reads the file and pulls out what
`kineto_events.event_columns` pulls out of each event (ph, cat, name, pid, tid, ts, dur, args) into
Python lists, and reports its wall time and its peak RSS (the child's own VmHWM):

- whole-document parsers, which hold the file's bytes and every event at once: the standard library's
  `json`, `orjson` (what profview uses today), `msgspec` decoding into typed structs (no dict per
  event), `pysimdjson` (a lazy DOM over the bytes);
- streaming parsers, which hold one chunk at a time: `ijson` (yajl2_c backend) over `traceEvents.item`,
  `orjson` over 16 MiB chunks each cut after its last whole event (profiler/importers/kineto_stream.py),
  and the standard library's scanner called once per event over 64 MiB chunks (`json.JSONDecoder.
  raw_decode`, what the importer's cut-trace salvage uses).

    .venv/bin/python benchmarks/bench_json_parsers.py [--events 1000000] [--parsers json orjson ...]
        [--keep nothing fields]

Keeping `nothing` shows each parser's own memory (what a streaming import would hold); keeping
`fields` adds what today's importer holds per event, the same for every parser.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

#: What every child does with each event. `fields`: keep the fields event_columns reads, as the importer
#: does today (every event's values held at once); `nothing`: read them and keep none (a streaming import
#: turns each chunk into columns and drops it: what is left is the parser's own memory).
COLLECT = {
    "fields": """
ph, cat, name, pid, tid, ts, dur, args = ([] for _ in range(8))
def collect(get):
    ph.append(get("ph")); cat.append(get("cat")); name.append(get("name")); pid.append(get("pid"))
    tid.append(get("tid")); ts.append(get("ts")); dur.append(get("dur")); args.append(get("args"))
def count():
    return len(ts)
""",
    "nothing": """
seen = [0]
def collect(get):
    get("ph"); get("cat"); get("name"); get("pid"); get("tid"); get("ts"); get("dur"); get("args")
    seen[0] += 1
def count():
    return seen[0]
""",
}

#: Each parser's child program; `PATH` is the trace. It ends by printing how many events it read.
PARSERS = {
    "json": """
import json
for e in json.load(open(PATH, "rb"))["traceEvents"]:
    collect(e.get)
""",
    "orjson": """
import orjson
for e in orjson.loads(open(PATH, "rb").read())["traceEvents"]:
    collect(e.get)
""",
    "msgspec": """
from typing import Any, Optional
import msgspec
class Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[dict] = None
class Trace(msgspec.Struct):
    traceEvents: list[Event]
for e in msgspec.json.decode(open(PATH, "rb").read(), type=Trace).traceEvents:
    collect(lambda key, e=e: getattr(e, key))
""",
    "pysimdjson": """
import simdjson
doc = simdjson.Parser().parse(open(PATH, "rb").read())
for e in doc["traceEvents"]:
    collect(e.get)
""",
    "ijson": """
import ijson
with open(PATH, "rb") as f:
    for e in ijson.items(f, "traceEvents.item", use_float=True):
        collect(e.get)
""",
    "stdlib-stream": """
import json, re
decoder, space = json.JSONDecoder(), re.compile(r"[\\s,]*")
with open(PATH, "rb") as f:
    text = ""
    at = None
    while True:
        chunk = f.read(64 << 20)
        text = text + chunk.decode("utf-8") if chunk else text
        if at is None:
            at = text.index("[", text.index('"traceEvents"')) + 1
        while True:
            at = space.match(text, at).end()
            if at >= len(text) or text[at] == "]":
                break
            try:
                e, end = decoder.raw_decode(text, at)
            except ValueError:
                break  # the event runs past the chunk: read more
            collect(e.get)
            at = end
        if not chunk or (at < len(text) and text[at] == "]"):
            break
        text, at = text[at:], 0
""",
    "orjson-chunks": """
import orjson
sys.path.insert(0, REPO)
from profiler.importers.kineto_stream import _after_separator, _whole_events
CHUNK = 16 << 20
with open(PATH, "rb") as f:
    buf, ended = f.read(CHUNK), False
    at = buf.index(b"[", buf.index(b'"traceEvents"')) + 1
    while True:
        at = _after_separator(buf, at)
        if at < len(buf) and buf[at] == ord("]"):
            break
        if not ended and len(buf) - at < CHUNK:
            more = f.read(CHUNK)
            buf, at, ended = buf[at:] + more, 0, not more
            continue
        events, at = _whole_events(buf, at)
        for e in events:
            collect(e.get)
        del events
""",
}

#: The child's peak RSS is its VmHWM (ru_maxrss would keep the parent's high-water mark across fork and exec).
CHILD = """
import re, sys, time
PATH, REPO = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
{collect}
{body}
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())
print(count(), time.perf_counter() - t0, int(hwm[1]) * 1024)
"""


def run_parser(name: str, path: Path, keep: str) -> tuple[int, float, int]:
    """(events read, seconds, peak RSS bytes) of one parser's child process."""
    code = CHILD.format(collect=COLLECT[keep], body=PARSERS[name])
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(REPO)], capture_output=True, text=True, check=True
    )
    events, seconds, peak = done.stdout.split()
    return int(events), float(seconds), int(peak)


def main() -> None:
    from bench_kineto_import import SEED_TRACE, replicated_trace

    from profiler.importers.kineto_events import load_trace_object

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--parsers", nargs="+", choices=sorted(PARSERS), default=list(PARSERS))
    p.add_argument("--keep", nargs="+", choices=sorted(COLLECT), default=["nothing", "fields"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_text(json.dumps(replicated_trace(load_trace_object(SEED_TRACE), args.events)))
        size = path.stat().st_size
        print(f"trace: {size / 2**20:.0f} MiB of JSON, from {SEED_TRACE.name}", flush=True)
        for keep in args.keep:
            print(f"keeping {keep}:")
            print(
                f"  {'parser':14s} {'events':>9s} {'seconds':>8s} {'MB/s':>5s} {'peak RSS MiB':>12s} "
                f"{'RSS / file':>10s}"
            )
            for name in args.parsers:
                t0 = time.perf_counter()
                events, seconds, peak = run_parser(name, path, keep)
                wall = time.perf_counter() - t0
                print(
                    f"  {name:14s} {events:9d} {seconds:8.2f} {size / 2**20 / seconds:5.0f} {peak / 2**20:12.0f} "
                    f"{peak / size:10.2f}   (process {wall:.1f} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
