"""A recording's raw store -> Run -> analysis -> output files: the I/O edge of the analysis.

`Profiler.analyse()` and `profview analyse DIR` both call `analyse_directory`, so a crashed
run's raw store is analysed exactly like a clean one. A rank's Run is its raw tables interpreted,
then each source the recording names merges what it left beside the raw store (`Source.merge`;
the names resolve to classes in capture/registry.py, plug-ins included).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.capture.base import STEPS
from profiler.capture.registry import merging_sources
from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.export.cluster import write_cluster_outputs
from profiler.export.files import output_lock, remove_stale_temps
from profiler.export.outputs import rank_outputs, write_outputs, write_timeline
from profiler.formats.documents import read_document
from profiler.formats.names import CLUSTER_STEP_TRACE, CLUSTER_SUMMARY, CLUSTER_TIMELINE, rank_file
from profiler.model import Run
from profiler.progress import Progress
from profiler.store.interpret import dropped_sentence, interpret
from profiler.store.load import RawStore, Recording, read_raw_tables, scan_raw_store

BIG_STORE_BYTES = 8 << 20  # show progress above this much raw data


def load_rank(directory: Path, rank: int, progress: Optional[Progress] = None, store: Optional[RawStore] = None) -> Run:
    """The Run recorded for `rank` in `directory/raw`, with every recorded source's data merged in:
    sources that define steps first (a device's step trace is the truth when it has one), then steps
    inferred for a run without any (one step when nothing repeats), then the others onto those steps."""
    store = store or scan_raw_store(Path(directory))
    paths = store.files.get(rank, [])
    if not paths:
        skipped = store.warnings_for(rank)
        why = f": {skipped[0]}" if skipped else ""
        raise ProfviewError(f"no readable raw data for rank {rank} in {Path(directory) / 'raw'}{why}")
    tables = read_raw_tables(
        paths,
        progress=(lambda i, n: progress.stage("reading raw store", i, n)) if progress else None,
        rank=rank,
        notes=store.warnings_for(rank),
    )
    if progress:
        progress.stage(f"interpreting {tables.records:,} records")
    recording = Recording(Path(directory), rank, tables)
    run = interpret(tables)
    merging = merging_sources(tables.sources)
    for source in (s for s in merging if s.merge_stage == STEPS):
        run = source.merge(run, recording)
    if not (len(run.steps) or len(run.spans) or len(run.ops) or len(run.instants)):
        raise ProfviewError(_nothing_analysable(run, paths))
    run = ensure_steps(run)
    for source in (s for s in merging if s.merge_stage != STEPS):
        run = source.merge(run, recording)
    return run


def _nothing_analysable(run: Run, paths: list[Path]) -> str:
    """Why a recording holds no step, span or op: dropped, lost to damage, or never recorded."""
    rec = run.info.get("recording", {})
    dropped, lost, damaged = rec.get("dropped_events", 0), rec.get("lost_events", 0), rec.get("torn_chunks", 0)
    if dropped:
        return f"nothing can be analysed: {dropped_sentence(dropped, 0, run.info.get('config', {}))}"
    if damaged or lost:
        first = next((w for w in run.info.get("warnings", []) if "torn chunk" in w), "")
        return (
            f"nothing can be analysed: {damaged} damaged chunk(s) of {', '.join(str(p) for p in paths)} held "
            f"the recording ({lost:,} recorded events lost){'; first: ' + first if first else ''}"
        )
    return (
        "nothing was recorded: no step, span or op (call profiler.step() at the end of each iteration and mark "
        "phases with profiler.phase())"
    )


def check_directory(directory: Path, store: Optional[RawStore] = None) -> RawStore:
    """The directory's raw store, or ProfviewError saying (in one sentence) why there is none to analyse."""
    if not directory.exists():
        raise ProfviewError(f"{directory} does not exist")
    if not directory.is_dir():
        raise ProfviewError(f"{directory} is not a directory")
    store = store or scan_raw_store(directory)
    if not store.ranks:
        skipped = store.skipped()
        if skipped:
            raise ProfviewError(f"{directory / 'raw'} holds no readable raw file: {skipped[0]}")
        if (directory / "raw" / "previous").is_dir() and any((directory / "raw" / "previous").glob("*/*.pvraw")):
            raise ProfviewError(
                f"{directory / 'raw'} holds no current recording, only earlier ones moved to "
                f"{directory / 'raw' / 'previous'} (analyse one by copying it to a directory's raw/)"
            )
        raise ProfviewError(
            f"{directory} has no raw store ({directory / 'raw'} with *.pvraw files): "
            "it is not a profview recording, or nothing was flushed before the run ended"
        )
    return store


def analyse_directory(
    directory,
    ranks: Optional[Iterable[int]] = None,
    progress: bool = True,
    gzip_timeline: bool = False,
    leave_out_failed: bool = False,
    thresholds: Optional[Mapping[str, float]] = None,
) -> list[Path]:
    """Analyse the raw store of `directory` (all ranks, or `ranks`) and write the outputs there.

    `thresholds` override the advisor's (report_{rank}.json), on top of those the run was recorded with.

    Analysing all ranks of a multi-rank directory also writes the cluster files. When several
    ranks (or `leave_out_failed`) are analysed, a rank whose store cannot be analysed (it recorded
    nothing before it died) is left out with a warning; the cluster files report it missing.

    Each rank's outputs are written under that rank's lock (`output_lock`): a second analysis of
    the same rank at the same time waits for the first, then writes its own.
    """
    directory = Path(directory)
    store = check_directory(directory)
    every_rank = ranks is None
    ranks = list(ranks) if ranks is not None else store.ranks
    big = sum(_size(p) for r in ranks for p in store.files.get(r, [])) > BIG_STORE_BYTES
    written: list[Path] = []
    with Progress("analysing", enabled=progress and big) as p:
        for rank in ranks:
            try:
                run = load_rank(directory, rank, p, store)
            except ProfviewError as exc:
                if len(ranks) == 1 and not leave_out_failed:
                    raise
                warnings.warn(f"rank {rank} is left out: {exc}", ProfilerUsageWarning, stacklevel=2)
                continue
            p.stage(f"rank {rank}: step trace, op tables and timeline")
            with output_lock(directory, f"r{run.rank}"):
                written += analyse_and_write(run, directory, gzip_timeline, thresholds)
    if every_rank:
        written += _write_cluster(directory)
    return written


def _write_cluster(directory: Path) -> list[Path]:
    """The cluster files, under their own lock."""
    with output_lock(directory, "cluster"):
        remove_stale_temps(directory, (CLUSTER_SUMMARY, CLUSTER_STEP_TRACE, CLUSTER_TIMELINE))
        return write_cluster_outputs(directory, load_rank)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def analyse_and_write(
    run: Run, directory: Path, gzip_timeline: bool = False, thresholds: Optional[Mapping[str, float]] = None
) -> list[Path]:
    """Analyse one rank's run and write its outputs. The timeline (Chrome trace and event file) needs
    only the run, so a second thread writes it meanwhile (its row formatting and file writes release the GIL).
    Call it holding the rank's output_lock: it removes what killed analyses of the rank left behind."""
    remove_stale_temps(Path(directory), rank_outputs(run.rank))
    with ThreadPoolExecutor(1, thread_name_prefix="profview-timeline") as pool:
        timeline = pool.submit(write_timeline, run, Path(directory), gzip_timeline)
        analysis = analyse_run(run, thresholds)
        return write_outputs(analysis, directory, gzip_timeline=gzip_timeline, timeline=timeline.result)


def analyse_cluster(directory) -> list[Path]:
    """Rank 0's end of a distributed run: analyse ranks that recorded but were not analysed (they died),
    then write the cluster files from every rank's outputs."""
    directory = Path(directory)
    pending = [r for r in scan_raw_store(directory).ranks if not (directory / rank_file("profiler_info", r)).is_file()]
    written = analyse_directory(directory, ranks=pending, progress=False, leave_out_failed=True) if pending else []
    return written + _write_cluster(directory)


def verdict_line(directory: Path, rank: int) -> str:
    """One line for the end of an analysis: where the outputs are, the verdict, and what to run next."""
    directory = Path(directory)
    report = read_document(directory / rank_file("report", rank), "report")
    steps = report.get("steps") if isinstance(report.get("steps"), dict) else {}
    findings = report.get("findings") if isinstance(report.get("findings"), list) else []
    top = findings[0].get("title", "") if findings and isinstance(findings[0], dict) else ""
    verdict = str(report.get("verdict", "?"))
    reason = f" — {top}" if verdict != "balanced" and top else ""
    source = steps.get("source", "marked")
    how = "" if source == "marked" else f" ({'inferred' if source == 'inferred' else 'one step: no step markers'})"
    return (
        f"profview: {steps.get('analysed', 0)} steps{how} of rank {rank} analysed into {directory}; verdict: "
        f"{verdict}{reason}. Next: profview {directory}"
    )
