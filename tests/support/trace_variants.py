"""Variants of the real Kineto captures, made in tmp by rewriting a copy (the captures are never changed)."""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path


def load_trace(path: Path) -> dict:
    """A gzip-compressed Kineto trace as its JSON document."""
    return json.loads(gzip.decompress(path.read_bytes()))


def write_trace(doc: dict, path: Path, compress: bool) -> Path:
    """`doc` written to `path` as JSON, gzip-compressed (reproducibly) when `compress`."""
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def rocm_variant(doc: dict) -> dict:
    """A trace as Kineto's ROCm backends (roctracer, rocprofiler-sdk) write it: HIP runtime calls
    (hipLaunchKernel, hipMemcpyAsync, hipStreamSynchronize: the CUDA names with `hip` for `cuda`)
    still under category `cuda_runtime`, memcpy named by direction and host / device ("Memcpy HtoD
    (Host -> Device)": nothing says pageable), memset "Memset (<unknown>)", no `cuda_sync` events."""
    out = copy.deepcopy(doc)
    where = {"Pageable": "Host", "Pinned": "Host", "Device": "Device"}
    events = []
    for e in out["traceEvents"]:
        cat = e.get("cat")
        if cat == "cuda_sync":
            continue
        if cat in ("cuda_runtime", "cuda_driver"):
            e["cat"], e["name"] = "cuda_runtime", re.sub(r"^cu(?:da)?", "hip", e["name"])
        elif cat == "gpu_memcpy":
            kind, src, dst = re.match(r"Memcpy (\w+) \((\w+) -> (\w+)\)", e["name"]).groups()
            e["name"] = f"Memcpy {kind} ({where[src]} -> {where[dst]})"
        elif cat == "gpu_memset":
            e["name"] = "Memset (<unknown>)"
        events.append(e)
    out["traceEvents"] = events
    return out
