"""Comparison of two analysed runs, BASE -> NEW: where the step time moved, and a verdict for CI.

Pure: each side is a `RunTables` (the tables a profview output directory holds: step trace,
op tables, queue summary, report), the result a `Comparison` of small tables and a JSON-ready
verdict. Step-time figures are medians over the analysed steps (the advisor's warm-up steps
left out), because one slow step (a checkpoint, a GC pause) must not decide a comparison; op
times are per step (the two runs may have recorded different numbers of steps) and as totals.

Deltas are NEW - BASE: negative is faster.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from profiler import formats
from profiler.analysis.advisor import DEFAULT_THRESHOLDS
from profiler.analysis.steps import analysed_steps

#: step-trace columns compared, with their labels
PHASES: list[tuple[str, str]] = [*formats.PHASES, formats.ALL_REDUCE, formats.DATA_WAIT, formats.PROFILER_OVERHEAD,
                                 formats.STEP_TOTAL]
#: queue statistics compared (queue_summary "queues" entries)
QUEUE_STATS = ("empty_ratio", "full_ratio", "mean_size", "get_wait_ms")
#: a median step change smaller than this (in %) is "unchanged"
DEFAULT_NOISE_PCT = 2.0
QUANTILES = {"p5": 5, "p25": 25, "median": 50, "p75": 75, "p95": 95}


@dataclass(frozen=True)
class RunTables:
    """One side of a comparison: what an analysed run's output directory holds (absent: None)."""

    label: str
    step_trace: pd.DataFrame
    op_type: Optional[pd.DataFrame] = None
    op_detail: Optional[pd.DataFrame] = None
    queue_summary: Optional[Mapping[str, Any]] = None
    report: Optional[Mapping[str, Any]] = None
    warmup_steps: int = int(DEFAULT_THRESHOLDS["warmup_steps"])

    def steps(self) -> pd.DataFrame:
        """The analysed steps (warm-up left out, as the advisor does)."""
        return analysed_steps(self.step_trace, self.warmup_steps)[0]

    @property
    def step_count(self) -> int:
        """Every recorded step: the op tables' totals cover them all."""
        return max(len(self.step_trace), 1)


@dataclass
class Comparison:
    """Everything `profview compare` reports; `to_json` is the machine-readable form."""

    base: str
    new: str
    verdict: dict[str, Any]
    phases: pd.DataFrame
    distribution: pd.DataFrame
    op_types: pd.DataFrame
    ops: pd.DataFrame
    queues: pd.DataFrame
    findings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_json(self, top: int = 20) -> dict[str, Any]:
        """The verdict and every table (op tables cut to the `top` largest changes)."""
        return {"schema_version": 1, "base": self.base, "new": self.new, "verdict": self.verdict,
                "phases": _records(self.phases), "step_time_distribution": _records(self.distribution),
                "op_types": _records(self.op_types.head(top)), "ops": _records(self.ops.head(top)),
                "queues": _records(self.queues), "findings": self.findings}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in df.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and v != v else
                        round(float(v), 4) if isinstance(v, (float, np.floating)) else
                        int(v) if isinstance(v, (np.integer,)) else v) for k, v in row.items()})
    return out


def _pct_change(base: np.ndarray | float, new: np.ndarray | float) -> np.ndarray | float:
    """100 * (new - base) / base; NaN where base is 0."""
    base_arr = np.asarray(base, dtype=np.float64)
    delta = np.asarray(new, dtype=np.float64) - base_arr
    out = np.divide(100.0 * delta, base_arr, out=np.full(base_arr.shape, np.nan), where=base_arr != 0)
    return out if out.ndim else float(out)


# ----------------------------------------------------------------------------- step time


def phase_deltas(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per phase: median and mean in each run, the median's change, and its share of the mean step."""
    rows = []
    for col, label in PHASES:
        if col not in base or col not in new:
            continue
        b, n = base[col].to_numpy(np.float64), new[col].to_numpy(np.float64)
        rows.append({"phase": label, "column": col, "base_median_ms": float(np.median(b)),
                     "new_median_ms": float(np.median(n)), "base_mean_ms": float(b.mean()),
                     "new_mean_ms": float(n.mean()),
                     "base_share_pct": 100.0 * b.sum() / (base["total_ms"].sum() or 1.0),
                     "new_share_pct": 100.0 * n.sum() / (new["total_ms"].sum() or 1.0)})
    table = pd.DataFrame(rows)
    table["delta_ms"] = table["new_median_ms"] - table["base_median_ms"]
    table["delta_pct"] = _pct_change(table["base_median_ms"].to_numpy(), table["new_median_ms"].to_numpy())
    return table


def step_distribution(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Step-time quantiles, mean, spread and count of each run, one row per statistic."""
    def stats(steps: pd.DataFrame) -> dict[str, float]:
        t = steps["total_ms"].to_numpy(np.float64)
        out = {name: float(np.percentile(t, q)) for name, q in QUANTILES.items()}
        return {"steps": float(len(t)), "min": float(t.min()), **out, "max": float(t.max()),
                "mean": float(t.mean()), "std": float(t.std())}

    b, n = stats(base), stats(new)
    table = pd.DataFrame({"statistic": list(b), "base_ms": list(b.values()), "new_ms": [n[k] for k in b]})
    table["delta_ms"] = table["new_ms"] - table["base_ms"]
    return table


def verdict(base: pd.DataFrame, new: pd.DataFrame, fail_if_slower_pct: Optional[float] = None,
            noise_pct: float = DEFAULT_NOISE_PCT) -> dict[str, Any]:
    """faster / slower / unchanged by the median step, and whether the CI gate fails (exit code 1)."""
    b, n = float(base["total_ms"].median()), float(new["total_ms"].median())
    change = _pct_change(b, n)
    outcome = "faster" if change <= -noise_pct else "slower" if change >= noise_pct else "unchanged"
    failed = fail_if_slower_pct is not None and change > fail_if_slower_pct
    return {"base_median_step_ms": round(b, 4), "new_median_step_ms": round(n, 4), "delta_ms": round(n - b, 4),
            "delta_pct": round(change, 3), "outcome": outcome, "noise_pct": noise_pct,
            "fail_if_slower_pct": fail_if_slower_pct, "failed": bool(failed), "exit_code": 1 if failed else 0,
            "base_steps": int(len(base)), "new_steps": int(len(new))}


# ----------------------------------------------------------------------------- ops


def op_deltas(base: Optional[pd.DataFrame], new: Optional[pd.DataFrame], key: list[str],
              base_steps: int, new_steps: int) -> pd.DataFrame:
    """Per `key` (device + op_type, or device + name): counts, totals, per-step times and their change.

    status is `both`, `new` (only in NEW) or `gone` (only in BASE); rows are ordered by the
    absolute per-step change, largest first.
    """
    cols = key + ["count", "total_ms", "self_ms"]
    empty = pd.DataFrame(columns=cols)
    b = _op_side(base if base is not None else empty, cols)
    n = _op_side(new if new is not None else empty, cols)
    if "device" in key:
        b["device"], n["device"] = same_devices(b["device"], n["device"])
    merged = b.merge(n, on=key, how="outer", suffixes=("_base", "_new"), indicator=True)
    out = merged[key].copy()
    for side, steps in (("base", base_steps), ("new", new_steps)):
        out[f"{side}_count"] = merged[f"count_{side}"].fillna(0).astype(np.int64)
        out[f"{side}_total_ms"] = merged[f"total_ms_{side}"].fillna(0.0)
        out[f"{side}_self_ms"] = merged[f"self_ms_{side}"].fillna(0.0)
        out[f"{side}_per_step_ms"] = out[f"{side}_self_ms"] / steps
    out["delta_total_ms"] = out["new_total_ms"] - out["base_total_ms"]
    out["delta_per_step_ms"] = out["new_per_step_ms"] - out["base_per_step_ms"]
    out["delta_pct"] = _pct_change(out["base_per_step_ms"].to_numpy(), out["new_per_step_ms"].to_numpy())
    out["status"] = merged["_merge"].map({"both": "both", "left_only": "gone", "right_only": "new"}).astype(str)
    order = out["delta_per_step_ms"].abs().sort_values(ascending=False, kind="stable").index
    return out.loc[order].reset_index(drop=True)


def same_devices(base: pd.Series, new: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Device names made comparable: a kind with one device on each side compares by kind.

    A single-GPU job recorded on cuda:3 and again on cuda:1 is the same job: both become
    `cuda`. With several devices of a kind on either side the names are kept as they are.
    """
    def single(devices: pd.Series) -> dict[str, str]:
        kinds = pd.Series(devices.unique()).str.split(":").str[0]
        counts = kinds.value_counts()
        return {d: k for d, k in zip(devices.unique(), kinds) if ":" in d and counts[k] == 1}

    b, n = single(base), single(new)
    shared = set(b.values()) & set(n.values())
    return (base.map(lambda d: b[d] if b.get(d) in shared else d),
            new.map(lambda d: n[d] if n.get(d) in shared else d))


def _op_side(table: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """The columns a delta needs; `self_ms` falls back to `total_ms` for tables written without it."""
    t = table.copy()
    if "self_ms" not in t:
        t["self_ms"] = t["total_ms"]
    for c in cols[-3:]:
        t[c] = pd.to_numeric(t[c])
    keys = cols[:-3]
    t[keys] = t[keys].astype(str)
    return t[cols].groupby(keys, as_index=False, sort=True).sum()


# ----------------------------------------------------------------------------- queues and findings


def _queue_rows(summary: Optional[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    rows = summary.get("queues") if isinstance(summary, Mapping) else None
    return {str(r.get("queue")): r for r in rows or [] if isinstance(r, Mapping)}


def queue_deltas(base: Optional[Mapping[str, Any]], new: Optional[Mapping[str, Any]]) -> pd.DataFrame:
    """Per probed queue: empty / full ratios, mean size and get wait in each run; the verdicts as a row `(verdict)`."""
    b, n = _queue_rows(base), _queue_rows(new)
    rows = []
    for name in sorted(set(b) | set(n)):
        row: dict[str, Any] = {"queue": name}
        for stat in QUEUE_STATS:
            row[f"base_{stat}"] = b.get(name, {}).get(stat)
            row[f"new_{stat}"] = n.get(name, {}).get(stat)
        rows.append(row)
    kinds = [(s.get("verdict") or {}).get("kind") if isinstance(s, Mapping) else None for s in (base, new)]
    if any(kinds):
        rows.append({"queue": "(verdict)", "base_verdict": kinds[0], "new_verdict": kinds[1]})
    return pd.DataFrame(rows)


def finding_key(finding: Mapping[str, Any]) -> str:
    """What makes two findings the same problem: the advisor's key, else kind (+ rank)."""
    key = finding.get("key") or finding.get("kind", "")
    return f"{key}@rank{finding['rank']}" if finding.get("rank") is not None else str(key)


#: findings that count as problems in a comparison; low ones are information (where compute goes)
PROBLEM_SEVERITIES = ("high", "medium")


def _findings(report: Optional[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    items = report.get("findings") if isinstance(report, Mapping) else None
    return {finding_key(f): f for f in items or []
            if isinstance(f, Mapping) and f.get("severity") in PROBLEM_SEVERITIES}


def finding_changes(base: Optional[Mapping[str, Any]], new: Optional[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Problems (high / medium findings) resolved (BASE only), introduced (NEW only) and persisting (both)."""
    b, n = _findings(base), _findings(new)

    def brief(f: Mapping[str, Any]) -> dict[str, Any]:
        return {k: f.get(k) for k in ("kind", "severity", "title", "at_stake_ms", "at_stake_pct")}

    persisting = [{**brief(n[k]), "key": k, "base_severity": b[k].get("severity"),
                   "base_at_stake_ms": b[k].get("at_stake_ms")} for k in n if k in b]
    return {"resolved": [{**brief(b[k]), "key": k} for k in b if k not in n],
            "introduced": [{**brief(n[k]), "key": k} for k in n if k not in b],
            "persisting": persisting,
            "verdicts": [(base or {}).get("verdict"), (new or {}).get("verdict")]}


# ----------------------------------------------------------------------------- all of it


def compare_runs(base: RunTables, new: RunTables, fail_if_slower_pct: Optional[float] = None,
                 noise_pct: float = DEFAULT_NOISE_PCT) -> Comparison:
    """BASE -> NEW: phases, step-time distribution, op types, ops, queues, findings and the verdict."""
    b_steps, n_steps = base.steps(), new.steps()
    return Comparison(
        base=base.label, new=new.label,
        verdict=verdict(b_steps, n_steps, fail_if_slower_pct, noise_pct),
        phases=phase_deltas(b_steps, n_steps),
        distribution=step_distribution(b_steps, n_steps),
        op_types=op_deltas(base.op_type, new.op_type, ["device", "op_type"], base.step_count, new.step_count),
        ops=op_deltas(base.op_detail, new.op_detail, ["device", "name"], base.step_count, new.step_count),
        queues=queue_deltas(base.queue_summary, new.queue_summary),
        findings=finding_changes(base.report, new.report),
    )


def parse_percent(text: str) -> float:
    """`5%`, `5` or `0.5 %` -> 5.0, 5.0, 0.5 (for --fail-if-slower); ValueError for anything else,
    a percentage that is not a finite number (nan, inf, 1e400) included."""
    text = str(text).strip()
    if text.endswith("%"):
        text = text[:-1].strip()
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value
