"""Give the raw tables meaning: spans, ops, marks, counters, queue events and steps of a `Run`."""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from profiler._version import __version__
from profiler.kernels.intervals import assign_steps, count_per_interval, covered_ns, place
from profiler.kernels.nesting import nest_spans
from profiler.model import Run, RunInfo, conform, OP_COLUMNS, SPAN_COLUMNS, INSTANT_COLUMNS, STEP_COLUMNS, COUNTER_COLUMNS, \
    QUEUE_COLUMNS, THREAD_COLUMNS
from profiler.store import kinds as K
from profiler.store.load import RawTables, descriptor_columns, window_of, windows_from_samples


def interpret(t: RawTables) -> Run:
    """The Run recorded in one rank's raw tables; times relative to the recording's origin."""
    origin = int(t.meta["clock"]["origin_monotonic_ns"])
    kind_of, name_of, extra_of = descriptor_columns(t.descriptors)
    windows = windows_from_samples(t.sm, kind_of)
    tid_of_ident, threads = _threads(t)
    is_span_desc = np.isin(kind_of, K.SPAN_KINDS)
    is_op_desc = kind_of == K.OP
    is_point_desc = np.isin(kind_of, (K.MARK, K.INSTANT))

    # Per-event work is done in place, with narrow dtypes, and every full-length array is dropped
    # as soon as it has served: at 1e7 events each is 40-80 MB, and fresh memory is what analyse()
    # spends most of its time on (docs/architecture.md, "Where analyse() time goes").
    ev_class = np.select([is_span_desc, is_point_desc], [1, 2], 0).astype(np.int8)[t.ev_code >> 1]
    ev_win = window_of(t.ev_t, windows)
    keep = ev_win >= 0                                     # events racing a window edge are not data
    outside = int(len(keep) - np.count_nonzero(keep))
    pt = np.flatnonzero(keep & (ev_class == 2))            # marks and instants
    keep &= ev_class == 1                                  # now: the span events to pair
    del ev_class
    select = None if keep.all() else np.flatnonzero(keep)
    del keep
    ev_tid = np.repeat(_map(t.ev_chunk_thread, tid_of_ident), t.ev_chunk_len)
    lane = ev_tid.astype(np.int64)                         # a thread within one window
    lane *= len(windows) + 1
    lane += ev_win
    del ev_win
    pairs = nest_spans(lane, t.ev_code, t.ev_t, select=select)
    del lane, select
    pt_desc = t.ev_code[pt] >> 1
    instants = pd.DataFrame({"tid": ev_tid[pt], "kind": by_code(pt_desc, kind_of),
                             "name": by_code(pt_desc, name_of), "time_ns": t.ev_t[pt] - origin})
    b, unmatched = pairs.begin, pairs.unmatched
    desc = t.ev_code[b]
    desc >>= 1
    columns = {"tid": ev_tid[b], "desc": desc.astype(np.int32)}
    del ev_tid, desc
    start = t.ev_t[b]
    start -= origin
    columns.update({"start_ns": start, "dur_ns": pairs.dur, "self_ns": pairs.self_ns, "depth": pairs.level})
    del b, pairs, start

    sm_desc = t.sm[:, 1] >> 1
    sm_kind = kind_of[sm_desc] if len(sm_desc) else np.empty(0, dtype=object)
    sm_tid = _map(t.sm_thread, tid_of_ident)
    steps, step_tid = _steps(t, sm_kind, sm_tid, windows, origin)

    op, span = split_rows(columns, is_op_desc[columns["desc"]])
    del span["self_ns"], op["depth"]
    ops = {
        "device": constant("cpu", len(op["desc"])),
        "stream": by_code(op.pop("tid"), threads["name"].to_numpy()),
        "name": by_code(op["desc"], name_of),
        "op_type": by_code(op.pop("desc"), extra_of),
        "category": constant("user", len(op["start_ns"])),
        **op,
        "step": assign_steps(op["start_ns"], steps),
        "source": constant("marker", len(op["start_ns"])),
    }
    del op
    spans = {**span, "kind": by_code(span["desc"], kind_of), "name": by_code(span.pop("desc"), name_of)}
    counters = _counters(t, sm_kind, sm_desc, name_of, extra_of, origin)
    queues = _queues(t, sm_kind, sm_desc, sm_tid, name_of, extra_of, origin)
    info = _info(t, unmatched, outside, step_tid, len(steps))
    return Run(info=info, ops=conform(ops, OP_COLUMNS), spans=conform(spans, SPAN_COLUMNS),
               instants=conform(instants, INSTANT_COLUMNS), steps=conform(steps, STEP_COLUMNS),
               counters=conform(counters, COUNTER_COLUMNS), queues=conform(queues, QUEUE_COLUMNS),
               threads=conform(threads, THREAD_COLUMNS))


def split_rows(columns: dict[str, np.ndarray], mask: np.ndarray) -> tuple[dict, dict]:
    """(rows where mask, rows where not) of every column. Columns are taken out of `columns` one
    by one, so only one full-length copy exists at a time; an all-true or all-false mask copies nothing."""
    yes, no = {}, {}
    every, none = bool(mask.all()), not mask.any()
    inverse = None if every or none else ~mask
    for name in list(columns):
        col = columns.pop(name)
        yes[name] = col if every else col[:0] if none else col[mask]
        no[name] = col[:0] if every else col if none else col[inverse]
        del col
    return yes, no


def by_code(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """labels[codes] as a categorical: one string per distinct label, not one object per row."""
    # object, not numpy's fixed-width str: that drops trailing NULs, merging '' and '\x00'
    text = np.empty(len(labels), dtype=object)
    text[:] = [str(label) for label in labels]
    cats, inverse = np.unique(text, return_inverse=True)
    inverse = inverse.astype(np.int32)                  # 4-byte codes: half the memory of millions of rows
    return pd.Categorical.from_codes(inverse[codes] if len(codes) else np.empty(0, np.int32), categories=cats)


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


def _steps(t: RawTables, sm_kind: np.ndarray, sm_tid: np.ndarray, windows: pd.DataFrame,
           origin: int) -> tuple[pd.DataFrame, int]:
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
        t.warnings.append(f"{int((~counting).sum())} step end(s) whose step number does not follow the "
                          "others (a damaged raw record) were left out")
        after_damage = np.concatenate([[False], ~counting[:-1]])[counting]   # a left-out end just before
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
    steps = pd.DataFrame({"step": num, "start_ns": start - origin, "end_ns": end - origin,
                          "fp_start_ns": -1, "bp_end_ns": -1, "overhead_ns": overhead.astype(np.int64)})
    return steps, step_tid


def longest_increasing(values: np.ndarray) -> np.ndarray:
    """Mask of one longest strictly increasing subsequence of `values` (patience sorting, O(n log n))."""
    tails: list[int] = []                 # tails[k]: index of the smallest last value of a run of length k+1
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
    n = count_per_interval(t.ev_t, start, end) + count_per_interval(t.sm[:, 0], start, end)
    return n * float(t.meta.get("per_event_cost_ns", 0.0))


def _counters(t, sm_kind, sm_desc, name_of, extra_of, origin) -> pd.DataFrame:
    """Counter samples; a counter descriptor's extra is "source|device" (split once per descriptor)."""
    m = sm_kind == K.COUNTER
    parts = [str(x).split("|", 1) + [""] for x in extra_of]
    source_of = np.array([p[0] for p in parts], dtype=object)
    device_of = np.array([p[1] for p in parts], dtype=object)
    d = sm_desc[m]
    return pd.DataFrame({"source": source_of[d], "device": device_of[d], "metric": name_of[d],
                         "time_ns": t.sm[m, 0] - origin, "value": t.sm[m, 3].copy().view(np.float64)})


def _queues(t, sm_kind, sm_desc, sm_tid, name_of, extra_of, origin) -> pd.DataFrame:
    """Queue probe samples; a queue descriptor's extra is its capacity (parsed once per descriptor)."""
    m = (sm_kind == K.QUEUE_PUT) | (sm_kind == K.QUEUE_GET)
    capacity_of = np.array([int(x) if str(x).isdigit() else 0 for x in extra_of], dtype=np.int64)
    size, wait, cap = t.sm[:, 2], t.sm[:, 3], capacity_of[sm_desc]
    damaged = m & ((size < 0) | (wait < 0) | ((cap > 0) & (size > cap)))
    if damaged.any():         # a probe never records these: damaged raw records
        t.warnings.append(f"{int(damaged.sum())} queue sample(s) with a negative size or wait, or a size above the "
                          "queue's capacity (damaged raw records) were left out")
        m &= ~damaged
    return pd.DataFrame({"queue": name_of[sm_desc[m]], "time_ns": t.sm[m, 0] - origin,
                         "event": np.where(sm_kind[m] == K.QUEUE_PUT, "put", "get"),
                         "size": size[m], "capacity": cap[m], "wait_ns": wait[m], "tid": sm_tid[m]})


def _info(t: RawTables, unmatched: int, outside: int, step_tid: int, n_steps: int) -> RunInfo:
    meta = t.meta
    end = t.end or {}
    warnings = list(t.warnings)
    if t.end is None:
        warnings.append("the recording did not stop cleanly (no end-of-recording chunk): the process was "
                        "probably killed; everything flushed before that is analysed")
    if unmatched:
        warnings.append(f"{unmatched} span begin/end events had no partner (spans open when recording "
                        "started, stopped or crashed) and were left out")
    events = int(len(t.ev_t) + len(t.sm))
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
        "overhead": {"per_event_ns": meta.get("per_event_cost_ns", 0.0),
                     "flush_ms": end.get("flush_ms")},
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
    what = (f"{dropped + kept:,} events were recorded and all were dropped" if not kept else
            f"{dropped:,} of {dropped + kept:,} recorded events were dropped")
    return (f"{what}: the memory budget{budget_text} was full between two flushes to the raw store (or a write "
            f"failed); raise memory_budget_mb or flush more often{interval_text}")
