"""Writing an AscendJob in the MindSpore/MindInsight 2020 profiler output formats.

The formatters are pure (job in, text out) and reproduce the 2020 parser's arithmetic exactly:
per-execution float ms, sequential float sums, exact decimal sums where it used `Decimal`,
half-even rounding, CRLF line ends for files it wrote with the csv module (RAW_FORMATS.md 5-7).
"""

from __future__ import annotations

import csv
import decimal
import io
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.export.files import write_atomic
from profiler.importers.ascend.device_run import lookup, op_type_from_name
from profiler.importers.ascend.job import AscendJob

#: Syscnt ticks per ms, the 2020 parser's unit conversion factor.
TICKS_PER_MS = 1e5
#: Timeline pid of the all-reduce lanes.
REDUCE_PID = 10000
STEP_TRACE_BASE_COLUMNS = [
    "step_num",
    "start_point",
    "end_point",
    "total",
    "fp_point",
    "bp_point",
    "iteration_interval",
    "fp_and_bp",
    "tail",
]


def _csv_text(rows: list[list]) -> str:
    """Rows as Python csv-module text (excel dialect: CRLF, minimal quoting, None as empty)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def _sequential_sums(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the float sum of its values added one by one in order (as a Python loop would)."""
    order = np.argsort(groups, kind="stable")
    ordered = values[order]
    bounds = np.searchsorted(groups[order], np.arange(n_groups + 1))
    return np.array([np.cumsum(ordered[a:b])[-1] if b > a else 0.0 for a, b in zip(bounds[:-1], bounds[1:])])


def _op_order(executions: pd.DataFrame) -> np.ndarray:
    """Per execution, its op's rank in order of first execution (the 2020 parser's op order)."""
    first_ops = executions.drop_duplicates("op")["op"].to_numpy()
    return pd.Series(np.arange(len(first_ops)), index=first_ops).loc[executions["op"].to_numpy()].to_numpy()


def op_statistics(job: AscendJob) -> pd.DataFrame:
    """Per op in order of first execution: full_name, stream_id, count, total_ms, avg_ms.

    count is the number of executions under the op's first-seen task key, and stream the
    stream of its first execution, as in the 2020 parser.
    """
    ex = job.executions
    first = ex.drop_duplicates("op")
    group = _op_order(ex)
    dur_ms = ex["dur"].to_numpy() / TICKS_PER_MS
    total = _sequential_sums(group, dur_ms, len(first))
    same_key = ex["key"].to_numpy() == first["key"].to_numpy()[group]
    count = np.bincount(group[same_key], minlength=len(first))
    return pd.DataFrame(
        {
            "full_name": [job.op_names[i] for i in first["op"].tolist()],
            "stream_id": first["stream_id"].to_numpy(),
            "count": count,
            "total_ms": total,
            "avg_ms": total / count,
        }
    )


def timeline_rows(job: AscendJob, ops: pd.DataFrame) -> pd.DataFrame:
    """Every execution as (full_name, stream_id, start_ms, dur_ms), stable-sorted by start_ms.

    Rows start grouped by op (op order, then execution order) before the sort, which decides ties.
    """
    ex = job.executions
    group = _op_order(ex)
    start_ms = ex["start"].to_numpy() / TICKS_PER_MS
    order = np.lexsort((np.arange(len(ex)), group, start_ms))
    return pd.DataFrame(
        {
            "full_name": ops["full_name"].to_numpy()[group[order]],
            "stream_id": ops["stream_id"].to_numpy()[group[order]],
            "start_ms": start_ms[order],
            "dur_ms": ex["dur"].to_numpy()[order] / TICKS_PER_MS,
        }
    )


def min_cycle_counter(job: AscendJob) -> float:
    """The smallest execution start (ticks, as float), ignoring ops named `assign...`; inf without any."""
    assign_op = np.array([n.startswith("assign") for n in job.op_names], dtype=bool)
    counted = ~assign_op[job.executions["op"].to_numpy()]
    starts = job.executions["start"].to_numpy()[counted]
    return float(starts.min()) if len(starts) else float("inf")


def step_trace_table(job: AscendJob) -> tuple[list[str], np.ndarray]:
    """The step-trace header and int rows (one a step). Reduce columns are those of the first step;
    later steps' values for them (0 when absent) fill in, other reduce pairs are not shown."""
    s = job.steps
    base = np.column_stack(
        [
            s["step_num"],
            s["start"],
            s["end"],
            s["end"] - s["start"],
            s["fp"],
            s["bp"],
            s["fp"] - s["start"],
            s["bp"] - s["fp"],
            s["end"] - s["bp"],
        ]
    ).astype(np.int64)
    r = job.reduces
    first = r[r["step_num"] == s["step_num"].iloc[0]] if len(s) else r.iloc[:0]
    header = list(STEP_TRACE_BASE_COLUMNS)
    for sid, k in zip(first["stream_id"].tolist(), first["k"].tolist()):
        name = f"stream_{sid}_parallel_{k}"
        header += [f"{name}_start_point", f"{name}_end_point", name]
    block = pd.Series(
        np.arange(len(first)), index=pd.MultiIndex.from_arrays([first["stream_id"], first["k"]]), dtype=np.int64
    )
    found = block.reindex(pd.MultiIndex.from_arrays([r["stream_id"], r["k"]])).to_numpy()
    row = np.searchsorted(s["step_num"].to_numpy(), r["step_num"].to_numpy())
    shown = ~np.isnan(found)
    reduce_cells = np.zeros((len(s), 3 * len(first)), dtype=np.int64)
    col = 3 * found[shown].astype(np.int64)
    start, end = r["start"].to_numpy()[shown], r["end"].to_numpy()[shown]
    for offset, values in enumerate((start, end, end - start)):
        reduce_cells[row[shown], col + offset] = values
    return header, np.hstack([base, reduce_cells])


def _half_even_average(rows: np.ndarray) -> np.ndarray:
    """Column averages of `rows`, exactly rounded half-to-even to ints."""
    total, n = rows.sum(axis=0), len(rows)
    q, r = np.divmod(total, n)
    return q + ((2 * r > n) | ((2 * r == n) & (q % 2 == 1)))


def step_trace_csv(job: AscendJob) -> str:
    """step_trace_raw_<dev>_detail_time.csv: one row a step, then the average of rows 2..N."""
    header, rows = step_trace_table(job)
    if len(rows) >= 2:
        average = ["-"] + _half_even_average(rows[1:])[1:].tolist()
    else:
        average = [0] * len(header)
    return _csv_text([header] + rows.tolist() + [average])


def point_info_json(job: AscendJob) -> str:
    """step_trace_point_info.json: the FP-start and BP-end op names."""
    return json.dumps({"fp_start": job.points.get(1, ""), "bp_end": job.points.get(2, "")})


def op_compute_time_txt(ops: pd.DataFrame) -> str:
    """output_op_compute_time_<dev>.txt: per-op average ms and stream, then their float total."""
    lines = [
        "====================op compute time====================",
        "op_name       compute_time(ms) stream_id",
        "------------  ---------------  ---------",
    ]
    lines += [f"{n} {a!r}  {s}" for n, a, s in zip(ops["full_name"], ops["avg_ms"].tolist(), ops["stream_id"])]
    lines.append(f"total op  {_float_total(ops['avg_ms'])!r} 0")
    return "\n".join(lines) + "\n"


def _float_total(values: pd.Series) -> float:
    """Sequential float sum (the order-dependent sum the 2020 parser printed)."""
    return float(np.cumsum(values.to_numpy())[-1]) if len(values) else 0.0


def timeline_data_txt(rows: pd.DataFrame) -> str:
    """output_timeline_data_<dev>.txt: one `name,stream,start_ms,dur_ms` line an execution."""
    lines = ["op_name, stream_id, start_time(ms), duration(ms)"]
    lines += [
        f"{n},{s},{b!r},{d!r}"
        for n, s, b, d in zip(
            rows["full_name"], rows["stream_id"].tolist(), rows["start_ms"].tolist(), rows["dur_ms"].tolist()
        )
    ]
    return "\n".join(lines) + "\n"


def aicore_detail_csv(ops: pd.DataFrame) -> str:
    """aicore_intermediate_<dev>_detail.csv: per-op average ms."""
    return _csv_text(
        [["full_op_name", "execution_time"]] + [[n, repr(a)] for n, a in zip(ops["full_name"], ops["avg_ms"].tolist())]
    )


def _op_types(job: AscendJob, names: pd.Series) -> pd.Series:
    """graph_desc op type of each full name (guessed from the name when undescribed)."""
    described = job.graph.drop_duplicates("full_name", keep="last").set_index("full_name")["op_type"]
    return lookup(names, described, op_type_from_name)


def aicore_type_csv(job: AscendJob, ops: pd.DataFrame) -> str:
    """aicore_intermediate_<dev>_type.csv: per op type, the exact decimal sum of its ops' averages,
    the number of distinct ops and the share of the total (half-even, 2 places)."""
    types = _op_types(job, ops["full_name"])
    averages = [Decimal(repr(a)) for a in ops["avg_ms"].tolist()]
    rows = [["op_type", "execution_time", "execution_frequency", "percent"]]
    with decimal.localcontext(decimal.Context(prec=28)):
        total = Decimal(repr(_float_total(ops["avg_ms"])))
        for op_type, members in pd.Series(range(len(ops))).groupby(types.to_numpy(), sort=False):
            time = sum((averages[i] for i in members), Decimal(0))
            share = time / total * 100 if total else Decimal(0)  # no time at all: every record at one syscnt
            rows.append([op_type, str(time), len(members), str(round(share, 2))])
    return _csv_text(rows)


def short_op_name(full_name: str, backend: str) -> str:
    """framework_raw's op_name: the last scope component (vm), or the components after each
    `Default/` / `Gradients/` joined by `+` (ge); the full name outside those subgraphs."""
    subgraph = full_name.split("/", 1)[0]
    if subgraph not in ("Default", "Gradients"):
        return full_name
    if backend == "vm":
        return full_name.split("/")[-1]
    return "+".join(part.split("/")[-1] for part in full_name.split(subgraph + "/") if part)


def framework_raw_csv(job: AscendJob) -> str:
    """framework_raw_<dev>.csv: graph_desc ops joined with their task_desc line, then task-only ops."""
    tasks = {
        n: [t, s, b]
        for n, b, t, s in job.tasks[["full_name", "block_dim", "task_id", "stream_id"]].itertuples(index=False)
    }
    rows = [["task_id", "stream_id", "block_dim", "full_op_name", "op_name", "op_type", "subgraph", "op_info"]]
    for name, op_type, op_info in job.graph.itertuples(index=False):
        subgraph = name.split("/", 1)[0]
        rows.append(
            tasks.pop(name, ["", "", ""])
            + [
                name,
                short_op_name(name, job.backend),
                op_type,
                subgraph if subgraph in ("Default", "Gradients") else "",
                json.dumps(op_info),
            ]
        )
    rows += [task + [name, "", "", "", ""] for name, task in tasks.items()]
    return _csv_text(rows)


def timeline_events(job: AscendJob, rows: pd.DataFrame, min_counter: float) -> list[dict]:
    """timeline_display events: executions and step-trace all-reduce intervals, stable-sorted by start."""
    graph = job.graph.drop_duplicates("full_name", keep="last").set_index("full_name")
    events, starts = [], []
    for name, stream, start_ms, dur_ms in rows[["full_name", "stream_id", "start_ms", "dur_ms"]].itertuples(
        index=False
    ):
        event = {"name": name, "ph": "X", "tid": int(stream), "ts": 0.0, "dur": dur_ms * 1000, "pid": job.device_id}
        if name in graph.index:
            event["name"] = short_op_name(name, job.backend)
            event["args"] = {"type": graph.at[name, "op_type"], "fullname": name, **graph.at[name, "op_info"]}
        events.append(event)
        starts.append(start_ms)
    header, table = step_trace_table(job)
    duration_cols = np.arange(len(STEP_TRACE_BASE_COLUMNS) + 2, len(header), 3)
    start_points, durations = table[:, duration_cols - 2], table[:, duration_cols]
    for row, block in np.argwhere((start_points != 0) & (durations != 0)).tolist():
        name = header[duration_cols[block]]
        events.append(
            {
                "name": name,
                "ph": "X",
                "tid": int(name.split("_")[1]),
                "ts": 0.0,
                "dur": int(durations[row, block]) / TICKS_PER_MS * 1000,
                "pid": REDUCE_PID,
            }
        )
        starts.append(int(start_points[row, block]) / TICKS_PER_MS)
    min_ms = min_counter / TICKS_PER_MS
    order = np.argsort(np.array(starts, dtype=np.float64), kind="stable")
    for i in order.tolist():
        events[i]["ts"] = (starts[i] - min_ms) * 1000
    return [events[i] for i in order.tolist()]


def timeline_display_json(events: list[dict]) -> str:
    """timeline_display_<dev>.json: the events as `[` + comma-joined JSON objects + `]`."""
    return "[" + ",".join(json.dumps(e) for e in events) + "]"


def timeline_summary_json(events: list[dict], ops: pd.DataFrame, n_executions: int) -> str:
    """timeline_summary_<dev>.json: summed op time (µs), op streams, ops and executions."""
    op_events = [e for e in events if e["pid"] != REDUCE_PID]
    total = 0.0
    for event in op_events:
        total += event["dur"]
    return json.dumps(
        {
            "total_time": total,
            "num_of_streams": len({e["tid"] for e in op_events}),
            "num_of_ops": len(ops),
            "op_exe_times": n_executions,
        }
    )


def mindspore_outputs(job: AscendJob) -> dict[str, str]:
    """Every MindSpore-format file the job's data supports, as {file name: text}."""
    dev = job.device_id
    files = {}
    if len(job.steps):
        files[f"step_trace_raw_{dev}_detail_time.csv"] = step_trace_csv(job)
    if job.points:
        files["step_trace_point_info.json"] = point_info_json(job)
    if len(job.executions):
        ops = op_statistics(job)
        rows = timeline_rows(job, ops)
        counter = min_cycle_counter(job)
        events = timeline_events(job, rows, counter)
        files.update(
            {
                f"aicore_intermediate_{dev}_type.csv": aicore_type_csv(job, ops),
                f"aicore_intermediate_{dev}_detail.csv": aicore_detail_csv(ops),
                f"output_op_compute_time_{dev}.txt": op_compute_time_txt(ops),
                f"output_timeline_data_{dev}.txt": timeline_data_txt(rows),
                f"min_cycle_counter_{dev}.txt": repr(counter),
                f"timeline_display_{dev}.json": timeline_display_json(events),
                f"timeline_summary_{dev}.json": timeline_summary_json(events, ops, len(job.executions)),
            }
        )
    if len(job.graph) or len(job.tasks):
        files[f"framework_raw_{dev}.csv"] = framework_raw_csv(job)
    return files


def write_mindspore_outputs(job: AscendJob, out_dir: str | Path) -> list[Path]:
    """Write the job's MindSpore/MindInsight-format files into `out_dir` (created if needed, each file
    atomically); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_atomic(out_dir / name, text.encode("utf-8")) for name, text in mindspore_outputs(job).items()]
