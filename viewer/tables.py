"""The report's sortable tables: a table's rows travel as an escaped JSON payload, and the page's script
sorts, filters (by text and by device) and pages them (viewer/assets)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from viewer.context import Context
from viewer.html import esc

#: The collectives table's columns (comm_ops csv), on the Kernels page and per rank on the Cluster page.
COMM_OP_COLUMNS = [
    ("name", "collective", "text"),
    ("calls", "calls", "int"),
    ("total_bytes", "total bytes", "int"),
    ("mean_bytes", "mean bytes", "num"),
    ("total_ms", "total latency ms", "num"),
    ("mean_ms", "mean latency ms", "num"),
]


def sortable_table(
    ctx: Context, frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]], sort: str, placeholder: str
) -> str:
    """`frame`'s `columns` ((column, header, kind "text" / "int" / "num"); absent ones left out), sorted by
    `sort` descending at first, with a text filter, and a device filter over its "device" column if it has one."""
    present = [(c, h, k) for c, h, k in columns if c in frame.columns]
    names = [c for c, _, _ in present]
    rows = frame[names].astype(object)
    payload = {
        "columns": [h for _, h, _ in present],
        "kinds": [k for _, _, k in present],
        "rows": rows.where(rows.notna(), "").to_numpy().tolist(),
        "limit": ctx.options.table_rows,
        "sort": names.index(sort),
        "device": names.index("device") if "device" in names else -1,
    }
    source = ctx.data(payload)
    select = ""
    if "device" in names:
        options = '<option value="">all devices</option>' + "".join(
            f'<option value="{esc(d)}">{esc(d)}</option>' for d in sorted(frame["device"].astype(str).unique())
        )
        select = f'<select aria-label="device">{options}</select>'
    return (
        f'<div class="sortable" data-source="{source}"><div class="table-tools">'
        f'<input type="search" placeholder="{esc(placeholder)}" aria-label="filter">'
        f'{select}<span class="count"></span></div>'
        f'<div class="table-scroll"><table class="data sortable"><thead></thead><tbody></tbody></table></div></div>'
    )
