"""Give the raw tables meaning: spans, ops, marks, counters, queue events and steps of a `Run`."""

from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from profiler._version import __version__
from profiler.kernels.intervals import assign_steps, count_per_interval, covered_ns
from profiler.kernels.nesting import NOT_SPAN, OP_SPAN, OTHER_SPAN, Labels, nest_events
from profiler.model import (
    COUNTER_COLUMNS,
    INSTANT_COLUMNS,
    OP_COLUMNS,
    QUEUE_COLUMNS,
    SPAN_COLUMNS,
    STEP_COLUMNS,
    THREAD_COLUMNS,
    Run,
    RunInfo,
    conform,
)
from profiler.store import kinds as K
from profiler.store.tables import RawTables, descriptor_columns
from profiler.store.windows import window_of, windows_from_samples


def interpret(t: RawTables) -> Run:
    """The Run recorded in one rank's raw tables; times relative to the recording's origin."""
    origin = int(t.meta["clock"]["origin_monotonic_ns"])
    kind_of, name_of, extra_of = descriptor_columns(t.descriptors)
    windows = windows_from_samples(t.sm, kind_of)
    tid_of_ident, threads = _threads(t)
    chunk_tid = _map(t.ev_chunk_thread, tid_of_ident)

    # Spans are paired straight from the events chunks (the memory-mapped raw files) by one kernel that
    # writes the op and span rows: no full-length array per event, since fresh memory is what this
    # stage spends most of its time on (docs/architecture.md, "Where analyse() spends its time").
    # Rows come out with the codes of their categorical columns (stream, name, op type; kind, name).
    code_class = np.select([kind_of == K.OP, np.isin(kind_of, K.SPAN_KINDS)], [OP_SPAN, OTHER_SPAN], NOT_SPAN)
    (stream_cats, stream_codes), (kind_cats, kind_codes), (name_cats, name_codes), (type_cats, type_codes) = (
        categories(labels) for labels in (threads["name"].to_numpy(), kind_of, name_of, extra_of)
    )
    rows = nest_events(
        t.events,
        chunk_tid,
        np.repeat(code_class.astype(np.int8), 2),
        Labels(stream_codes, name_codes, type_codes),
        Labels(np.arange(len(threads), dtype=np.int32), kind_codes, name_codes),
        windows["start_ns"].to_numpy(dtype=np.int64),
        windows["stop_ns"].to_numpy(dtype=np.int64),
        origin,
    )
    instants = _instants(t, chunk_tid, windows, kind_of, name_of, origin)

    sm_desc = t.sm[:, 1] >> 1
    sm_kind = kind_of[sm_desc] if len(sm_desc) else np.empty(0, dtype=object)
    sm_tid = _map(t.sm_thread, tid_of_ident)
    steps, step_tid = _steps(t, sm_kind, sm_tid, windows, origin)

    op, span = rows.ops, rows.spans
    ops = {
        "device": constant("cpu", len(op["start_ns"])),
        "stream": categorical(op.pop("by_thread"), stream_cats),
        "name": categorical(op.pop("by_desc"), name_cats),
        "op_type": categorical(op.pop("by_desc2"), type_cats),
        "category": constant("user", len(op["start_ns"])),
        **op,
        "step": assign_steps(op["start_ns"], steps),
        "source": constant("marker", len(op["start_ns"])),
    }
    del op
    spans = {
        "tid": span.pop("by_thread"),
        "kind": categorical(span.pop("by_desc"), kind_cats),
        "name": categorical(span.pop("by_desc2"), name_cats),
        **span,
    }
    counters = _counters(t, sm_kind, sm_desc, name_of, extra_of, origin)
    queues = _queues(t, sm_kind, sm_desc, sm_tid, name_of, extra_of, origin)
    info = _info(t, rows.unmatched, rows.outside, step_tid, len(steps))
    return Run(
        info=info,
        ops=conform(ops, OP_COLUMNS),
        spans=conform(spans, SPAN_COLUMNS),
        instants=conform(instants, INSTANT_COLUMNS),
        steps=conform(steps, STEP_COLUMNS),
        counters=conform(counters, COUNTER_COLUMNS),
        queues=conform(queues, QUEUE_COLUMNS),
        threads=conform(threads, THREAD_COLUMNS),
    )


def _instants(
    t: RawTables, chunk_tid: np.ndarray, windows: pd.DataFrame, kind_of: np.ndarray, name_of: np.ndarray, origin: int
) -> pd.DataFrame:
    """Marks and instants inside a recording window, in recording order."""
    is_point = np.repeat(np.isin(kind_of, (K.MARK, K.INSTANT)), 2)
    parts = [(c[is_point[c[:, 1]]], tid) for c, tid in zip(t.events, chunk_tid)] if is_point.any() else []
    parts = [(c, tid) for c, tid in parts if len(c)]
    pt = np.concatenate([c for c, _ in parts]) if parts else np.empty((0, 2), np.int64)
    tid = np.concatenate([np.full(len(c), tid, np.int32) for c, tid in parts]) if parts else np.empty(0, np.int32)
    inside = window_of(pt[:, 0], windows) >= 0
    pt, tid = pt[inside], tid[inside]
    pt_desc = pt[:, 1] >> 1
    return pd.DataFrame(
        {"tid": tid, "kind": by_code(pt_desc, kind_of), "name": by_code(pt_desc, name_of), "time_ns": pt[:, 0] - origin}
    )


def categories(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct labels, sorted, and each label's code among them, in the integer type pandas
    keeps a categorical's codes in (the smallest that holds them: int8 for fewer than 127), so
    millions of codes made with it are neither wider than needed nor copied again."""
    # object, not numpy's fixed-width str: that drops trailing NULs, merging '' and '\x00'
    text = np.empty(len(labels), dtype=object)
    text[:] = [str(label) for label in labels]
    cats, inverse = np.unique(text, return_inverse=True)
    code_type = next((t for t in (np.int8, np.int16, np.int32) if len(cats) < np.iinfo(t).max), np.int64)
    return cats, inverse.astype(code_type)


def categorical(codes: np.ndarray, cats: np.ndarray) -> pd.Categorical:
    """A categorical from codes made by `categories` (so they need no checking: a pass less per column)."""
    return pd.Categorical.from_codes(codes, categories=cats, validate=False)


def by_code(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """labels[codes] as a categorical: one string per distinct label, not one object per row."""
    cats, inverse = categories(labels)
    return categorical(inverse[codes] if len(codes) else np.empty(0, np.int32), cats)


def constant(label: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[label])


def _map(idents: np.ndarray, lut: dict[int, int]) -> np.ndarray:
    """lut[ident] for every ident, as int32 (thread indices)."""
    if len(idents) == 0:
        return np.empty(0, np.int32)
    keys = np.fromiter(lut.keys(), dtype=np.int64, count=len(lut))
    vals = np.fromiter(lut.values(), dtype=np.int32, count=len(lut))
    o = np.argsort(keys)
    return vals[o][np.searchsorted(keys[o], idents)]


def _threads(t: RawTables) -> tuple[dict[int, int], pd.DataFrame]:
    """profview thread index per OS ident, in order of first appearance (deterministic)."""
    seen = pd.unique(np.concatenate([t.ev_chunk_thread, t.sm_thread]))
    lut = {int(ident): i for i, ident in enumerate(seen)}
    names = [t.thread_names.get(int(ident), f"thread-{int(ident)}") for ident in seen]
    dup = pd.Series(names).duplicated(keep=False).to_numpy()
    names = [f"{n} ({i})" if d else n for i, (n, d) in enumerate(zip(names, dup))]
    return lut, pd.DataFrame({"tid": np.arange(len(seen)), "os_tid": seen.astype(np.int64), "name": names})


def _steps(
    t: RawTables, sm_kind: np.ndarray, sm_tid: np.ndarray, windows: pd.DataFrame, origin: int
) -> tuple[pd.DataFrame, int]:
    """One row per completed step: from the previous step() (or its window's start) to its step() call."""
    s = t.sm[sm_kind == K.STEP]
    tids = sm_tid[sm_kind == K.STEP]
    step_tid = int(tids[0]) if len(tids) else -1
    if len(s) == 0:
        return pd.DataFrame(columns=list(STEP_COLUMNS)), step_tid
    s = s[np.argsort(s[:, 0], kind="stable")]
    after_damage = np.zeros(len(s), dtype=bool)
    if len(s) > 1 and not bool(np.all(np.diff(s[:, 2]) > 0)):
        # step() numbers only grow: keep the longest growing run of them, the rest are damaged records
        counting = longest_increasing(s[:, 2])
        t.warnings.append(
            f"{int((~counting).sum())} step end(s) whose step number does not follow the "
            "others (a damaged raw record) were left out"
        )
        after_damage = np.concatenate([[False], ~counting[:-1]])[counting]  # a left-out end just before
        s = s[counting]
    end, num, call_cost = s[:, 0], s[:, 2], s[:, 3]
    win = window_of(end, windows)
    ok = win >= 0
    end, num, call_cost, win, after_damage = end[ok], num[ok], call_cost[ok], win[ok], after_damage[ok]
    prev_end = np.concatenate([[0], end[:-1]])
    prev_num = np.concatenate([[-2], num[:-1]])
    prev_win = np.concatenate([[-1], win[:-1]])
    continues = ((prev_num == num - 1) | after_damage) & (prev_win == win)
    start = np.where(continues, prev_end, windows["start_ns"].to_numpy()[win])
    overhead = call_cost + _flush_overlap(t, sm_kind, start, end) + _event_cost(t, start, end)
    steps = pd.DataFrame(
        {
            "step": num,
            "start_ns": start - origin,
            "end_ns": end - origin,
            "fp_start_ns": -1,
            "bp_end_ns": -1,
            "overhead_ns": overhead.astype(np.int64),
        }
    )
    return steps, step_tid


def longest_increasing(values: np.ndarray) -> np.ndarray:
    """Mask of one longest strictly increasing subsequence of `values` (patience sorting, O(n log n))."""
    tails: list[int] = []  # tails[k]: index of the smallest last value of a run of length k+1
    tail_values: list[int] = []
    parent = np.full(len(values), -1, dtype=np.int64)
    for i, v in enumerate(values.tolist()):
        k = bisect.bisect_left(tail_values, v)
        parent[i] = tails[k - 1] if k else -1
        if k == len(tails):
            tails.append(i)
            tail_values.append(v)
        else:
            tails[k], tail_values[k] = i, v
    keep = np.zeros(len(values), dtype=bool)
    i = tails[-1] if tails else -1
    while i >= 0:
        keep[i] = True
        i = parent[i]
    return keep


def _flush_overlap(t: RawTables, sm_kind: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time the background flusher worked inside each [start, end)."""
    f = t.sm[sm_kind == K.FLUSH]
    return covered_ns(f[:, 0], f[:, 0] + f[:, 2], start, end)


def _event_cost(t: RawTables, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Events recorded inside each step times the calibrated cost of one event."""
    n = count_per_interval(t.sm[:, 0], start, end)
    for c in t.events:  # each chunk a sorted run, as a whole
        n += count_per_interval(np.ascontiguousarray(c[:, 0]), start, end)
    return n * float(t.meta.get("per_event_cost_ns", 0.0))


def _counters(t, sm_kind, sm_desc, name_of, extra_of, origin) -> pd.DataFrame:
    """Counter samples; a counter descriptor's extra is "source|device" (split once per descriptor)."""
    m = sm_kind == K.COUNTER
    parts = [str(x).split("|", 1) + [""] for x in extra_of]
    source_of = np.array([p[0] for p in parts], dtype=object)
    device_of = np.array([p[1] for p in parts], dtype=object)
    d = sm_desc[m]
    return pd.DataFrame(
        {
            "source": source_of[d],
            "device": device_of[d],
            "metric": name_of[d],
            "time_ns": t.sm[m, 0] - origin,
            "value": t.sm[m, 3].copy().view(np.float64),
        }
    )


def _queues(t, sm_kind, sm_desc, sm_tid, name_of, extra_of, origin) -> pd.DataFrame:
    """Queue probe samples; a queue descriptor's extra is its capacity (parsed once per descriptor)."""
    m = (sm_kind == K.QUEUE_PUT) | (sm_kind == K.QUEUE_GET)
    capacity_of = np.array([int(x) if str(x).isdigit() else 0 for x in extra_of], dtype=np.int64)
    size, wait, cap = t.sm[:, 2], t.sm[:, 3], capacity_of[sm_desc]
    damaged = m & ((size < 0) | (wait < 0) | ((cap > 0) & (size > cap)))
    if damaged.any():  # a probe never records these: damaged raw records
        t.warnings.append(
            f"{int(damaged.sum())} queue sample(s) with a negative size or wait, or a size above the "
            "queue's capacity (damaged raw records) were left out"
        )
        m &= ~damaged
    return pd.DataFrame(
        {
            "queue": name_of[sm_desc[m]],
            "time_ns": t.sm[m, 0] - origin,
            "event": np.where(sm_kind[m] == K.QUEUE_PUT, "put", "get"),
            "size": size[m],
            "capacity": cap[m],
            "wait_ns": wait[m],
            "tid": sm_tid[m],
        }
    )


def _info(t: RawTables, unmatched: int, outside: int, step_tid: int, n_steps: int) -> RunInfo:
    meta = t.meta
    end = t.end or {}
    warnings = list(t.warnings)
    if t.end is None:
        warnings.append(
            "the recording did not stop cleanly (no end-of-recording chunk): the process was "
            "probably killed; everything flushed before that is analysed"
        )
    if unmatched:
        warnings.append(
            f"{unmatched} span begin/end events had no partner (spans open when recording "
            "started, stopped or crashed) and were left out"
        )
    events = t.records
    dropped = max(int(t.dropped), int(end.get("dropped_events", 0)))
    config = meta.get("config", {})
    if dropped:
        warnings.append(dropped_sentence(dropped, events, config))
    return {
        "schema_version": 1,
        "tool": "profview",
        "tool_version": __version__,
        "recorded_with": meta.get("tool_version"),
        "data_origin": "profview",
        "rank": meta.get("rank", 0),
        "world_size": meta.get("world_size", 1),
        "host": meta.get("host", ""),
        "pid": meta.get("pid", 0),
        "framework_versions": meta.get("framework_versions", {}),
        "clock": meta["clock"],
        "sources": t.sources,
        "config": config,
        "recording": {
            "events": events,
            "dropped_events": dropped,
            "dropped_reason": "memory budget or failed write" if dropped else "",
            "events_outside_windows": outside,
            "unmatched_span_events": int(unmatched),
            "torn_chunks": int(t.torn_chunks),
            "damaged_chunks": t.damaged,
            "lost_events": int(t.lost_records),
            "duplicate_chunks": int(t.duplicate_chunks),
            "stopped_cleanly": bool(end.get("stopped_cleanly", False)),
            "memory_budget_bytes": config.get("memory_budget_bytes"),
            "raw_files": t.files,
        },
        "overhead": {"per_event_ns": meta.get("per_event_cost_ns", 0.0), "flush_ms": end.get("flush_ms")},
        # what the profiler itself held in memory, per source (a source that holds data adds its own)
        "profiler_memory": {"recorder": {"buffer_peak_bytes": end.get("buffer_peak_bytes")}},
        "step_tid": step_tid,
        "steps": {"count": n_steps},
        "warnings": warnings,
    }


def dropped_sentence(dropped: int, kept: int, config: dict) -> str:
    """What was dropped while recording, why, and what to change (a warning, and the error when nothing is left)."""
    budget = config.get("memory_budget_bytes")
    interval = config.get("flush_interval_s")
    budget_text = f" ({budget / (1 << 20):.3g} MB)" if isinstance(budget, (int, float)) and budget > 0 else ""
    interval_text = f" (flush_interval_s={interval:g})" if isinstance(interval, (int, float)) and interval > 0 else ""
    what = (
        f"{dropped + kept:,} events were recorded and all were dropped"
        if not kept
        else f"{dropped:,} of {dropped + kept:,} recorded events were dropped"
    )
    return (
        f"{what}: the memory budget{budget_text} was full between two flushes to the raw store (or a write "
        f"failed); raise memory_budget_mb or flush more often{interval_text}"
    )
