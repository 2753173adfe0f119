"""Comparison of two analysed runs, BASE -> NEW: where the step time moved, and a verdict for CI.

Pure: each side is a `RunTables` (the tables a profview output directory holds: step trace,
op tables, queue summary, report), the result a `Comparison` of small tables and a JSON-ready
verdict.

How the verdict decides (docs/tuning-guide.md, "How compare decides"): by the **mean step of the
analysed steps** (the advisor's warm-up steps left out), i.e. the loop's wall time per step,
because that is what a user waits for: a change that only speeds up the slow half of
alternating fast / slow steps moves the mean and the wall time but not the median. The
uncertainty is a 95 % interval of the mean's change from a seeded circular block bootstrap
(blocks of consecutive steps sized from the step times' autocorrelation, so alternating,
periodic and drifting step times are resampled with their neighbours; 2 000 resamples; an
expanded percentile interval, so that few steps give a wider interval, not a falsely narrow
one; the same inputs always give the same interval). A change is significant when the interval
excludes 0 and the change is at least the noise floor (2 % of BASE's mean step). Medians and
quantiles stay as evidence in the tables.

Op times are self time per step *that captured ops* (`op_count > 0` in the step trace; op
capture may run on a few steps only, `ops_schedule`), and totals; an older step trace without
`op_count` divides by all recorded steps, and says so (`op_steps`).

Deltas are NEW - BASE: negative is faster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.advisor import DEFAULT_THRESHOLDS, share_pct
from profiler.analysis.steps import analysed_steps
from profiler.formats import columns

#: version of the compare JSON (`Comparison.to_json`); 2: the verdict decides by the mean with an interval
COMPARE_SCHEMA_VERSION = 2
#: step-trace columns compared, with their labels (the step itself last)
PHASES: list[tuple[str, str]] = [
    *columns.PHASES,
    columns.ALL_REDUCE,
    columns.DATA_WAIT,
    columns.GAP_HOST,
    columns.PROFILER_OVERHEAD,
    columns.STEP_TOTAL,
]
STEP = columns.STEP_TOTAL[0]
DATA_WAIT, GAP_HOST = columns.DATA_WAIT[0], columns.GAP_HOST[0]
#: queue statistics compared (queue_summary "queues" entries)
QUEUE_STATS = ("empty_ratio", "full_ratio", "mean_size", "get_wait_ms")
#: a mean step change smaller than this (in % of BASE's mean step) is not significant, whatever the interval
DEFAULT_NOISE_PCT = 2.0
QUANTILES = {"p5": 5, "p25": 25, "median": 50, "p75": 75, "p95": 95}
#: the interval of the mean step change
CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_RESAMPLES, MAX_DRAWS = 400, 40_000_000
SEED = 0
#: fewer analysed steps than this in a run: no interval, the verdict is the mean's change alone
MIN_STEPS_FOR_INTERVAL = 5
#: fewer analysed steps than this: too few to estimate how step times depend on their neighbours,
#: the bootstrap resamples single steps (blocks of 1)
BLOCK_MIN_STEPS = 20
#: the three outcomes
FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no significant change"
OP_COUNT, STEP_START = columns.OP_COUNT, columns.STEP_START


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
        """Every recorded step (the op tables' totals cover them all)."""
        return max(len(self.step_trace), 1)

    def op_steps(self) -> dict[str, Any]:
        """How many steps the op tables' totals cover: the steps that captured ops (see `op_steps`)."""
        return op_steps(self.step_trace)


def op_steps(step_trace: pd.DataFrame) -> dict[str, Any]:
    """The steps op figures are divided by: those with `op_count > 0`, else (no such column or no
    step with ops) every recorded step. `basis` says which, `note` says why in words."""
    recorded = max(len(step_trace), 1)
    if OP_COUNT not in step_trace:
        return {
            "steps": recorded,
            "recorded_steps": recorded,
            "basis": "all_steps",
            "note": f"the step trace has no {OP_COUNT} column (an older output): divided by all {recorded} steps",
        }
    captured = int((pd.to_numeric(step_trace[OP_COUNT], errors="coerce").fillna(0) > 0).sum())
    if captured == 0:
        return {
            "steps": recorded,
            "recorded_steps": recorded,
            "basis": "all_steps",
            "note": f"no step has ops ({OP_COUNT} is 0 everywhere): divided by all {recorded} steps",
        }
    return {
        "steps": captured,
        "recorded_steps": recorded,
        "basis": "steps_with_ops",
        "note": f"{captured} of {recorded} steps captured ops",
    }


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
    op_steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self, top: int = 20) -> dict[str, Any]:
        """The verdict and every table (op tables cut to the `top` largest changes)."""
        return {
            "schema_version": COMPARE_SCHEMA_VERSION,
            "base": self.base,
            "new": self.new,
            "verdict": self.verdict,
            "phases": _records(self.phases),
            "step_time_distribution": _records(self.distribution),
            "op_steps": self.op_steps,
            "op_types": _records(self.op_types.head(top)),
            "ops": _records(self.ops.head(top)),
            "queues": _records(self.queues),
            "findings": self.findings,
        }


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in df.to_dict("records"):
        out.append(
            {
                k: (
                    None
                    if isinstance(v, float) and v != v
                    else round(float(v), 4)
                    if isinstance(v, (float, np.floating))
                    else bool(v)
                    if isinstance(v, (bool, np.bool_))
                    else int(v)
                    if isinstance(v, (np.integer,))
                    else v
                )
                for k, v in row.items()
            }
        )
    return out


def _pct_change(base: np.ndarray | float, new: np.ndarray | float) -> np.ndarray | float:
    """100 * (new - base) / base; NaN where base is 0."""
    base_arr = np.asarray(base, dtype=np.float64)
    delta = np.asarray(new, dtype=np.float64) - base_arr
    out = np.divide(100.0 * delta, base_arr, out=np.full(base_arr.shape, np.nan), where=base_arr != 0)
    return out if out.ndim else float(out)


def _round(value: Optional[float], digits: int = 4) -> Optional[float]:
    return None if value is None or value != value else round(float(value), digits)


# ----------------------------------------------------------------------------- the interval


def block_length(x: np.ndarray) -> int:
    """Steps per bootstrap block for the mean of the series `x`: Politis & White's automatic choice
    for the circular block bootstrap (2004, with Patton, Politis & White's 2009 correction).

    The autocorrelations say how far a step's time carries over to its neighbours: independent
    step times give blocks of 1-2 steps (the plain bootstrap); alternating, periodic or drifting
    step times give longer blocks, so a resample keeps each step with its neighbours. Capped at
    min(3 sqrt(n), n / 3) steps. Below BLOCK_MIN_STEPS steps the autocorrelations are too noisy
    to say anything (on independent steps they would ask for the cap a third of the time): 1.
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < BLOCK_MIN_STEPS:
        return 1
    eps = x - x.mean()
    cap = int(np.ceil(min(3 * np.sqrt(n), n / 3)))
    kn = max(5, int(np.log10(n)))
    m_max = min(int(np.ceil(np.sqrt(n))) + kn, n - 2)
    lags = np.arange(m_max + 1)
    spectrum = np.fft.rfft(eps, 2 * n)
    acv = np.fft.irfft(spectrum * np.conj(spectrum), 2 * n)[: m_max + 1] / n  # autocovariance at each lag
    if not (acv[0] > 0 and np.isfinite(acv).all()):  # constant steps, or times beyond float range
        return 1
    squares = np.concatenate([[0.0], np.cumsum(eps * eps)])
    head = squares[n - lags] - squares[0]  # sum of eps[:n-k]^2
    tail = squares[n] - squares[lags]  # sum of eps[k:]^2
    with np.errstate(divide="ignore", invalid="ignore"):
        acf = np.abs(acv * n) / np.sqrt(head * tail)
    acf = np.nan_to_num(acf, nan=0.0)
    critical = 2.0 * np.sqrt(np.log10(n) / n)
    insignificant = acf[1:] < critical  # lags 1..m_max
    m_hat = None
    for start in range(max(len(insignificant) - kn + 1, 0)):  # <= ~sqrt(n) lags
        if insignificant[start : start + kn].all():
            m_hat = start
            break
    m = min(2 * max(m_hat, 1), m_max) if m_hat is not None else m_max
    k = np.arange(1, m + 1)
    window = np.where(k / m <= 0.5, 1.0, 2.0 * (1.0 - k / m))  # flat-top lag window
    g = float(np.sum(2.0 * window * k * acv[1 : m + 1]))
    long_run = float(acv[0] + np.sum(2.0 * window * acv[1 : m + 1]))
    if long_run <= 0 or g == 0:
        return cap if long_run <= 0 else 1
    size = (2.0 * g * g / (4.0 / 3.0 * long_run * long_run)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(round(size), 1), cap)) if np.isfinite(size) else cap


def bootstrap_means(
    values: np.ndarray, resamples: int, rng: np.random.Generator, size: Optional[int] = None
) -> np.ndarray:
    """Circular block bootstrap of the column means of `values` (steps x columns): resamples x columns.

    Each resample strings together ceil(n / size) blocks of `size` consecutive steps (wrapping
    around at the end; default: block_length of the first column), starting at uniformly drawn
    steps; every column is resampled with the same steps. Block sums come from a cumulative sum,
    so a resample costs ceil(n / size) draws whatever n is, and the draws depend only on n, the
    block size and the generator.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n, cols = values.shape
    size = max(1, min(int(size if size is not None else block_length(values[:, 0])), n))
    blocks = -(-n // size)
    extended = np.concatenate([values, values[: size - 1]]) if size > 1 else values
    sums = np.vstack([np.zeros((1, cols)), np.cumsum(extended, axis=0)])
    block_sums = np.ascontiguousarray((sums[size : size + n] - sums[:n]).T)  # per column: the block from each step
    out = np.empty((resamples, cols))
    chunk = max(1, 200_000 // blocks)
    for lo in range(0, resamples, chunk):
        m = min(chunk, resamples - lo)
        starts = rng.integers(0, n, size=(m, blocks))
        for col in range(cols):  # 1-d gathers: ~5x a 2-d one
            out[lo : lo + m, col] = block_sums[col][starts].sum(axis=1)
    return out / (blocks * size)


def resamples_for(steps: tuple[int, int], sizes: tuple[int, int], resamples: int = RESAMPLES) -> int:
    """RESAMPLES, fewer (at least MIN_RESAMPLES) when a run has so many blocks that the draws would
    pass MAX_DRAWS (beyond ~20 000 independent steps: the interval is then far inside the noise floor)."""
    blocks = max(-(-steps[0] // sizes[0]), -(-steps[1] // sizes[1]), 1)
    return int(min(resamples, max(MIN_RESAMPLES, MAX_DRAWS // blocks)))


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile by the Cornish-Fisher expansion (Abramowitz & Stegun 26.7.5): within
    0.1 % of the exact value from 3 degrees of freedom, within 1 % from 2."""
    z = NormalDist().inv_cdf(p)
    if not np.isfinite(df):
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def expanded_tail(confidence: float, se: tuple[float, float], blocks: tuple[int, int]) -> float:
    """The tail probability (each side) at which to read the bootstrap percentiles so that a
    `confidence` interval keeps its coverage with few steps: Hesterberg's expanded percentile
    interval (2015), for two runs. A plain percentile interval is too narrow with few independent
    blocks; here the normal quantile becomes a t quantile with Welch-Satterthwaite degrees of
    freedom (blocks - 1 per run), times sqrt(k / (k - 1)) for the bootstrap's plug-in variance.
    """
    plain = (1.0 - confidence) / 2.0
    (se_b, se_n), (k_b, k_n) = se, blocks
    var = se_b**2 + se_n**2
    if var <= 0 or min(k_b, k_n) < 2:
        return plain
    df = var**2 / (se_b**4 / (k_b - 1) + se_n**4 / (k_n - 1))
    inflate = np.sqrt((se_b**2 * k_b / (k_b - 1) + se_n**2 * k_n / (k_n - 1)) / var)
    return 1.0 - NormalDist().cdf(t_quantile(1.0 - plain, df) * inflate)


def measured_means(values: np.ndarray) -> np.ndarray:
    """Each column's mean over the steps where it is a number (a data wait measured in op capture's steps only:
    theirs; no interval then, the resampled means are NaN), NaN for a column measured nowhere."""
    counts = np.count_nonzero(~np.isnan(values), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, np.nansum(values, axis=0) / counts, np.nan)


def _mean_change(
    base: pd.DataFrame, new: pd.DataFrame, columns: list[str], confidence: float, resamples: int, seed: int
) -> tuple[pd.DataFrame, Optional[dict[str, Any]]]:
    b = base[columns].to_numpy(np.float64)
    n = new[columns].to_numpy(np.float64)
    out = pd.DataFrame({"column": columns, "base_mean_ms": measured_means(b), "new_mean_ms": measured_means(n)})
    out["delta_ms"] = out["new_mean_ms"] - out["base_mean_ms"]
    out["delta_pct"] = _pct_change(out["base_mean_ms"].to_numpy(), out["new_mean_ms"].to_numpy())
    nan = np.full(len(columns), np.nan)
    if min(len(b), len(n)) < MIN_STEPS_FOR_INTERVAL:
        for key in ("ci_low_ms", "ci_high_ms", "ci_low_pct", "ci_high_pct"):
            out[key] = nan
        return out, None
    # the step column decides the block sizes and the tails; it is resampled with the others
    step_b, step_n = base[STEP].to_numpy(np.float64), new[STEP].to_numpy(np.float64)
    sizes = (block_length(step_b), block_length(step_n))
    resamples = resamples_for((len(b), len(n)), sizes, resamples)
    rng = np.random.default_rng(seed)
    mb = bootstrap_means(np.column_stack([step_b, b]), resamples, rng, sizes[0])
    mn = bootstrap_means(np.column_stack([step_n, n]), resamples, rng, sizes[1])
    blocks = (-(-len(b) // sizes[0]), -(-len(n) // sizes[1]))
    tail = expanded_tail(confidence, (float(mb[:, 0].std()), float(mn[:, 0].std())), blocks)
    mb, mn = mb[:, 1:], mn[:, 1:]
    q = [100.0 * tail, 100.0 * (1.0 - tail)]
    diff = mn - mb
    out["ci_low_ms"], out["ci_high_ms"] = np.percentile(diff, q, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mb != 0, 100.0 * diff / np.where(mb != 0, mb, 1.0), np.nan)
    defined = ~np.isnan(ratio).any(axis=0)
    low_pct, high_pct = nan.copy(), nan.copy()
    if defined.any():
        low_pct[defined], high_pct[defined] = np.percentile(ratio[:, defined], q, axis=0)
    out["ci_low_pct"], out["ci_high_pct"] = low_pct, high_pct
    info = {
        "name": "circular block bootstrap of the mean step, expanded percentile interval",
        "resamples": resamples,
        "seed": seed,
        "block_steps": {"base": sizes[0], "new": sizes[1]},
        "percentiles": [round(q[0], 4), round(q[1], 4)],
    }
    return out, info


def mean_change(
    base: pd.DataFrame,
    new: pd.DataFrame,
    columns: list[str],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> pd.DataFrame:
    """Per column: both means, NEW - BASE (ms, %) and its `confidence` interval (ms, %).

    Both runs are resampled independently by `bootstrap_means` (blocks sized by `block_length`
    of each run's step times; every column with the same steps), seeded: the same inputs give the
    same interval. The interval holds the central part of mean(NEW*) - mean(BASE*) (and of its
    ratio to mean(BASE*) for the %), read at `expanded_tail`'s percentiles. With fewer than
    MIN_STEPS_FOR_INTERVAL steps in a run the interval columns are NaN.
    """
    return _mean_change(base, new, columns, confidence, resamples, seed)[0]


def significant(
    delta_ms: np.ndarray, ci_low: np.ndarray, ci_high: np.ndarray, base_step_ms: float, noise_pct: float
) -> np.ndarray:
    """A change counts when its interval excludes 0 and it is at least `noise_pct` % of BASE's mean step.

    Without an interval (too few steps: NaN) the change alone decides.
    """
    delta = np.asarray(delta_ms, dtype=np.float64)
    low, high = np.asarray(ci_low, dtype=np.float64), np.asarray(ci_high, dtype=np.float64)
    excludes_zero = np.where(np.isnan(low), True, (low > 0) | (high < 0))
    return excludes_zero & (np.abs(delta) >= noise_pct / 100.0 * base_step_ms) & (delta != 0)


def recorded_span_ms(step_trace: pd.DataFrame) -> Optional[float]:
    """Wall time from the step trace's first start to its last end (every recorded step, warm-up
    included); None without start times."""
    if not len(step_trace) or STEP_START not in step_trace:
        return None
    start = step_trace[STEP_START].to_numpy(np.float64)
    return float((start + step_trace[STEP].to_numpy(np.float64)).max() - start.min())


# ----------------------------------------------------------------------------- step time


def phase_deltas(base: pd.DataFrame, new: pd.DataFrame, noise_pct: float = DEFAULT_NOISE_PCT) -> pd.DataFrame:
    """Per phase: mean in each run, the mean's change and its interval, whether it is significant
    (against BASE's mean step), then the medians and their change, and the phase's share of the run."""
    columns = [col for col, _ in PHASES if col in base and col in new]
    labels = dict(PHASES)
    base, new = unmeasured_split_as_nan(base), unmeasured_split_as_nan(new)
    table = mean_change(base, new, columns)
    table.insert(0, "phase", [labels[c] for c in columns])
    base_step = float(base[STEP].mean())
    table["significant"] = significant(table["delta_ms"], table["ci_low_ms"], table["ci_high_ms"], base_step, noise_pct)
    table["base_median_ms"] = [float(base[c].median()) for c in columns]
    table["new_median_ms"] = [float(new[c].median()) for c in columns]
    table["median_delta_ms"] = table["new_median_ms"] - table["base_median_ms"]
    table["median_delta_pct"] = _pct_change(table["base_median_ms"].to_numpy(), table["new_median_ms"].to_numpy())
    table["base_share_pct"] = [share_pct(base, c) for c in columns]
    table["new_share_pct"] = [share_pct(new, c) for c in columns]
    return table


def unmeasured_split_as_nan(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps with data_wait_ms NaN too when the run did not measure its data wait (gap_host_ms NaN:
    docs/formats.md), so both halves of the gap's split read as not measured rather than 0 and the whole gap."""
    if DATA_WAIT not in steps or GAP_HOST not in steps or steps[GAP_HOST].notna().any():
        return steps
    return steps.assign(**{DATA_WAIT: np.nan})


def step_distribution(
    base: pd.DataFrame, new: pd.DataFrame, spans_ms: Optional[tuple[float, float]] = None
) -> pd.DataFrame:
    """Step count, mean, wall time (sum of the analysed steps), recorded span, spread and quantiles of
    each run, one row per statistic."""

    def stats(steps: pd.DataFrame, span: Optional[float]) -> dict[str, float]:
        t = steps[STEP].to_numpy(np.float64)
        out = {name: float(np.percentile(t, q)) for name, q in QUANTILES.items()}
        return {
            "steps": float(len(t)),
            "mean": float(t.mean()),
            "wall": float(t.sum()),
            "span": float("nan") if span is None else span,
            "std": float(t.std()),
            "min": float(t.min()),
            **out,
            "max": float(t.max()),
        }

    spans = spans_ms or (None, None)
    b, n = stats(base, spans[0]), stats(new, spans[1])
    table = pd.DataFrame({"statistic": list(b), "base_ms": list(b.values()), "new_ms": [n[k] for k in b]})
    table["delta_ms"] = table["new_ms"] - table["base_ms"]
    return table


def verdict(
    base: pd.DataFrame,
    new: pd.DataFrame,
    fail_if_slower_pct: Optional[float] = None,
    noise_pct: float = DEFAULT_NOISE_PCT,
    spans_ms: Optional[tuple[float, float]] = None,
) -> dict[str, Any]:
    """faster / slower / no significant change by the mean step with its interval, and the CI gate.

    `base` and `new` are the analysed steps; `spans_ms` the runs' recorded spans (recorded_span_ms).
    The gate fails (exit code 1) when NEW is significantly slower *and* by more than
    `fail_if_slower_pct` % of BASE's mean step.
    """
    table, method = _mean_change(base, new, [STEP], CONFIDENCE, RESAMPLES, SEED)
    row = table.iloc[0]
    b_mean, n_mean, delta, change = (float(row[k]) for k in ("base_mean_ms", "new_mean_ms", "delta_ms", "delta_pct"))
    low, high = float(row["ci_low_ms"]), float(row["ci_high_ms"])
    low_pct, high_pct = float(row["ci_low_pct"]), float(row["ci_high_pct"])
    has_interval = low == low
    sig = bool(significant(np.array([delta]), np.array([low]), np.array([high]), b_mean, noise_pct)[0])
    outcome = (FASTER if delta < 0 else SLOWER) if sig else NO_CHANGE
    failed = fail_if_slower_pct is not None and outcome == SLOWER and change > fail_if_slower_pct
    b_med, n_med = float(base[STEP].median()), float(new[STEP].median())
    b_wall, n_wall = float(base[STEP].sum()), float(new[STEP].sum())
    spans = spans_ms or (None, None)
    v: dict[str, Any] = {
        "outcome": outcome,
        "significant": sig,
        "decided_by": "mean step of the analysed steps",
        "base_steps": int(len(base)),
        "new_steps": int(len(new)),
        "base_mean_step_ms": _round(b_mean),
        "new_mean_step_ms": _round(n_mean),
        "delta_ms": _round(delta),
        "delta_pct": _round(change, 3),
        "confidence": CONFIDENCE if has_interval else None,
        "ci_low_ms": _round(low) if has_interval else None,
        "ci_high_ms": _round(high) if has_interval else None,
        "ci_low_pct": _round(low_pct, 3) if has_interval else None,
        "ci_high_pct": _round(high_pct, 3) if has_interval else None,
        "interval_method": method,
        "noise_pct": noise_pct,
        "base_wall_ms": _round(b_wall),
        "new_wall_ms": _round(n_wall),
        "wall_delta_ms": _round(n_wall - b_wall),
        "base_span_ms": _round(spans[0]),
        "new_span_ms": _round(spans[1]),
        "base_median_step_ms": _round(b_med),
        "new_median_step_ms": _round(n_med),
        "median_delta_ms": _round(n_med - b_med),
        "median_delta_pct": _round(_pct_change(b_med, n_med), 3),
        "fail_if_slower_pct": fail_if_slower_pct,
        "failed": bool(failed),
        "exit_code": 1 if failed else 0,
    }
    v["reason"] = _reason(v)
    v["gate"] = _gate_text(v) if fail_if_slower_pct is not None else None
    return v


def interval_text(v: Mapping[str, Any]) -> str:
    """`95 % interval -44.0 % to -39.1 %` (or why there is none)."""
    if v.get("ci_low_pct") is None:
        return (
            f"no interval: too few analysed steps (BASE {v['base_steps']}, NEW {v['new_steps']}; "
            f"at least {MIN_STEPS_FOR_INTERVAL} each)"
        )
    return f"{100 * v['confidence']:g} % interval {v['ci_low_pct']:+.1f} % to {v['ci_high_pct']:+.1f} %"


def _reason(v: Mapping[str, Any]) -> str:
    """Why the outcome is what it is, in one sentence."""
    change, noise = v["delta_pct"], v["noise_pct"]
    if change is None or change != change:
        return "no significant change: BASE's mean step is 0"
    moved = f"the mean analysed step changed by {change:+.1f} % ({interval_text(v)})"
    if v["ci_low_pct"] is None:
        beyond = "beyond" if v["significant"] else "within"
        return f"{v['outcome']}: {moved}: decided by the change alone, {beyond} the {noise:g} % noise floor"
    if v["significant"]:
        return f"{v['outcome']}: {moved}: the interval excludes 0 and the change exceeds the {noise:g} % noise floor"
    if v["ci_low_pct"] <= 0 <= v["ci_high_pct"]:
        text = f"{NO_CHANGE}: {moved}: the interval includes 0"
        widest = max(abs(v["ci_low_pct"]), abs(v["ci_high_pct"]))
        if widest >= 3 * noise:
            text += f" (it still allows changes up to {widest:.0f} %: more steps would narrow it)"
        return text
    return f"{NO_CHANGE}: {moved}: within the {noise:g} % noise floor"


def _gate_text(v: Mapping[str, Any]) -> str:
    """The CI gate's outcome with the interval."""
    limit, change = v["fail_if_slower_pct"], v["delta_pct"]
    interval = interval_text(v)
    if v["failed"]:
        return (
            f"FAIL: NEW's mean analysed step is significantly slower, {change:+.1f} % ({interval}), "
            f"more than the {limit:g} % allowed"
        )
    if v["outcome"] == SLOWER:
        return f"pass: NEW is slower by {change:+.1f} % ({interval}), within the {limit:g} % allowed"
    if v["outcome"] == FASTER:
        return f"pass: NEW is faster, {change:+.1f} % ({interval})"
    return f"pass: no significant change in the mean analysed step ({change:+.1f} %, {interval})"


# ----------------------------------------------------------------------------- ops


def op_deltas(
    base: Optional[pd.DataFrame], new: Optional[pd.DataFrame], key: list[str], base_steps: int, new_steps: int
) -> pd.DataFrame:
    """Per `key` (device + op_type, or device + name): counts, totals, per-step times and their change.

    `base_steps` / `new_steps` are the steps each op table covers (`op_steps`: those that captured
    ops), so `*_per_step_ms` is self time per captured step. status is `both`, `new` (only in NEW)
    or `gone` (only in BASE); rows are ordered by the absolute per-step change, largest first.
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
    return (base.map(lambda d: b[d] if b.get(d) in shared else d), new.map(lambda d: n[d] if n.get(d) in shared else d))


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
#: severities from the most severe
SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


def _findings(
    report: Optional[Mapping[str, Any]], severities: tuple[str, ...] = PROBLEM_SEVERITIES
) -> dict[str, Mapping[str, Any]]:
    items = report.get("findings") if isinstance(report, Mapping) else None
    return {finding_key(f): f for f in items or [] if isinstance(f, Mapping) and f.get("severity") in severities}


def finding_changes(
    base: Optional[Mapping[str, Any]], new: Optional[Mapping[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Problems (high / medium findings) resolved (gone from NEW's findings), introduced (absent from
    BASE's), and those in both: improved (a lower severity in NEW, medium -> low included), worsened
    (a higher one) and persisting (the same); `problems`: how many each report has (None: no report)."""
    b, n = _findings(base), _findings(new)
    b_all, n_all = _findings(base, tuple(SEVERITY_RANK)), _findings(new, tuple(SEVERITY_RANK))

    def brief(f: Mapping[str, Any]) -> dict[str, Any]:
        return {k: f.get(k) for k in ("kind", "severity", "title", "at_stake_ms", "at_stake_pct")}

    both = [
        {
            **brief(n_all[k]),
            "key": k,
            "base_severity": b_all[k].get("severity"),
            "base_at_stake_ms": b_all[k].get("at_stake_ms"),
        }
        for k in [*b, *(k for k in n if k not in b)]
        if k in b_all and k in n_all
    ]

    def moved(x: Mapping[str, Any]) -> int:
        return SEVERITY_RANK[str(x["severity"])] - SEVERITY_RANK[str(x["base_severity"])]

    return {
        "resolved": [{**brief(b[k]), "key": k} for k in b if k not in n_all],
        "introduced": [{**brief(n[k]), "key": k} for k in n if k not in b_all],
        "improved": [x for x in both if moved(x) > 0],
        "worsened": [x for x in both if moved(x) < 0],
        "persisting": [x for x in both if moved(x) == 0],
        "verdicts": [(base or {}).get("verdict"), (new or {}).get("verdict")],
        "problems": {
            "base": len(b) if isinstance(base, Mapping) else None,
            "new": len(n) if isinstance(new, Mapping) else None,
        },
    }


# ----------------------------------------------------------------------------- all of it


def compare_runs(
    base: RunTables, new: RunTables, fail_if_slower_pct: Optional[float] = None, noise_pct: float = DEFAULT_NOISE_PCT
) -> Comparison:
    """BASE -> NEW: phases, step-time distribution, op types, ops, queues, findings and the verdict."""
    b_steps, n_steps = base.steps(), new.steps()
    spans = (recorded_span_ms(base.step_trace), recorded_span_ms(new.step_trace))
    b_ops, n_ops = base.op_steps(), new.op_steps()
    return Comparison(
        base=base.label,
        new=new.label,
        verdict=verdict(b_steps, n_steps, fail_if_slower_pct, noise_pct, spans),
        phases=phase_deltas(b_steps, n_steps, noise_pct),
        distribution=step_distribution(b_steps, n_steps, spans),
        op_types=op_deltas(base.op_type, new.op_type, ["device", "op_type"], b_ops["steps"], n_ops["steps"]),
        ops=op_deltas(base.op_detail, new.op_detail, ["device", "name"], b_ops["steps"], n_ops["steps"]),
        queues=queue_deltas(base.queue_summary, new.queue_summary),
        findings=finding_changes(base.report, new.report),
        op_steps={"base": b_ops, "new": n_ops},
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
