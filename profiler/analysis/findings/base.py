"""What every finding module builds on: the `Finding` it returns, the `Question` it declares, the
`Context` every rule gets, and the step arithmetic the rules share (`StepWindow`).

A finding module (one per question: is the loop waiting for data? is the tail long? ...) declares
a `Question`: its name, the report page its findings belong to, the keys they carry, its
thresholds (defaults and meaning) and, per scope, a `Rule`: a dataclass naming the data the rule
reads (each field is a datum the rank or the cluster offers, `profiler.analysis.results.RankData`
/ `profiler.analysis.cluster.ClusterData`) and the function that turns it into findings.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional

import pandas as pd

from profiler.analysis.float64 import CAST_OP_NAME  # noqa: F401 (the Cast family, shared by the op rules)
from profiler.analysis.stakes import Win, win_for
from profiler.analysis.steps import outlier_steps

#: the verdict of a run with no high-severity finding
BALANCED = "balanced"
#: bytes in a MB, as the findings count memory
MB = float(1 << 20)


@dataclass
class Finding:
    """One ranked problem; `to_json` gives the report_{rank}.json entry."""

    kind: str
    title: str
    at_stake_ms: float
    at_stake_pct: float
    evidence: str
    threshold: str
    suggestion: str
    files: list[str]
    metrics: dict[str, float] = field(default_factory=dict)
    severity: str = ""
    rank: Optional[int] = None
    key: str = ""  # what makes two runs' findings the same problem (compare)
    win: Optional[Win] = None  # what its fix can win of at_stake_ms, when not the table's (profiler.analysis.stakes)

    def achievable(self) -> Finding:
        """This finding with its stake turned into what its fix can win (`win`, else the table's entry for
        its key): the cause's time stays in metrics (`cause_ms`, `cause_pct`), the assumption goes to the
        evidence. A finding with no time at stake is left as it is."""
        if self.at_stake_ms <= 0 or "cause_ms" in self.metrics:
            return self
        win = self.win or win_for(self.key or self.kind)
        cause_ms, cause_pct = self.at_stake_ms, self.at_stake_pct
        self.metrics = {**self.metrics, "cause_ms": cause_ms, "cause_pct": cause_pct, "win_pct": 100.0 * win.share}
        self.at_stake_ms, self.at_stake_pct = cause_ms * win.share, cause_pct * win.share
        self.evidence += (
            f"; a fix can win about {self.at_stake_ms:.2f} ms a step ({100.0 * win.share:.0f} % of the "
            f"{cause_ms:.2f} ms: {win.why})"
        )
        return self

    def to_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "key": self.key or self.kind,
            "severity": self.severity,
            "title": self.title,
            "at_stake_ms": round(float(self.at_stake_ms), 3),
            "at_stake_pct": round(float(self.at_stake_pct), 2),
            "evidence": self.evidence,
            "threshold": self.threshold,
            "suggestion": self.suggestion,
            "files": self.files,
            "metrics": {k: round(float(v), 4) for k, v in self.metrics.items()},
        }
        if self.rank is not None:
            out["rank"] = int(self.rank)
        return out


@dataclass(frozen=True)
class Threshold:
    """A threshold a question declares: its default and what it means (docs/formats.md "report")."""

    default: float
    doc: str


@dataclass(frozen=True)
class Context:
    """What every rule knows besides its data: whose run (`rank`, for file names; None for the
    cluster), whose terms its fixes use (`framework`: torch / mindspore / plain) and the thresholds."""

    rank: Optional[int]
    framework: str
    thresholds: Mapping[str, float]

    def file(self, stem: str, ext: str = "csv") -> str:
        """This rank's output file `stem`, as the evidence names it."""
        return f"{stem}_{self.rank}.{ext}"

    def reaches(self, share_pct: float, threshold: str) -> Optional[float]:
        """`share_pct` when it reaches the threshold `threshold` (a % of step time); else None."""
        return share_pct if share_pct >= self.thresholds[threshold] else None

    def rule_text(self, what: str, threshold: str) -> str:
        """A finding's `threshold` field: "<what> >= <value> % (<name>)"."""
        return f"{what} >= {self.thresholds[threshold]:g} % ({threshold})"


@dataclass(frozen=True)
class Rule:
    """How a question is answered at one scope: `needs` is a dataclass whose fields name the data the
    rule reads (and nothing else is computed for it), `find` turns that data into findings."""

    needs: type
    find: Callable[[Any, Context], list[Finding]]

    def answer(self, data: object, ctx: Context) -> list[Finding]:
        """The findings of this rule on `data` (a RankData / ClusterData), given only what it needs."""
        return self.find(self.needs(**{f.name: offered(data, f.name) for f in fields(self.needs)}), ctx)


def offered(data: object, name: str) -> Any:
    """The datum `name` of `data`, or an error naming what `data` offers (a typo in a module's needs)."""
    if not hasattr(data, name):
        known = ", ".join(n for n in dir(data) if not n.startswith("_"))
        raise AttributeError(
            f"a finding needs {name!r}, which {type(data).__name__} does not offer (it offers {known})"
        )
    return getattr(data, name)


@dataclass(frozen=True)
class Question:
    """One finding module's declaration (its `QUESTION`), registered in `findings.QUESTIONS`.

    `page`: the report page its findings belong to besides the Overview (a `viewer/report.py` page
    name: pipeline, operators, timeline, counters, cluster; overview when none). `keys`: the keys
    its findings carry (the kind, or `kind:qualifier` when a kind is shared or qualified: a key
    `op_hotspot:cast:GPU0` belongs to the question declaring `op_hotspot`). `rank` answers for one
    rank (report_{rank}.json), `cluster` for the job (cluster_summary.json).
    """

    name: str
    page: str
    keys: tuple[str, ...]
    thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    rank: Optional[Rule] = None
    cluster: Optional[Rule] = None


# ----------------------------------------------------------------------------- the steps rules measure


def warmup_note(analysed: int, skipped: int, outliers: int = 0) -> str:
    """Which steps a mean is over, in words: the warm-up rule and the outliers left to their own rule."""
    skipped_text = f", the first {skipped} left out as warm-up (warmup_steps)" if skipped else ""
    outlier_text = f", {outliers} outlier step(s) left to step_outliers" if outliers else ""
    return f"mean over {analysed - outliers} steps{skipped_text}{outlier_text}"


class StepWindow:
    """A rank's analysed steps (the warm-up steps left out) and the views of them the rules measure.

    Figures are means over the *steady* steps (the analysed steps without the outlier steps, which
    the step_outliers rule reports), so the same seconds are not reported twice and shares add up;
    op figures are over the *captured* steps (those that recorded ops).
    """

    def __init__(self, analysed: pd.DataFrame, skipped: int, outlier_min_pct: float):
        self.analysed = analysed
        self.skipped = skipped
        self.outlier_min_pct = outlier_min_pct

    @functools.cached_property
    def steady(self) -> pd.DataFrame:
        """The analysed steps without the outlier steps (the step_outliers rule reports those)."""
        steps = self.analysed
        slow = outlier_steps(steps, self.outlier_min_pct) if len(steps) else steps
        return steps.drop(index=slow.index) if len(slow) < len(steps) else steps

    @property
    def outliers(self) -> pd.DataFrame:
        """The analysed steps the outlier rule takes out of the steady ones (step_outliers reports them)."""
        return self.analysed.drop(index=self.steady.index)

    @property
    def mean_ms(self) -> float:
        """The mean steady step: the denominator of every share, so shares add up over those steps."""
        return float(self.steady["total_ms"].mean()) if len(self.steady) else 0.0

    def per_step(self, column: str) -> float:
        """A column's total over the steady steps divided by their count (its mean), 0 when absent."""
        return float(self.steady[column].mean()) if column in self.steady and len(self.steady) else 0.0

    def per_analysed_step(self, column: str) -> float:
        """A column's mean over every analysed step, the outliers included (0 when absent): for the data
        wait, which the outlier rule leaves out of a step's own time, so an outlier's wait is still the
        input pipeline's (a burst loader's long wait often lands on a step that is slower otherwise too)."""
        return float(self.analysed[column].mean()) if column in self.analysed and len(self.analysed) else 0.0

    @functools.cached_property
    def split(self) -> pd.DataFrame:
        """The steady steps whose gap split (data wait / other host work) was measured: all of them, or those
        where op capture recorded torch.profiler's DataLoader ranges when nothing else measured the wait."""
        if "gap_host_ms" not in self.steady:
            return self.steady
        measured = self.steady["gap_host_ms"].notna()
        return self.steady if measured.all() else self.steady[measured]

    def per_split_step(self, column: str) -> float:
        """A column's mean over the steps whose gap split was measured (`split`), 0 when none: the gap the
        split's halves add up to."""
        return float(self.split[column].mean()) if column in self.split and len(self.split) else 0.0

    @property
    def split_note(self) -> str:
        """Which steps measured the gap's split, in words, when not every steady step did ("" then)."""
        if len(self.split) == len(self.steady):
            return ""
        return (
            f"; the data wait was measured in {len(self.split)} of the {len(self.steady)} steps (torch.profiler's "
            "DataLoader ranges, in the steps op capture recorded): the split is theirs"
        )

    def share(self, part_ms: float) -> float:
        """`part_ms` as a % of the mean steady step."""
        mean = self.mean_ms
        return 100.0 * part_ms / mean if mean > 0 else 0.0

    @functools.cached_property
    def captured(self) -> pd.DataFrame:
        """The analysed steps that recorded ops (op capture on an ops_schedule skips the others)."""
        if "op_count" not in self.analysed:
            return self.analysed
        return self.analysed[self.analysed["op_count"] > 0]

    @property
    def note(self) -> str:
        """Which steps the means are over, in words (every finding's evidence says it)."""
        return warmup_note(len(self.analysed), self.skipped, len(self.analysed) - len(self.steady))

    def finding(self, kind: str, stake_ms: float, **kw: Any) -> Finding:
        """A finding whose share is of the mean steady step."""
        return Finding(kind=kind, at_stake_ms=stake_ms, at_stake_pct=self.share(stake_ms), **kw)

    def captured_finding(self, kind: str, stake_ms: float, **kw: Any) -> Finding:
        """A finding about op time: its share is of the mean step of the analysed steps that captured ops,
        without the profiler's own time in them (`profiler_overhead_ms`: torch.profiler's window start lands
        in the first captured step, tens of ms on a busy machine; the profiler_overhead finding has it)."""
        mean = float(self.captured_user_ms().mean()) if len(self.captured) else 0.0
        return Finding(kind=kind, at_stake_ms=stake_ms, at_stake_pct=100.0 * stake_ms / mean if mean > 0 else 0.0, **kw)

    def captured_user_ms(self) -> pd.Series:
        """Each captured step's time without the profiler's own (never below 0)."""
        steps = self.captured
        overhead = steps["profiler_overhead_ms"].fillna(0.0) if "profiler_overhead_ms" in steps else 0.0
        return (steps["total_ms"] - overhead).clip(lower=0.0)


def data_wait_measured(steps: StepWindow) -> bool:
    """Whether anything measured the loop's data wait (ProfiledDataLoader, iterate, prefetch, probed
    queues): the step trace's `gap_host_ms` is a number then, NaN (unmeasured) otherwise."""
    return "gap_host_ms" in steps.analysed and bool(steps.analysed["gap_host_ms"].notna().any())


def exposed_comm(steps: pd.DataFrame) -> pd.Series:
    """Per step, the communication not overlapped by forward + backward (ms)."""
    return (steps["all_reduce_ms"] - steps["all_reduce_overlap_ms"]).clip(lower=0)


def pct_text(value: float) -> str:
    """A share as the titles write it: "12.3 %"."""
    return f"{value:.1f} %"
