"""The `profview` command: view a profiled run, re-run its analysis, import captures, compare runs.

    profview DIR                 build the HTML report and serve it on 127.0.0.1
    profview DIR --output F      write the report to F only
    profview DIR --summary       print the step breakdown, top ops and verdict
    profview analyse DIR         re-run analysis from DIR/raw and rewrite the output files
    profview compare BASE NEW    BASE -> NEW: step-time, op and queue deltas, findings, a CI verdict
    profview watch DIR           a live terminal view of a recording as it grows
    profview run SCRIPT [ARGS]   run a script with profiling on (no code change), watch it live
    profview import PATH -o OUT  a capture (Kineto trace, Ascend JOB, MindSpore directory, ...) -> profview outputs
                                 (import-kineto / import-ascend: the same with the format named)
    profview export DIR --to tensorboard|mlflow   the step breakdown and verdict into a tracker
    profview export DIR --chrome [--steps A:B]    the Chrome trace (of every event, or some steps) from the event file

`profview DIR` also opens any capture `profview import` reads, directly (viewer/inputs.py); the formats
are those of profiler.importers.registry. Subcommands live in COMMANDS: adding one is one entry.
Every failure the user can fix is reported as one sentence on stderr with a non-zero exit.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from profiler._version import __version__
from profiler.errors import InputError, ProfviewError
from profiler.memory import return_freed_memory
from profiler.postprocess.imported import ASCEND_FORMATS, DEFAULT_MEMORY_LIMIT
from profiler.progress import Progress

DEFAULT_COMMAND = "view"


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, how to declare its arguments, and what it runs."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    runs_user_code: bool = False  # the user's script runs in this process: its memory is left as it is


def parse_steps(text: str) -> tuple[Optional[int], Optional[int]]:
    """`A:B` (inclusive, either side optional) or a single step `A`."""
    first, sep, last = text.partition(":")
    try:
        a = int(first) if first.strip() else None
        b = (int(last) if last.strip() else None) if sep else a
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps wants A:B (step numbers, e.g. 10:20), not {text!r}") from None
    if a is not None and b is not None and b < a:
        raise argparse.ArgumentTypeError(f"--steps {text}: the last step comes before the first")
    return a, b


def parse_port(text: str) -> int:
    """A TCP port for --port: a whole number from 1 to 65535."""
    try:
        port = int(text.strip())
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"--port wants a port number from 1 to 65535 (leave it out for a free one), not {text[:40]!r}"
        )
    return port


def _configure_view(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", type=Path, help="a profview output directory (e.g. ./profiler_data)")
    out = p.add_argument_group("what to produce (default: build the report and serve it)")
    out.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=Path,
        help="write the self-contained HTML report to FILE and exit (no server)",
    )
    out.add_argument(
        "-s", "--summary", action="store_true", help="print a text summary (step breakdown, top ops, verdict) and exit"
    )
    sel = p.add_argument_group("what to show")
    sel.add_argument("-r", "--rank", type=int, metavar="R", help="the rank to show (default: the lowest found)")
    sel.add_argument(
        "--steps",
        type=parse_steps,
        metavar="A:B",
        help="only steps A to B (inclusive); also the timeline's detailed window",
    )
    sel.add_argument(
        "--compare",
        metavar="NEW",
        type=Path,
        help="add a Compare tab: DIR (BASE) against NEW (a profview directory or a trace)",
    )
    srv = p.add_argument_group("serving")
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to serve on (default 127.0.0.1; anything else is reachable from other machines)",
    )
    srv.add_argument(
        "--port", type=parse_port, default=0, metavar="P", help="port to serve on, 1-65535 (default: a free one)"
    )
    srv.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    srv.add_argument(
        "--live",
        action="store_true",
        help="follow DIR's recording while it runs: serve the report of its recent steps and "
        "refresh the Overview and Data pipeline pages every few seconds",
    )


def run_view(args: argparse.Namespace) -> int:
    """Load DIR, then print a summary, write the report, or serve it (live with --live)."""
    if args.live:
        return run_live(args)
    from viewer.context import Context, Options
    from viewer.inputs import load_input
    from viewer.report import build_report
    from viewer.summary import render

    progress = Progress(enabled=sys.stderr.isatty(), delay_s=1.0)
    started = time.monotonic()
    with progress.reporting():  # opening a trace imports it: its reading and stages show
        runs = load_input(args.dir)
        compared = load_input(args.compare) if args.compare is not None else None
    ctx = Context(runs, Options(rank=args.rank, steps=args.steps), progress, compare=compared)
    ctx.run  # noqa: B018 -- validates --rank before any work
    if args.summary:
        sys.stdout.write(render(ctx))
        if ctx.compare:
            from viewer.pages.compare import comparison, render_text

            sys.stdout.write("\n" + render_text(comparison(ctx.runs, ctx.compare, args.rank)))
        if args.output is None:
            return 0
    if args.output is not None:
        write_report(ctx, args.output, started)
        return 0
    html = encode_report(build_report(ctx))
    progress.done()
    from viewer.server import fixed, serve

    serve(
        fixed(html),
        args.host,
        args.port,
        open_browser=not args.no_browser,
        announce=lambda line: print(line, file=sys.stderr, flush=True),
    )
    return 0


def run_live(args: argparse.Namespace) -> int:
    """Serve the live report of a recording in progress (viewer.live_report)."""
    if args.output is not None or args.summary or args.compare is not None or args.steps is not None:
        raise InputError(
            "--live serves the report of a recording while it runs; it does not combine with "
            "--output, --summary, --compare or --steps"
        )
    from viewer.live_report import serve_live

    serve_live(
        args.dir,
        args.host,
        args.port,
        rank=args.rank,
        open_browser=not args.no_browser,
        announce=lambda line: print(line, file=sys.stderr, flush=True),
    )
    return 0


def write_report(ctx, path: Path, started: float) -> None:
    """Build the HTML report of `ctx` and write it to `path`, saying how big and how long."""
    from viewer.report import build_report

    html = encode_report(build_report(ctx))
    ctx.progress.done()
    try:
        path.write_bytes(html)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"profview: wrote {path} ({len(html) / 1e6:.1f} MB in {time.monotonic() - started:.1f} s)", file=sys.stderr)


def encode_report(html: str) -> bytes:
    """The report as UTF-8. Page text is escaped (viewer.html); a lone surrogate that still slipped
    through (a path from a non-UTF-8 directory name) is written as its escape, never an error."""
    return html.encode("utf-8", errors="backslashreplace")


def parse_percent(text: str) -> float:
    """`5%` or `5` for --fail-if-slower."""
    from profiler.analysis.compare import parse_percent as parse

    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--fail-if-slower wants a finite percentage such as 5%, not {text[:40]!r}"
        ) from None


def _configure_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", metavar="BASE", type=Path, help="the run before (a profview directory or a Kineto trace)")
    p.add_argument("new", metavar="NEW", type=Path, help="the run after")
    p.add_argument(
        "--fail-if-slower",
        metavar="PCT",
        type=parse_percent,
        dest="fail_if_slower",
        help="exit 1 when NEW's mean step is significantly slower than BASE's (95 %% interval above 0) "
        "and by more than PCT %% (a CI gate; docs/tuning-guide.md)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        type=Path,
        help="write the comparison as JSON to FILE ('-': stdout, instead of the text)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", type=Path, help="also write an HTML report of BASE with a Compare tab"
    )
    p.add_argument("-r", "--rank", type=int, metavar="R", help="the rank to compare (default: the lowest found)")


def run_compare(args: argparse.Namespace) -> int:
    """Print (or write as JSON) BASE -> NEW and return the verdict's exit code: 1 when the gate fails."""
    import json

    from viewer.context import Context, Options
    from viewer.inputs import load_input
    from viewer.pages.compare import comparison, render_text

    started = time.monotonic()
    base, new = load_input(args.base), load_input(args.new)
    result = comparison(base, new, args.rank, args.fail_if_slower)
    doc = json.dumps(result.to_json(), indent=2, sort_keys=False) + "\n"
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(doc)
    else:
        sys.stdout.write(render_text(result))
        if args.json is not None:
            try:
                args.json.write_text(doc)
            except OSError as exc:
                raise InputError(f"cannot write {args.json}: {exc.strerror or exc}") from None
    if args.output is not None:
        options = Options(rank=args.rank, fail_if_slower_pct=args.fail_if_slower)
        write_report(
            Context(base, options, Progress(enabled=sys.stderr.isatty(), delay_s=1.0), compare=new),
            args.output,
            started,
        )
    return int(result.verdict["exit_code"])


def parse_threshold(text: str) -> tuple[str, float]:
    """`name=value` for --threshold (names and defaults: docs/formats.md, "report"): a finite number
    >= 0, a whole number for the thresholds that count (warmup_steps, launch_ops_per_step)."""
    from profiler.analysis.advisor import DEFAULT_THRESHOLDS
    from profiler.analysis.advisor import parse_threshold as parse

    try:
        name, value = parse(text)
    except ProfviewError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"--threshold {name} wants a finite number >= 0, not {text.partition('=')[2][:40]!r}"
        )
    if isinstance(DEFAULT_THRESHOLDS[name], int) and value != int(value):
        raise argparse.ArgumentTypeError(f"--threshold {name} counts, so it wants a whole number, not {value:g}")
    return name, value


def _configure_analyse(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", type=Path, help="a profview directory with a raw/ store")
    p.add_argument(
        "--threshold",
        metavar="NAME=VALUE",
        type=parse_threshold,
        action="append",
        default=[],
        help="override an advisor threshold, e.g. --threshold input_gap_pct=20 (repeatable; "
        "docs/formats.md lists them)",
    )


def run_analyse(args: argparse.Namespace) -> int:
    """Re-run analysis from DIR/raw (profiler.postprocess.recording.analyse_directory) and list the files written."""
    try:
        from profiler.postprocess.recording import analyse_directory
    except ImportError as exc:
        raise InputError(f"this profview install cannot analyse ({exc})") from None
    if not args.dir.is_dir():
        raise InputError(f"{args.dir} does not exist or is not a directory")
    from profiler.formats.names import info_files
    from profiler.postprocess.recording import verdict_line

    written = analyse_directory(args.dir, thresholds=dict(args.threshold))
    for path in written:
        print(path)
    _print_run_warnings(written)  # a store a kill cut short, chunks skipped: said here, not only in the report
    for rank in info_files(args.dir):
        print(verdict_line(args.dir, rank), file=sys.stderr)
    return 0


def _positive_int(text: str) -> int:
    """An argument that is a whole number >= 1 (argparse: a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


#: --memory-limit's units (decimal, as the limit is stated: 1G is 10**9 bytes)
SIZE_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _memory_size(text: str) -> Optional[int]:
    """A memory size (1G, 800M, 1.5GB, a number of bytes), or None for "none" (argparse: a usage error otherwise)."""
    if text.strip().lower() == "none":
        return None
    size = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)B?\s*", text, re.IGNORECASE)
    value = float(size[1]) * SIZE_UNITS[size[2].upper()] if size else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size such as 1G, 800M or none")
    return int(value)


def _capture(text: str) -> Path | str:
    """A capture argument: a URL stays text (fsspec opens it), anything else is a local path."""
    from profiler.postprocess.remote import is_url

    return text if is_url(text) else Path(text)


def _configure_import(p: argparse.ArgumentParser, data_origin: Optional[str] = None) -> None:
    """`profview import`'s arguments; an alias (`import-kineto`) names its format instead of --from."""
    p.add_argument(
        "path",
        metavar="PATH",
        type=_capture,
        nargs="+",
        help="a capture: a PyTorch profiler (Kineto) trace (.json or .json.gz), an Ascend profiling JOB "
        "directory (or a directory of JOB* directories), a MindSpore profiler output directory, or "
        "a format an installed package adds; its format is recognised from its content. Several "
        "captures (or a directory of traces): each rank's, imported into one directory with the cluster files. "
        "A URL (s3://BUCKET/DIR, gs://..., any fsspec filesystem) names a trace or a directory of traces",
    )
    p.add_argument("-o", "--output", metavar="OUT_DIR", type=Path, required=True, help="where to write the outputs")
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="import N captures at once, each in its own process (each holds its trace in memory; default 1)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="import the captures as tasks of a Dask cluster (tcp://HOST:8786; pip install 'profview[dask]'): "
        "every worker must see the captures and OUT_DIR at the same paths (a shared file system)",
    )
    p.add_argument(
        "--memory-limit",
        type=_memory_size,
        default=DEFAULT_MEMORY_LIMIT,
        metavar="SIZE",
        help="keep each import process's memory under SIZE (1G, 800M; default 1G) by handing the big arrays it "
        "spills to disk back to the page cache whenever it nears SIZE; none: only between stages "
        "(docs/kineto.md, 'The memory limit')",
    )
    p.add_argument(
        "--spill-dir",
        type=Path,
        metavar="DIR",
        help="spill a big import's arrays into files in DIR (default: on OUT_DIR's disk); a disk, not a RAM "
        "file system",
    )
    if data_origin is None:
        p.add_argument(
            "--from",
            dest="data_origin",
            metavar="FORMAT",
            help="read PATH as this format instead of recognising it: kineto, ascend, mindspore, or an installed one",
        )
    else:
        p.set_defaults(data_origin=data_origin)
    if data_origin in (None, "ascend"):
        p.add_argument(
            "--format",
            choices=sorted(ASCEND_FORMATS),
            default="profview",
            help="profview: one rank per device (default); mindspore: the MindSpore/MindInsight 2020 files "
            "of each device of an Ascend JOB directory; both",
        )
    else:
        p.set_defaults(format="profview")


def run_import(args: argparse.Namespace) -> int:
    """Import a capture (profiler.postprocess.imported.import_capture), or several into one directory with
    their cluster files (profiler.postprocess.import_many), and list the files written."""
    from profiler.postprocess.imported import SpillSetting, import_capture

    (single,) = args.path if len(args.path) == 1 else (None,)
    spill = SpillSetting(args.spill_dir, args.memory_limit)
    if (
        args.scheduler is None
        and isinstance(single, Path)
        and not (single.is_dir() and _holds_traces_only(single, args.data_origin))
    ):
        # a big trace takes minutes: its reading (a share of the file) and each later stage on a terminal
        with Progress("import", enabled=sys.stderr.isatty(), delay_s=1.0) as progress, progress.reporting():
            written = import_capture(single, args.output, args.data_origin, ASCEND_FORMATS[args.format], spill)
        _print_run_warnings(written)
        _say_memory_over_limit(args.memory_limit)
        return _print_paths(written)
    if args.format != "profview":
        raise InputError("--format mindspore / both takes one Ascend JOB directory, not several captures")
    from profiler.postprocess.import_many import dask_client, import_captures

    client = dask_client(args.scheduler) if args.scheduler is not None else None
    try:
        with Progress("import", delay_s=1.0) as progress:
            written = import_captures(args.path, args.output, args.data_origin, args.jobs, progress, client, spill)
    finally:
        if client is not None:
            client.close()
    _print_run_warnings(written)
    if client is None:  # a Dask worker's memory is its own
        _say_memory_over_limit(args.memory_limit)
    return _print_paths(written)


def _holds_traces_only(path: Path, data_origin: Optional[str]) -> bool:
    """A directory that is no capture itself (profview imports the Kineto traces in it); a directory read
    as a named format other than Kineto is that format's to refuse."""
    from profiler.formats.names import info_files
    from profiler.importers.registry import detect

    return data_origin in (None, "kineto") and detect(path) is None and not info_files(path)


def _configure_watch(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", type=Path, help="a recording's output directory (its raw/ store grows)")
    p.add_argument(
        "-r",
        "--rank",
        type=int,
        metavar="R",
        help="the rank whose recent steps the advisor reads (default: the slowest rank)",
    )
    p.add_argument(
        "--window", type=int, default=100, metavar="N", help="the advisor reads the last N steps (default 100)"
    )
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="refresh every S seconds (default 1)")
    p.add_argument(
        "--plain",
        action="store_true",
        help="print plain key=value lines instead of the live view (the default when stdout is not a terminal)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up (exit 1) when no recording has appeared in DIR after SECONDS (default: wait; "
        "DIR may not exist yet)",
    )


def run_watch(args: argparse.Namespace) -> int:
    """Follow DIR's raw store live until its recording ends (viewer.watch)."""
    from viewer.watch import watch

    if args.window < 1 or args.interval <= 0 or (args.timeout is not None and not args.timeout > 0):
        raise InputError(
            "--window wants a positive number of steps, --interval and --timeout a positive number of seconds"
        )
    status = watch(
        args.dir,
        interval_s=args.interval,
        window_steps=args.window,
        rank=args.rank,
        plain=True if args.plain else None,
        timeout_s=args.timeout,
    )
    if status:
        raise ProfviewError(
            f"the recording in {args.dir} stopped without an end-of-recording chunk (its process "
            f"exited or was killed); `profview analyse {args.dir}` analyses what it flushed"
        )
    return 0


def _configure_run(p: argparse.ArgumentParser) -> None:
    from viewer.run import configure

    configure(p)


def run_run(args: argparse.Namespace) -> int:
    """Run a script with profiling on and the live view (viewer.run); the script's exit status."""
    from viewer.run import run

    return run(args)


def _configure_export(p: argparse.ArgumentParser) -> None:
    from profiler.integrations.trackers.export import TRACKERS

    p.add_argument("dir", metavar="DIR", type=Path, help="an analysed profview output directory")
    p.add_argument(
        "-r",
        "--rank",
        type=int,
        action="append",
        metavar="R",
        help="export this rank only (repeatable; default: every analysed rank)",
    )
    target = p.add_argument_group("targets (one of them)")
    target.add_argument(
        "--to",
        choices=sorted(TRACKERS),
        metavar="TRACKER",
        help=f"an experiment tracker ({', '.join(sorted(TRACKERS))}): per-step phases as "
        "scalars / metrics, the verdict and top findings as text / tags (docs/integrations.md)",
    )
    target.add_argument(
        "--chrome",
        action="store_true",
        help="the Chrome trace (Perfetto, chrome://tracing) of every event, from the event file "
        "events_{rank}.arrow: what analyse() writes as timeline_{rank}.json for a run within "
        "its event limit, byte for byte (docs/formats.md)",
    )
    chrome = p.add_argument_group("--chrome options")
    chrome.add_argument("--steps", type=parse_steps, metavar="A:B", help="only the events of steps A to B (inclusive)")
    chrome.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write the trace to FILE (- for stdout; .gz compresses; default DIR/timeline_{rank}_full.json "
        "or DIR/timeline_{rank}_steps_A-B.json)",
    )
    tracker = p.add_argument_group("tracker options")
    tracker.add_argument(
        "--logdir",
        type=Path,
        metavar="PATH",
        help="tensorboard: the log directory (default DIR/tensorboard); rank r goes to PATH/rank<r>",
    )
    tracker.add_argument(
        "--tracking-uri",
        metavar="URI",
        help=(
            "mlflow: the tracking store (default $MLFLOW_TRACKING_URI, else sqlite:///DIR/mlflow.db, "
            "MLflow's own default; a file store: file:PATH)"
        ),
    )
    tracker.add_argument(
        "--experiment", default="profview", metavar="NAME", help="mlflow: the experiment (default: profview)"
    )
    tracker.add_argument(
        "--run-name", metavar="NAME", help="mlflow: run name (default: DIR's name); ' rank r' is appended"
    )


def run_export(args: argparse.Namespace) -> int:
    """Write DIR's analysed ranks into the tracker of --to (profiler.integrations.trackers.export), or
    their Chrome trace from the event file with --chrome (profiler.export.chrome_from_events)."""
    if (args.to is None) == (not args.chrome):
        raise InputError(
            "profview export wants one target: --to TRACKER (tensorboard or mlflow) or --chrome "
            "(the Chrome trace from the event file)"
        )
    if not args.chrome and (args.steps is not None or args.output is not None):
        raise InputError("--steps and -o go with --chrome (the Chrome trace); a tracker export takes every step")
    if args.chrome:
        from profiler.export.chrome_from_events import export_directory_traces

        first, last = args.steps if args.steps is not None else (None, None)
        for path in export_directory_traces(args.dir, args.rank, first, last, args.output):
            print(path)
        return 0
    from profiler.integrations.trackers.export import Destination, export_directory

    destination = Destination(
        args.dir, logdir=args.logdir, tracking_uri=args.tracking_uri, experiment=args.experiment, run_name=args.run_name
    )
    for line in export_directory(args.to, destination, args.rank):
        print(f"profview: {line}", file=sys.stderr)
    return 0


def _say_memory_over_limit(limit: Optional[int]) -> None:
    """One line on stderr when an import process's peak memory passed --memory-limit: the watcher bounds only
    what is spilled (docs/kineto.md, "The memory limit")."""
    from profiler.spill import peak_resident_bytes

    peak = peak_resident_bytes()
    if limit is not None and peak > limit:
        print(
            f"profview: warning: the import's peak memory, {peak / 1e6:,.0f} MB, passed --memory-limit "
            f"{limit / 1e6:,.0f} MB: what cannot be spilled (Python itself, each stage's own "
            "tables) did not fit under it",
            file=sys.stderr,
        )


def _print_run_warnings(written: Sequence[Path]) -> None:
    """Each imported or analysed rank's warnings (what its info file says was skipped, guessed or cut), one line each on
    stderr, but for those its importer has already said while reading."""
    from profiler.formats.documents import read_profiler_info
    from profiler.formats.names import INFO_PATTERN

    for path in written:
        match = INFO_PATTERN.match(path.name)
        if match is None:
            continue
        for text in read_profiler_info(path).get("warnings", []):
            if not any(str(text) in shown for shown in _SHOWN_WARNINGS):
                print(f"profview: warning: rank {match.group(1)}: {text}", file=sys.stderr)


def _print_paths(paths: Sequence[Path]) -> int:
    for path in paths:
        print(path)
    return 0


#: Every subcommand.
COMMANDS: dict[str, Command] = {
    DEFAULT_COMMAND: Command(
        "build the HTML report of DIR and serve it (the default: `profview DIR`)", _configure_view, run_view
    ),
    "analyse": Command(
        "re-run the analysis of DIR from its raw store and rewrite the output files", _configure_analyse, run_analyse
    ),
    "compare": Command(
        "compare two runs, BASE -> NEW: step phases, ops, queues, findings; exit 1 when --fail-if-slower is exceeded",
        _configure_compare,
        run_compare,
    ),
    "run": Command(
        "run a Python script (or -m module) with profiling on and no change to it: the live view while "
        "it runs, the analysis when it ends; exits with the script's status",
        _configure_run,
        run_run,
        runs_user_code=True,
    ),
    "watch": Command(
        "follow a recording live in the terminal as its raw store grows: step rate and times, the "
        "split, the advisor's verdict on the recent steps, queues, memory, ranks",
        _configure_watch,
        run_watch,
    ),
    "import": Command(
        "import a capture into a profview output directory: a PyTorch profiler (Kineto) trace, an "
        "Ascend JOB directory (--format: and/or its MindSpore files), a MindSpore profiler output "
        "directory, or a format an installed package adds",
        _configure_import,
        run_import,
    ),
    "import-ascend": Command(
        "the same as `profview import --from ascend` (an Ascend profiling JOB directory)",
        functools.partial(_configure_import, data_origin="ascend"),
        run_import,
    ),
    "import-kineto": Command(
        "the same as `profview import --from kineto` (a PyTorch profiler trace)",
        functools.partial(_configure_import, data_origin="kineto"),
        run_import,
    ),
    "export": Command(
        "write an analysed run's step breakdown, verdict and top findings into an experiment "
        "tracker (--to tensorboard or mlflow), or its Chrome trace from the event file (--chrome)",
        _configure_export,
        run_export,
    ),
}

EPILOG = """examples:
  profview ./profiler_data                    report in your browser (served on 127.0.0.1)
  profview ./profiler_data -o report.html     write a self-contained report file
  profview ./profiler_data --summary          text summary in the terminal
  profview ./profiler_data --rank 1 --steps 100:110
  profview analyse ./profiler_data            re-run analysis from ./profiler_data/raw
  profview compare before/ after/ --fail-if-slower 5%
                                              CI gate: exit 1 when after/ is significantly >5 % slower
  profview before/ --compare after/           report of before/ with a Compare tab
  profview watch ./profiler_data              live view of a recording while it runs
  profview ./profiler_data --live             the report of a recording while it runs, refreshed
  profview run train.py --lr 0.1              profile a script with no code change (live view, analysis)
  profview run -o out -m mypackage.train      ... a module, recorded into out/
  profview import trace.json.gz -o out       a capture (a PyTorch profiler trace, an Ascend JOB or a
                                              MindSpore directory, ...) -> profview files
  profview import JOB3 -o out --format both   Ascend JOB -> profview + MindSpore files
  profview JOB3 -o report.html                (any capture `import` reads) report directly
  profview export ./profiler_data --to tensorboard --logdir runs/
                                              per-step phases and the verdict into TensorBoard (or --to mlflow)
  profview export ./profiler_data --chrome --steps 100:110
                                              the Chrome trace of steps 100-110 (every event without --steps)

`profview COMMAND --help` describes a command's options. docs/viewer.md has more."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command of COMMANDS."""
    parser = argparse.ArgumentParser(
        prog="profview",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="See where every millisecond of every training step went, and what to fix first.\n\n"
        "usage forms:\n  profview DIR [options]      same as `profview view DIR`\n"
        "  profview COMMAND ...",
    )
    parser.add_argument("--version", action="version", version=f"profview {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help[0].upper() + command.help[1:] + ".")
        command.configure(p)
        p.set_defaults(run=command.run)
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    """`profview DIR ...` means `profview view DIR ...`."""
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        return [DEFAULT_COMMAND] + argv
    return argv


#: The warnings this command has printed (an import's run warnings are not said twice).
_SHOWN_WARNINGS: list[str] = []


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings from the analysis reach the terminal as one line, without source locations."""
    _SHOWN_WARNINGS.append(str(message))
    print(f"profview: warning: {message}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `profview` console script; returns the exit status."""
    args_list = _with_default_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    if not args_list:
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(args_list)
    warnings.showwarning = _show_warning
    if not COMMANDS[args.command].runs_user_code:
        return_freed_memory()  # a big trace's freed tables go back to the system (profiler/memory.py)
    try:
        return args.run(args)
    except ProfviewError as exc:
        print(f"profview: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the file system refused (a name too long, a full disk): one sentence, no traceback
        where = exc.filename if isinstance(exc.filename, (str, bytes, Path)) else None
        shown = os.fsdecode(where) if where is not None else "a file"
        shown = shown if len(shown) <= 200 else f"{shown[:100]}...{shown[-100:]} ({len(shown)} characters)"
        print(f"profview: error: cannot use {shown}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("profview: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
