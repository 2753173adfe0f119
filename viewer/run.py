"""`profview run [options] script.py [args...]` (or `-m package.module [args...]`): run a script with
profiling on and no change to it, and watch it live.

The script runs in a child process, `python -m profiler.auto` (profiler/auto.py: a Profiler from
the start, the first torch optimizer attached, DataLoader fetches timed, the analysis at exit),
in a session of its own; this process shows the live view (viewer/watch.py) of the directory the
child records into, and prints the script's output above it. On a terminal the script's output is
piped through here (its stdout and stderr, in order; lines rewritten with carriage returns, like
progress bars, show as their final state); elsewhere the script keeps its own stdout / stderr and
the live view prints a plain line every 10 seconds on stderr. `--no-live` runs the script with its
own stdio and nothing else.

Ctrl-C (SIGINT), SIGTERM and SIGHUP reaching this process are passed on to the script (SIGHUP as
SIGTERM): it stops, its recording is analysed, and `profview run` exits with the script's exit
status (128 + N when the script died by signal N). A second Ctrl-C interrupts the analysis; a
third kills the script. The child also gets SIGTERM if this process dies (Linux).

Under torchrun, run it per rank: `torchrun --nproc-per-node 2 --no-python profview run train.py`:
each rank records into the same directory (its rank from the environment), and only local rank 0
shows the live view (of every rank).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from profiler.errors import InputError
from viewer.watch import watch

#: the environment variable naming the control pipe (profiler.auto.CONTROL_FD_ENV; the viewer does
#: not import the module it runs in the child)
CONTROL_FD_ENV = "PROFVIEW_RUN_FD"
PLAIN_EVERY_S = 10.0


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        type=Path,
        default=Path("profiler_data"),
        help="where the recording and its analysis go (default ./profiler_data)",
    )
    p.add_argument("--no-live", action="store_true", help="no live view: only run, record and analyse")
    p.add_argument(
        "--ops",
        action="store_true",
        help="also capture per-operator timings through torch.profiler on a few steps (5 from step 7)",
    )
    p.add_argument(
        "--no-attach",
        action="store_true",
        help="do not follow the first torch optimizer (no step ends are recorded then)",
    )
    p.add_argument("--no-data", action="store_true", help="do not time torch DataLoader fetches as data wait")
    p.add_argument(
        "--threshold",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="an advisor threshold for the analysis, e.g. input_gap_pct=20 (repeatable)",
    )
    p.add_argument(
        "--window", type=int, default=100, metavar="N", help="the live view's advisor reads the last N steps"
    )
    p.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE ...",
        help="run a module as `python -m MODULE` does (everything after it is its arguments)",
    )
    p.add_argument(
        "target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]", help="the script to run and its arguments"
    )


def child_command(args: argparse.Namespace) -> list[str]:
    """The child's command line: python -m profiler.auto with the options, then the script or module."""
    cmd = [sys.executable, "-m", "profiler.auto", "--output", str(args.output)]
    cmd += [
        flag for flag, on in (("--ops", args.ops), ("--no-attach", args.no_attach), ("--no-data", args.no_data)) if on
    ]
    for t in args.threshold:
        cmd += ["--threshold", t]
    if args.module is not None:
        if not args.module:
            raise InputError("-m wants a module name: profview run -m package.module [args...]")
        return cmd + ["-m", *args.module]
    target = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    if not target:
        raise InputError("name the script to run: profview run [options] train.py [args...] (or -m package.module)")
    script = Path(target[0])
    if not script.is_file():
        raise InputError(
            f"{script} does not exist or is not a file"
            if not script.exists()
            else f"{script} is not a file (profview run wants a Python script, or -m package.module)"
        )
    return cmd + ["--", *target]


def shows_live(args: argparse.Namespace) -> bool:
    """The live view shows unless --no-live, and in a torchrun job only on each node's local rank 0."""
    return not args.no_live and os.environ.get("LOCAL_RANK", "0") == "0"


def exit_status(returncode: int) -> int:
    """The shell's convention: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run(args: argparse.Namespace) -> int:
    """Run the script in a child process, show the live view, return the script's exit status."""
    from profiler.analysis.advisor import parse_threshold
    from profiler.errors import ProfviewError

    try:
        for t in args.threshold:
            parse_threshold(t)
    except ProfviewError as exc:
        raise InputError(str(exc)) from None
    if args.window < 1:
        raise InputError("--window wants a positive number of steps")
    cmd = child_command(args)
    live = shows_live(args)
    piped = live and _isatty(sys.stdout) and _isatty(sys.stderr)
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, **{CONTROL_FD_ENV: str(write_fd)})
    if piped:
        env["PYTHONUNBUFFERED"] = "1"
    started = time.time()
    try:
        child = subprocess.Popen(
            cmd,
            env=env,
            pass_fds=(write_fd,),
            start_new_session=True,
            stdout=subprocess.PIPE if piped else None,
            stderr=subprocess.STDOUT if piped else None,
            preexec_fn=_child_signals,
        )
    except OSError as exc:
        os.close(read_fd)
        raise InputError(f"cannot start {sys.executable}: {exc.strerror or exc}") from None
    finally:
        os.close(write_fd)
    control = _Control(read_fd)
    relay = _Relay(child)
    previous = {sig: signal.signal(sig, relay.handle) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if live:
            lines: Optional[queue.Queue] = queue.Queue() if piped else None
            pump = _Pump(child.stdout, lines) if piped else None
            relay.note = (
                (lambda text: lines.put(text))
                if lines is not None
                else (lambda text: print(text, file=sys.stderr, flush=True))
            )
            watch(
                args.output,
                since=started - 1.0,
                window_steps=args.window,
                plain=not piped,
                out=sys.stdout if piped else sys.stderr,
                lines=lines,
                redirect=control.directory,
                stop_when=lambda: child.poll() is not None and (pump is None or pump.done),
                until_end=False,
                final=False,
                plain_every_s=0.0 if piped else PLAIN_EVERY_S,
            )
        child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        control.close()
    return exit_status(child.returncode)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _child_signals() -> None:
    """In the child, before exec: SIGINT at its default, so the Ctrl-C the relay passes on stops the
    script even when this process started with SIGINT ignored (a background job of a shell script);
    SIGTERM when this process dies (Linux: prctl PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass


class _Relay:
    """Passes SIGINT / SIGTERM / SIGHUP on to the child (its own session gets no terminal signals)."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.interrupts = 0
        self.note = lambda text: None

    def handle(self, signum, frame) -> None:
        if self.child.poll() is not None:
            return
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts >= 3:
                self.note("profview run: interrupted three times: killing the script")
                self._send(signal.SIGKILL)
                return
            if self.interrupts == 1:
                self.note(
                    "profview run: interrupted: the script stops and its recording is analysed "
                    "(Ctrl-C again interrupts the analysis, a third time kills it)"
                )
            self._send(signal.SIGINT)
        else:
            self._send(signal.SIGTERM)

    def _send(self, sig: int) -> None:
        try:
            self.child.send_signal(sig)
        except (ProcessLookupError, OSError):
            pass


class _Pump(threading.Thread):
    """Reads the child's output and queues it line by line; a line rewritten with carriage returns
    (a progress bar) is queued as its last state, when its newline comes."""

    def __init__(self, stream, lines: queue.Queue[str]) -> None:
        super().__init__(name="profview-run-output", daemon=True)
        self.stream = stream
        self.lines = lines
        self.done = False
        self.start()

    def run(self) -> None:
        partial = b""
        fd = self.stream.fileno()
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                partial += data
                *complete, partial = partial.split(b"\n")
                for line in complete:
                    self.lines.put(_last_state(line))
            if partial:
                self.lines.put(_last_state(partial))
        except OSError:
            pass
        finally:
            self.done = True


def _last_state(line: bytes) -> str:
    """A line as it last looked on a terminal: the text after its last carriage return."""
    pieces = [p for p in line.rstrip(b"\r").split(b"\r") if p]
    return (pieces[-1] if pieces else b"").decode("utf-8", errors="replace")


class _Control(threading.Thread):
    """Reads the child's events (JSON lines): where it records, and where the script's own Profiler
    records when the automatic one stepped aside."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="profview-run-control", daemon=True)
        self.fd = fd
        self.output: Optional[Path] = None
        self.start()

    def run(self) -> None:
        try:
            with os.fdopen(self.fd, "r", encoding="utf-8", errors="replace") as stream:
                for line in stream:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and event.get("event") == "stepped_aside" and event.get("output"):
                        self.output = Path(str(event["output"]))
        except OSError:
            pass

    def directory(self) -> Optional[Path]:
        return self.output

    def close(self) -> None:
        self.join(timeout=1.0)
