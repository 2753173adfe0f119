"""Recording windows (docs/architecture.md, "The raw store"): where a rank recorded, from its window_start /
window_stop samples, and windows whose start or end a damaged chunk or the memory budget lost, repaired;
for the batch reader (`load.py`), the follower's windows (`follow.py`) and their interpretation."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler.kernels.intervals import place
from profiler.store import kinds
from profiler.store.tables import RawTables, descriptor_columns

INT64_MAX = np.iinfo(np.int64).max


def windows_from_samples(sm: np.ndarray, kind_of: np.ndarray) -> pd.DataFrame:
    """Recording windows [start_ns, stop_ns) with their first step, from window_start / window_stop
    samples. A window ends at the first stop after its start, or where the next window starts when
    its stop was lost."""
    k = kind_of[sm[:, 1] >> 1] if len(sm) else np.empty(0, dtype=object)
    starts = sm[k == kinds.WINDOW_START]
    stops = sm[k == kinds.WINDOW_STOP]
    starts = starts[np.argsort(starts[:, 0], kind="stable")]
    stops = stops[np.argsort(stops[:, 0], kind="stable")]
    stop_t = np.full(len(starts), INT64_MAX, dtype=np.int64)
    if len(stops) and len(starts):
        idx = np.searchsorted(stops[:, 0], starts[:, 0], side="left")
        ok = idx < len(stops)
        stop_t[ok] = stops[idx[ok], 0]
    if len(starts) > 1:
        stop_t[:-1] = np.minimum(stop_t[:-1], starts[1:, 0])
    return pd.DataFrame({"start_ns": starts[:, 0], "stop_ns": stop_t, "first_step": starts[:, 2]})


def window_of(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Index of the window [start, stop] containing each time (int32), -1 when outside every window."""
    return place(
        t,
        windows["start_ns"].to_numpy(dtype=np.int64),
        windows["stop_ns"].to_numpy(dtype=np.int64),
        np.arange(len(windows), dtype=np.int32),
        end_inclusive=True,
    )


def repair_windows(t: RawTables) -> None:
    """Recording windows whose start was lost (its sample sat in a damaged chunk, or the memory
    budget dropped it) get one back, at the first record after the previous window's end, so the
    loss costs that sample and not the whole window. A window whose end was lost ends where the
    next one starts (windows_from_samples)."""
    if not t.records:
        return
    kind_of = descriptor_columns(t.descriptors)[0]
    k = kind_of[t.sm[:, 1] >> 1] if len(t.sm) else np.empty(0, dtype=object)
    starts = np.sort(t.sm[k == kinds.WINDOW_START, 0])
    stops = np.sort(t.sm[k == kinds.WINDOW_STOP, 0])
    other_sm = t.sm[(k != kinds.WINDOW_START) & (k != kinds.WINDOW_STOP), 0]

    def first_record(after: int, until: int) -> Optional[int]:
        best = None
        for times in [c[:, 0] for c in t.events] + [other_sm]:
            sel = times[(times > after) & (times <= until)]
            if len(sel):
                best = int(sel.min()) if best is None else min(best, int(sel.min()))
        return best

    added, lost_stops = [], 0
    prev_stop = -(1 << 63)
    for stop in stops:
        opened = starts[(starts > prev_stop) & (starts <= stop)]
        if not len(opened):
            at = first_record(prev_stop, int(stop))
            if at is not None:
                added.append(at)
        elif len(opened) > 1:
            lost_stops += len(opened) - 1
        prev_stop = int(stop)
    if not len(starts) and not len(stops):
        at = first_record(-(1 << 63), INT64_MAX)
        if at is not None:
            added.append(at)
    if added:
        code = 2 * _descriptor_id(t, (kinds.WINDOW_START, "window", ""))
        thread = int(t.sm_thread[0]) if len(t.sm_thread) else int(t.ev_chunk_thread[0])
        extra = np.array([[at, code, -1, 0] for at in added], dtype=np.int64)
        t.sm = np.concatenate([t.sm, extra])
        t.sm_thread = np.concatenate([t.sm_thread, np.full(len(added), thread, np.int64)])
        t.warnings.append(
            f"{len(added)} recording-window start(s) were lost (a damaged chunk or the memory budget "
            "took them): each such window is taken to start at its first record"
        )
    if lost_stops:
        t.warnings.append(
            f"{lost_stops} recording-window end(s) were lost: each such window is taken to end "
            "where the next one starts"
        )


def _descriptor_id(t: RawTables, key: tuple[str, str, str]) -> int:
    try:
        return t.descriptors.index(key)
    except ValueError:
        t.descriptors.append(key)
        return len(t.descriptors) - 1
