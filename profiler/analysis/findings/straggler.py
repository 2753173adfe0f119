"""Is one rank the one the others wait for? straggler_rank, from the cluster step table.

In synchronous data-parallel training a straggler does not show as a longer step but as less
waiting at the collectives: it is the rank slowest (busiest: step minus wait) in most steps and
busier than the other ranks' median by a margin; the phase that makes it slower is the one (with
communication taken out) in which it exceeds them most. `find_straggler` decides (the cluster
summary keeps its result), the cluster rule words it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold

THRESHOLDS = {
    "straggler_pct": Threshold(
        10.0,
        "how far a rank's busy time (step minus exposed communication) may exceed "
        "the ranks' median before it is a straggler",
    ),
}

#: a straggler is the slowest rank in at least this share of the steps ...
STRAGGLER_MIN_SLOWEST_SHARE = 0.5
#: ... and busier than the other ranks' median by straggler_pct of their busy time,
#: and by at least this much (noise on sub-millisecond steps is not a straggler)
STRAGGLER_MIN_EXCESS_MS = 1.0

#: phases compared to find what makes a straggler slower (communication taken out of them)
PHASES_EXCL_COMM = ("iteration_gap_ms", "fp_bp_excl_comm_ms", "tail_excl_comm_ms")


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for, and why."""

    rank: int
    slowest_share: float  # share of the contested steps in which it was the slowest
    excess_ms: float  # its median busy time minus the other ranks' median
    phase: str  # the phase (communication taken out) it exceeds most in
    phase_excess_ms: dict[str, float]  # per phase: its median minus the other ranks' median
    others_wait_ms: float  # median wait of the other ranks per step

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "slowest_share_pct": round(100.0 * self.slowest_share, 2),
            "excess_ms": round(self.excess_ms, 4),
            "phase": self.phase,
            "phase_excess_ms": {k: round(v, 4) for k, v in self.phase_excess_ms.items()},
            "others_wait_ms": round(self.others_wait_ms, 4),
        }


def find_straggler(table: pd.DataFrame, ranks: pd.DataFrame, straggler_pct: float) -> Optional[Straggler]:
    """The rank slowest in most contested steps and busier than the other ranks' median by `straggler_pct` %; else None.

    `table` is cluster_step_trace's (rank, step) rows, `ranks` the per-rank table (`slowest_steps`).
    Times are each rank's median over its steps: a few steps disturbed by something else (start-up,
    a descheduled process) do not make or hide a straggler.
    """
    contested = int(ranks["slowest_steps"].sum())
    if len(ranks) < 2 or contested == 0:
        return None
    typical_steps = table.groupby("rank", sort=True)[["busy_ms", "wait_ms", *PHASES_EXCL_COMM]].median()
    rank = int(ranks.loc[ranks["slowest_steps"].idxmax(), "rank"])
    top = typical_steps.loc[rank]
    others = typical_steps.drop(index=rank)
    share = float(ranks.loc[ranks["rank"] == rank, "slowest_steps"].iloc[0]) / contested
    typical = float(others["busy_ms"].median())
    excess = float(top["busy_ms"]) - typical
    margin = max(STRAGGLER_MIN_EXCESS_MS, straggler_pct / 100.0 * typical)
    if share < STRAGGLER_MIN_SLOWEST_SHARE or excess < margin:
        return None
    phase_excess = {p: float(top[p] - others[p].median()) for p in PHASES_EXCL_COMM}
    return Straggler(
        rank=rank,
        slowest_share=share,
        excess_ms=excess,
        phase=max(phase_excess, key=phase_excess.get),
        phase_excess_ms=phase_excess,
        others_wait_ms=float(others["wait_ms"].median()),
    )


@dataclass(frozen=True)
class ClusterNeeds:
    straggler: Optional[Straggler]
    mean_step_ms: float  # the ranks' mean step (1.0 when it is 0)


def find(data: ClusterNeeds, ctx: Context) -> list[Finding]:
    """straggler_rank for the straggler the cluster analysis found, if any."""
    s = data.straggler
    if s is None:
        return []
    label = s.phase.replace("_excl_comm", "")[:-3]
    cause = (
        "its input pipeline is slower: give it more loader workers or local data"
        if s.phase == "iteration_gap_ms"
        else "it computes longer: check its device (clocks, thermal, another job) and its data shard "
        "(uneven batch or sequence sizes)"
        if s.phase == "fp_bp_excl_comm_ms"
        else "its work after backward (optimizer, logging, checkpointing) is longer: move rank-specific "
        "work off the training loop"
    )
    return [
        Finding(
            kind="straggler_rank",
            rank=s.rank,
            at_stake_ms=s.excess_ms,
            at_stake_pct=100.0 * s.excess_ms / data.mean_step_ms,
            title=f"Rank {s.rank} is a straggler: the other ranks wait {s.others_wait_ms:.2f} ms per step for it",
            evidence=(
                f"rank {s.rank} is the slowest in {100 * s.slowest_share:.0f} % of the steps and busy "
                f"{s.excess_ms:.2f} ms per step more than the other ranks' median (busy = step minus wait at the "
                f"collectives); the extra time is in {label} (+{s.phase_excess_ms[s.phase]:.2f} ms, "
                f"communication taken out) [cluster_step_trace.csv: busy_ms, wait_ms, {s.phase}]"
            ),
            threshold=(
                f"slowest in >= {100 * STRAGGLER_MIN_SLOWEST_SHARE:g} % of the steps and busy time > the other ranks' "
                f"median + {ctx.thresholds['straggler_pct']:g} % (straggler_pct)"
            ),
            suggestion=f"look at rank {s.rank} alone (profview DIR --rank {s.rank}): {cause}",
            files=["cluster_step_trace.csv", f"step_trace_{s.rank}.csv"],
            metrics={
                "excess_ms": s.excess_ms,
                "slowest_share_pct": 100 * s.slowest_share,
                "others_wait_ms": s.others_wait_ms,
            },
        )
    ]


QUESTION = Question(
    name="straggler", page="cluster", keys=("straggler_rank",), thresholds=THRESHOLDS, cluster=Rule(ClusterNeeds, find)
)
