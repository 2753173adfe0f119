"""Give the raw tables meaning: spans, ops, marks, counters, queue events and steps of a `Run`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._version import __version__
from ..analysis.intervals import covered_ns
from ..analysis.nesting import pair_spans, self_time
from ..model import Run, conform, OP_COLUMNS, SPAN_COLUMNS, INSTANT_COLUMNS, STEP_COLUMNS, COUNTER_COLUMNS, \
    QUEUE_COLUMNS, THREAD_COLUMNS
from ..record import recorder as K
from .load import RawTables, descriptor_columns, window_of, windows_from_samples


def interpret(t: RawTables) -> Run:
    """The Run recorded in one rank's raw tables; times relative to the recording's origin."""
    origin = int(t.meta["clock"]["origin_monotonic_ns"])
    kind_of, name_of, extra_of = descriptor_columns(t.descriptors)
    windows = windows_from_samples(t.sm, kind_of)
    tid_of_ident, threads = _threads(t)
    is_span_desc = np.isin(kind_of, K.SPAN_KINDS)
    is_op_desc = kind_of == K.OP
    is_point_desc = np.isin(kind_of, (K.MARK, K.INSTANT))

    ev_desc = t.ev_code >> 1
    ev_win = window_of(t.ev_t, windows)
    ev_tid = _map(t.ev_thread, tid_of_ident)
    keep = ev_win >= 0                                     # events racing a window edge are not data
    idx = np.flatnonzero(keep & is_span_desc[ev_desc]) if len(ev_desc) else np.empty(0, np.int64)
    pairs = pair_spans(ev_tid[idx], ev_win[idx], t.ev_code[idx])
    b, e = idx[pairs.begin], idx[pairs.end]
    d = ev_desc[b]
    span_start = t.ev_t[b] - origin
    span_dur = t.ev_t[e] - t.ev_t[b]
    span_self = self_time(span_start, span_dur, ev_tid[b] * (len(windows) + 1) + ev_win[b], pairs.level)

    sm_desc = t.sm[:, 1] >> 1
    sm_kind = kind_of[sm_desc] if len(sm_desc) else np.empty(0, dtype=object)
    sm_tid = _map(t.sm_thread, tid_of_ident)
    steps, step_tid = _steps(t, sm_kind, sm_tid, windows, origin)

    is_op = is_op_desc[d]
    n_ops = int(is_op.sum())
    ops = pd.DataFrame({
        "device": constant("cpu", n_ops),
        "stream": by_code(ev_tid[b][is_op], threads["name"].to_numpy()),
        "name": by_code(d[is_op], name_of),
        "op_type": by_code(d[is_op], extra_of),
        "category": constant("user", n_ops),
        "start_ns": span_start[is_op],
        "dur_ns": span_dur[is_op],
        "self_ns": span_self[is_op],
        "step": assign_steps(span_start[is_op], steps),
        "source": constant("marker", n_ops),
    })
    other = ~is_op
    spans = pd.DataFrame({
        "tid": ev_tid[b][other], "kind": by_code(d[other], kind_of), "name": by_code(d[other], name_of),
        "start_ns": span_start[other], "dur_ns": span_dur[other], "depth": pairs.level[other],
    })
    pt = np.flatnonzero(keep & is_point_desc[ev_desc]) if len(ev_desc) else np.empty(0, np.int64)
    instants = pd.DataFrame({"tid": ev_tid[pt], "kind": by_code(ev_desc[pt], kind_of),
                             "name": by_code(ev_desc[pt], name_of), "time_ns": t.ev_t[pt] - origin})
    counters = _counters(t, sm_kind, sm_desc, name_of, extra_of, origin)
    queues = _queues(t, sm_kind, sm_desc, sm_tid, name_of, extra_of, origin)
    info = _info(t, pairs.unmatched, int((~keep).sum()), step_tid, len(steps))
    return Run(info=info, ops=conform(ops, OP_COLUMNS), spans=conform(spans, SPAN_COLUMNS),
               instants=conform(instants, INSTANT_COLUMNS), steps=conform(steps, STEP_COLUMNS),
               counters=conform(counters, COUNTER_COLUMNS), queues=conform(queues, QUEUE_COLUMNS),
               threads=conform(threads, THREAD_COLUMNS))


def by_code(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """labels[codes] as a categorical: one string per distinct label, not one object per row."""
    cats, inverse = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
    return pd.Categorical.from_codes(inverse[codes] if len(codes) else np.empty(0, np.int64), categories=cats)


def constant(label: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[label])


def _map(idents: np.ndarray, lut: dict[int, int]) -> np.ndarray:
    if len(idents) == 0:
        return np.empty(0, np.int64)
    keys = np.fromiter(lut.keys(), dtype=np.int64, count=len(lut))
    vals = np.fromiter(lut.values(), dtype=np.int64, count=len(lut))
    o = np.argsort(keys)
    return vals[o][np.searchsorted(keys[o], idents)]


def _threads(t: RawTables) -> tuple[dict[int, int], pd.DataFrame]:
    """profview thread index per OS ident, in order of first appearance (deterministic)."""
    seen = pd.unique(np.concatenate([t.ev_thread, t.sm_thread]))
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
    end, num, call_cost = s[:, 0], s[:, 2], s[:, 3]
    win = window_of(end, windows)
    ok = win >= 0
    end, num, call_cost, win = end[ok], num[ok], call_cost[ok], win[ok]
    prev_end = np.concatenate([[0], end[:-1]])
    prev_num = np.concatenate([[-2], num[:-1]])
    prev_win = np.concatenate([[-1], win[:-1]])
    continues = (prev_num == num - 1) & (prev_win == win)
    start = np.where(continues, prev_end, windows["start_ns"].to_numpy()[win])
    overhead = call_cost + _flush_overlap(t, sm_kind, start, end) + _event_cost(t, start, end)
    steps = pd.DataFrame({"step": num, "start_ns": start - origin, "end_ns": end - origin,
                          "fp_start_ns": -1, "bp_end_ns": -1, "overhead_ns": overhead.astype(np.int64)})
    return steps, step_tid


def _flush_overlap(t: RawTables, sm_kind: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time the background flusher worked inside each [start, end)."""
    f = t.sm[sm_kind == K.FLUSH]
    return covered_ns(f[:, 0], f[:, 0] + f[:, 2], start, end)


def _event_cost(t: RawTables, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Events recorded inside each step times the calibrated cost of one event."""
    steps = pd.DataFrame({"step": np.arange(len(start)), "start_ns": start, "end_ns": end})
    s = assign_steps(np.concatenate([t.ev_t, t.sm[:, 0]]), steps)
    n = np.bincount(s[s >= 0], minlength=len(start))
    return n * float(t.meta.get("per_event_cost_ns", 0.0))


def assign_steps(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose [start, end) contains each time, -1 outside every step."""
    if len(steps) == 0 or len(times) == 0:
        return np.full(len(times), -1, dtype=np.int64)
    st = steps.sort_values("start_ns", kind="stable")
    starts, ends, nums = st["start_ns"].to_numpy(), st["end_ns"].to_numpy(), st["step"].to_numpy()
    i = np.searchsorted(starts, times, side="right") - 1
    ok = (i >= 0) & (times < ends[np.maximum(i, 0)])
    return np.where(ok, nums[np.maximum(i, 0)], -1).astype(np.int64)


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
    cap = capacity_of[sm_desc[m]]
    return pd.DataFrame({"queue": name_of[sm_desc[m]], "time_ns": t.sm[m, 0] - origin,
                         "event": np.where(sm_kind[m] == K.QUEUE_PUT, "put", "get"),
                         "size": t.sm[m, 2], "capacity": cap, "wait_ns": t.sm[m, 3], "tid": sm_tid[m]})


def _info(t: RawTables, unmatched: int, outside: int, step_tid: int, n_steps: int) -> dict:
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
        "config": meta.get("config", {}),
        "recording": {
            "events": events,
            "dropped_events": max(int(t.dropped), int(end.get("dropped_events", 0))),
            "dropped_reason": "memory budget or failed write" if t.dropped else "",
            "events_outside_windows": outside,
            "unmatched_span_events": int(unmatched),
            "torn_chunks": int(t.torn_chunks),
            "stopped_cleanly": bool(end.get("stopped_cleanly", False)),
            "memory_budget_bytes": meta.get("config", {}).get("memory_budget_bytes"),
            "raw_files": t.files,
        },
        "overhead": {"per_event_ns": meta.get("per_event_cost_ns", 0.0),
                     "flush_ms": end.get("flush_ms")},
        "step_tid": step_tid,
        "steps": {"count": n_steps},
        "warnings": warnings,
    }
