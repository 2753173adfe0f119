"""Profile a script with no change to it: the launcher `profview run` runs in the script's own process.

    python -m profiler.auto [--output DIR] [--ops] [--no-attach] [--no-data] [--] script.py [args...]
    python -m profiler.auto [options] -m package.module [args...]

`AutoProfiler` creates a `Profiler` before the script starts, and analyses the recording when the
script ends: normally, with an exception, by `sys.exit`, on Ctrl-C (SIGINT) or SIGTERM. The
script's exit status is kept: its exit code, 1 and its traceback for an exception, death by the
same signal for SIGINT / SIGTERM. While the script runs, PyTorch is followed without any change
to the script (integrations/torch_auto.py: the first optimizer is attached, every DataLoader fetch
is timed; patched when the script imports torch, restored at the end).

A script that creates a `Profiler` of its own (or uses the Trainer / Lightning integrations) is
left alone: when that Profiler starts, the automatic one stops, removes its raw file and its
patches, and analyses nothing. Under `torchrun`, each rank's process records into the same
directory (its rank from the RANK / WORLD_SIZE environment); rank 0 writes the cluster files.

`profview run` (viewer/run.py) starts this module in a child process and shows the live view;
it reads the events this module sends on the file descriptor named by PROFVIEW_RUN_FD (JSON lines:
the output directory, and where the script's own Profiler records when the automatic one steps aside).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from profiler.errors import ProfviewError
from profiler.formats.names import rank_file
from profiler.integrations.patching import Patches
from profiler.integrations.torch_auto import TorchFollower
from profiler.profiler import Profiler
from profiler.schedule import schedule
from profiler.store.raw import raw_file_name

#: the environment variable naming the file descriptor `profview run` reads this module's events on
CONTROL_FD_ENV = "PROFVIEW_RUN_FD"
#: with --ops, the steps whose operators torch.profiler captures (one window, after a few steps)
OPS_SCHEDULE = dict(skip_first=5, wait=0, warmup=2, active=5, repeat=1)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so the recording is analysed before the process ends."""


class AutoProfiler:
    """A Profiler for a script that has none (see the module doc)."""

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        *,
        ops: bool = False,
        attach: bool = True,
        data: bool = True,
        advisor_thresholds: Optional[dict] = None,
        cluster_timeout_s: float = 120.0,
        control: Optional[Callable[[dict], None]] = None,
    ) -> None:
        self.output_path = Path(output_path)
        self.ops = ops
        self.follow_optimizer = attach
        self.time_data = data
        self.advisor_thresholds = advisor_thresholds
        self.cluster_timeout_s = cluster_timeout_s
        self.control = control or (lambda event: None)
        self.profiler: Optional[Profiler] = None
        self.torch: Optional[TorchFollower] = None
        self.active = False
        self.stepped_aside = False
        self._patches = Patches()
        self._created: list[Path] = []

    # ---- start / stop ----------------------------------------------------------------------

    def start(self) -> AutoProfiler:
        """Start recording and put the patches in place (torch's when the script imports it)."""
        self._created = [p for p in (self.output_path, self.output_path / "raw") if not p.exists()]
        kwargs: dict[str, Any] = {"advisor_thresholds": self.advisor_thresholds}
        if self.ops:
            kwargs["ops_schedule"] = schedule(**OPS_SCHEDULE)
        self.profiler = Profiler(self.output_path, **kwargs)
        self.active = True
        self._patches.replace(Profiler, "start", self._wrap_profiler_start(Profiler.start))
        self.torch = TorchFollower(
            self.profiler,
            self._patches,
            lambda: self.active,
            attach=self.follow_optimizer,
            data=self.time_data,
            ops=self.ops,
        )
        self.torch.install()
        self.control(
            {
                "event": "started",
                "output": str(self.output_path.resolve()),
                "rank": self.profiler.rank,
                "world_size": self.profiler.world_size,
                "pid": os.getpid(),
            }
        )
        return self

    def unpatch(self) -> None:
        """Put every patched function back."""
        self._patches.undo()

    def finish(self) -> list[Path]:
        """Stop and analyse (nothing when the script's own Profiler took over). Never raises: a failed
        analysis is one line on stderr, and the raw store stays for `profview analyse`."""
        self.unpatch()
        if not self.active or self.profiler is None:
            return []
        self.active = False
        try:
            written = self.profiler.analyse()
            written += self._cluster_without_dist()
            return written
        except ProfviewError as exc:
            print(
                f"profview run: the recording could not be analysed: {exc} (raw store: {self.output_path / 'raw'})",
                file=sys.stderr,
            )
        except KeyboardInterrupt:
            print(
                f"profview run: analysis interrupted; run `profview analyse {self.output_path}` to analyse the "
                "recording",
                file=sys.stderr,
            )
        except Exception as exc:  # never hide the script's own outcome behind an analysis failure
            print(
                f"profview run: the analysis failed ({type(exc).__name__}: {exc}); run `profview analyse "
                f"{self.output_path}` to retry",
                file=sys.stderr,
            )
        return []

    def _cluster_without_dist(self) -> list[Path]:
        """Rank 0 of a multi-rank job whose process group is gone by now (the script destroyed it):
        wait for the other ranks' outputs in the directory, then write the cluster files."""
        from profiler.capture.distributed import initialised_dist
        from profiler.postprocess.recording import analyse_cluster

        p = self.profiler
        if p is None or p.world_size <= 1 or p.rank != 0 or initialised_dist() is not None:
            return []
        deadline = time.monotonic() + self.cluster_timeout_s
        while time.monotonic() < deadline:
            if all((self.output_path / rank_file("profiler_info", r)).is_file() for r in range(p.world_size)):
                break
            time.sleep(0.2)
        return analyse_cluster(self.output_path)

    # ---- a script's own Profiler -----------------------------------------------------------

    def _wrap_profiler_start(self, original: Callable) -> Callable:
        auto = self

        @functools.wraps(original)
        def start(profiler: Profiler) -> Profiler:
            if auto.active and profiler is not auto.profiler:
                auto.step_aside()
                out = original(profiler)
                auto.control({"event": "stepped_aside", "output": str(Path(profiler.output_path).resolve())})
                print(
                    f"profview run: the script records with its own Profiler ({profiler.output_path}); "
                    "the automatic one stepped aside",
                    file=sys.stderr,
                )
                return out
            return original(profiler)

        return start

    def step_aside(self) -> None:
        """Stop the automatic recording and remove what it wrote and patched: the script profiles itself."""
        self.active = False
        self.stepped_aside = True
        p = self.profiler
        self.unpatch()
        if p is None:
            return
        p.stop()
        raw = p.output_path / "raw" / raw_file_name(p.rank, os.getpid())
        raw.unlink(missing_ok=True)
        for path in reversed(self._created):  # folders the automatic profiler made, when still empty
            try:
                path.rmdir()
            except OSError:
                pass


# ---- running the script ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m profiler.auto", description="Run a script with profview profiling it.")
    p.add_argument("-o", "--output", default="./profiler_data", help="where the recording and its outputs go")
    p.add_argument("--ops", action="store_true", help="also capture operators through torch.profiler on a few steps")
    p.add_argument("--no-attach", action="store_true", help="do not follow the first torch optimizer")
    p.add_argument("--no-data", action="store_true", help="do not time DataLoader fetches")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an advisor threshold for the analysis (repeatable)",
    )
    p.add_argument("--cluster-timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    p.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE ...",
        help="run a module as `python -m MODULE` does (the rest of the line is its arguments)",
    )
    p.add_argument("target", nargs=argparse.REMAINDER, help="the script and its arguments")
    return p


def split_target(args: argparse.Namespace) -> tuple[Optional[str], Optional[str], list[str]]:
    """(script, module, arguments) from the parsed command line."""
    rest = list(args.target)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.module is not None:
        if not args.module:
            raise ProfviewError("-m wants a module name (profview run -m package.module [args...])")
        return None, args.module[0], list(args.module[1:])
    if not rest:
        raise ProfviewError("name the script to run (profview run train.py [args...]) or a module (-m package.module)")
    return rest[0], None, rest[1:]


def _control_channel() -> Optional[Callable[[dict], None]]:
    fd = os.environ.pop(CONTROL_FD_ENV, None)
    if not fd or not fd.isdigit():
        return None
    try:
        stream = os.fdopen(int(fd), "w", buffering=1)
    except OSError:
        return None
    os.set_inheritable(int(fd), False)

    def send(event: dict) -> None:
        try:
            stream.write(json.dumps(event) + "\n")
        except OSError:
            pass

    return send


def _run_target(script: Optional[str], module: Optional[str], args: list[str]) -> None:
    if module is not None:
        sys.argv = [module, *args]  # sys.path[0] is the working directory, as for python -m
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    path = Path(script)
    if not path.exists():
        raise ProfviewError(f"{script} does not exist")
    sys.argv = [script, *args]
    sys.path[0] = str(path.resolve().parent)
    runpy.run_path(script, run_name="__main__")


#: seconds a SIGTERM may wait for the main thread to take it (it may be blocked in C code) before the
#: process exits without the analysis (the raw store holds everything flushed until then)
TERM_GRACE_S = 10.0


def _watch_for_stuck_termination(handled: threading.Event) -> None:
    """Python runs a signal handler only once the main thread is back in Python: a script blocked in C
    code (a collective, a store connect) would ignore SIGTERM. The C-level handler also writes the
    signal to a wake-up pipe; this thread reads it and, when SIGTERM's handler has not run within
    TERM_GRACE_S, ends the process with SIGTERM's exit status. (A script that installs its own
    wake-up fd, asyncio's loop, replaces this one: then SIGTERM waits for the main thread.)"""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        return

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data and not handled.wait(TERM_GRACE_S):
                print(
                    "profview run: the script did not stop on SIGTERM (blocked outside Python); exiting without "
                    "the analysis (run `profview analyse DIR`)",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="profview-term-watch", daemon=True).start()


def _own_frames(tb):
    """The traceback without this module's and runpy's frames (the script's own frames remain)."""
    skip = {__file__, runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    return tb


def main(argv: Optional[list[str]] = None) -> int:
    """Run the script under an AutoProfiler; exits as the script would have."""
    args = _parser().parse_args(argv)
    try:
        script, module, script_args = split_target(args)
        from profiler.analysis.advisor import parse_threshold

        thresholds = dict(parse_threshold(t) for t in args.threshold)
        if script is not None and not Path(script).is_file():
            raise ProfviewError(f"{script} does not exist or is not a file")
    except ProfviewError as exc:
        print(f"profview run: error: {exc}", file=sys.stderr)
        return 2
    control = _control_channel()
    auto = AutoProfiler(
        args.output,
        ops=args.ops,
        attach=not args.no_attach,
        data=not args.no_data,
        advisor_thresholds=thresholds or None,
        cluster_timeout_s=args.cluster_timeout,
        control=control,
    )

    handled = threading.Event()

    def on_term(signum, frame):
        handled.set()
        raise _Terminated(signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    _watch_for_stuck_termination(handled)
    try:
        auto.start()
    except ProfviewError as exc:
        print(f"profview run: error: {exc}", file=sys.stderr)
        return 2
    ending: Optional[BaseException] = None
    status = 0
    try:
        _run_target(script, module, script_args)
    except SystemExit as exc:
        ending = exc
    except KeyboardInterrupt as exc:
        ending = exc
    except _Terminated as exc:
        ending = exc
    except BaseException as exc:
        exc.__traceback__ = _own_frames(exc.__traceback__)  # the hook prints the exception's own traceback
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    finally:
        if signal.getsignal(signal.SIGTERM) is on_term:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    auto.finish()
    if isinstance(ending, _Terminated):  # die by SIGTERM, as the script would have
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        return 128 + signal.SIGTERM
    if ending is not None:
        raise ending.with_traceback(_own_frames(ending.__traceback__))  # SystemExit, KeyboardInterrupt: as Python ends
    return status


if __name__ == "__main__":
    from profiler.auto import main as _main  # the module proper, not this __main__ copy

    sys.exit(_main())
