"""Importing the captures of several ranks at once (`profview import A B C -o DIR --jobs N`, or a directory
of traces): each capture is imported in its own process, `jobs` at a time, into a directory of its own
inside DIR, then its files move into DIR once no two captures turned out to be the same rank; the
cluster files follow when the ranks belong to one job (docs/kineto.md, "Many ranks at once").

A capture that cannot be imported costs only itself: the others are imported, then one sentence
names what failed (the import exits non-zero). Each worker hands back the little the merged timeline
shows of its ranks (`cluster_view`: steps, spans, collectives), so no trace is read twice.

Past one machine, the workers are a Dask cluster's (`client`: a `dask.distributed.Client`, `profview
import --scheduler tcp://HOST:8786`): each task imports one capture where the workers see it (a shared
file system: the captures and DIR at the same paths on every worker) and writes that rank's files
there; only the cluster views travel back, and the cluster files are written here. A capture named by
URL (`s3://...`: remote.py) is copied to a local temporary directory by the process that imports it.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Optional

from profiler.errors import ProfviewError
from profiler.formats.names import info_files
from profiler.importers.registry import detect
from profiler.memory import return_freed_memory
from profiler.model import Run
from profiler.postprocess.imported import DEFAULT_SPILL, SpillSetting, capture_format, spilling_beside, write_runs
from profiler.postprocess.remote import Capture, capture_name, is_url, local_copy, traces_at
from profiler.progress import Progress

#: File name endings of the traces a directory of captures is searched for.
TRACE_SUFFIXES = (".json", ".json.gz")


def captures_in(paths: Sequence[Capture]) -> list[Capture]:
    """The captures `paths` name: each path that is a capture itself, else (a directory) the traces in it,
    sorted by name; a URL names a trace or a directory of traces."""
    out: list[Capture] = []
    for path in paths:
        if is_url(path):
            out += traces_at(path, TRACE_SUFFIXES)
        elif path.is_dir() and detect(path) is None:
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise ProfviewError(f"{path} holds no capture and no trace (*.json, *.json.gz) to import")
            out += found
        else:
            out.append(path)
    return out


def import_captures(
    paths: Sequence[Capture],
    out_dir: Path,
    data_origin: Optional[str] = None,
    jobs: int = 1,
    progress: Optional[Progress] = None,
    client: Any = None,
    spill: SpillSetting = DEFAULT_SPILL,
) -> list[Path]:
    """Import every capture of `paths` (`captures_in`) into `out_dir`, `jobs` processes at a time (or as
    tasks of the Dask `client`'s workers), then the cluster files; the files written. ProfviewError names
    the captures that failed, after the others. `spill` holds in each process (or Dask worker)."""
    captures = captures_in(paths)
    progress = progress or Progress.silent()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=out_dir))
    try:
        done, failed, views = _import_each(captures, staging, data_origin, jobs, progress, client, spill)
        written = _move_ranks(done, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if len(info_files(out_dir)) > 1:
        from profiler.export.cluster import write_cluster_outputs

        progress.stage("writing the cluster files")
        written += write_cluster_outputs(out_dir, lambda directory, rank: views[rank])
    if failed:
        path, reason = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise ProfviewError(f"{len(failed)} of {len(captures)} captures were not imported{more}: {path}: {reason}")
    return written


def _import_each(
    captures: list[Capture],
    staging: Path,
    data_origin: Optional[str],
    jobs: int,
    progress: Progress,
    client: Any,
    spill: SpillSetting,
) -> tuple[list[tuple[Capture, Path]], list[tuple[Capture, str]], dict[int, Run]]:
    """Import each capture into a directory of its own under `staging`: (capture, directory) of those
    imported, (capture, why) of the others, both in the captures' order, and each rank's cluster view."""
    targets = {capture: staging / str(i) for i, capture in enumerate(captures)}
    outcome: dict[Capture, tuple[Optional[str], dict[int, Run]]] = {}
    if client is not None:
        outcome = _import_on_dask(client, targets, data_origin, progress, spill)
    elif jobs <= 1 or len(captures) == 1:
        for i, capture in enumerate(captures):
            progress.stage("importing", i, len(captures))
            outcome[capture] = _import_one(capture, targets[capture], data_origin, spill)
    else:
        # spawn: a fresh interpreter per worker (the caller may hold threads, which fork would copy broken)
        context = multiprocessing.get_context("spawn")
        workers = min(jobs, len(captures))
        with ProcessPoolExecutor(workers, mp_context=context, initializer=return_freed_memory) as pool:
            futures = {pool.submit(_import_one, c, targets[c], data_origin, spill): c for c in captures}
            for i, future in enumerate(as_completed(futures), 1):
                outcome[futures[future]] = future.result()
                progress.stage("importing", i, len(captures))
    done = [(c, targets[c]) for c in captures if outcome[c][0] is None]
    failed = [(c, str(outcome[c][0])) for c in captures if outcome[c][0] is not None]
    views = {rank: view for c in captures for rank, view in outcome[c][1].items()}
    return done, failed, views


def _import_on_dask(
    client: Any, targets: dict[Capture, Path], data_origin: Optional[str], progress: Progress, spill: SpillSetting
) -> dict[Capture, tuple[Optional[str], dict[int, Run]]]:
    """Each capture imported by a task on the Dask `client`'s workers; a task that fails for any reason (its
    worker died, the capture is not where the worker looks) costs only its capture."""
    from distributed import as_completed as dask_completed

    futures = {
        client.submit(
            _import_one,
            capture,
            target,
            data_origin,
            spill,
            pure=False,
            key=f"profview-import-{i}-{capture_name(capture)}",
        ): capture
        for i, (capture, target) in enumerate(targets.items())
    }
    outcome: dict[Capture, tuple[Optional[str], dict[int, Run]]] = {}
    for i, future in enumerate(dask_completed(futures), 1):
        try:
            outcome[futures[future]] = future.result()
        except Exception as exc:  # a worker's failure, whatever it is, is the capture's
            outcome[futures[future]] = (f"its Dask task failed ({type(exc).__name__}: {exc})", {})
        progress.stage("importing", i, len(futures))
    return outcome


def dask_client(address: str, timeout_s: float = 10.0) -> Any:
    """A `dask.distributed.Client` connected to the scheduler at `address`; ProfviewError in one sentence
    when Dask is not installed or the scheduler cannot be reached."""
    try:
        from distributed import Client
    except ImportError:
        raise ProfviewError("--scheduler needs Dask's distributed scheduler: pip install 'profview[dask]'") from None
    try:
        return Client(address, timeout=timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ProfviewError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: {exc})") from None


def _import_one(
    capture: Capture, target: Path, data_origin: Optional[str], spill: SpillSetting
) -> tuple[Optional[str], dict[int, Run]]:
    """Import one capture into `target` (in a worker process), as `import_capture` does (a URL's from a local
    copy): (None, the cluster view of each of its ranks), or (why it could not be, {})."""
    from profiler.export.cluster import cluster_view

    try:
        if is_url(capture):
            with local_copy(capture) as local:
                runs = _import_local(local, target, data_origin, capture, spill)
        else:
            runs = _import_local(capture, target, data_origin, capture, spill)
    except ProfviewError as exc:
        return str(exc), {}
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}", {}
    return None, {run.rank: cluster_view(run) for run in runs}


def _import_local(
    path: Path, target: Path, data_origin: Optional[str], source: Capture, spill: SpillSetting
) -> list[Run]:
    """The runs of the capture at the local `path`, written into `target` (profiler_info names `source`)."""
    from profiler.analysis.steps import ensure_steps
    from profiler.importers.registry import importer_named

    importer = importer_named(data_origin) if data_origin is not None else capture_format(path)
    with spilling_beside(target, spill):
        runs = [ensure_steps(run) for run in importer.runs(path)]
        if source != path:  # a URL's local copy: the run was read from the URL
            for run in runs:
                run.info["source_path"] = str(source)
        write_runs(runs, target, source=source)
    return runs


def _move_ranks(done: list[tuple[Capture, Path]], out_dir: Path) -> list[Path]:
    """Move each imported capture's files into `out_dir`, after checking no rank was imported twice."""
    owner: dict[int, Capture] = {}
    for capture, directory in done:
        for rank in info_files(directory):
            if rank in owner:
                raise ProfviewError(
                    f"{owner[rank]} and {capture} are both rank {rank}: import them into different directories"
                )
            owner[rank] = capture
    written = []
    for _, directory in done:
        for path in sorted(directory.iterdir()):
            target = out_dir / path.name
            os.replace(path, target)
            written.append(target)
    return written
