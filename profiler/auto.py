"""Profile a script with no change to it: what `profview run` runs in the script's own process.

    python -m profiler.auto [--output DIR] [--ops] [--no-attach] [--no-data] [--] script.py [args...]
    python -m profiler.auto [options] -m package.module [args...]

`AutoProfiler` creates a `Profiler` before the script starts, and analyses the recording when the
script ends: normally, with an exception, by `sys.exit`, on Ctrl-C (SIGINT) or SIGTERM. The
script's exit status is kept: its exit code, 1 and its traceback for an exception, death by the
same signal for SIGINT / SIGTERM. While the script runs, PyTorch is followed without any change
to the script (patched when the script imports torch, restored at the end):

- **the first optimizer created** (`torch.optim.Optimizer.__init__`) is attached with
  `Profiler.attach(model, optimizer)`: `optimizer.step()` ends each profiler step (steps ==
  optimizer steps) and is the `optimizer` phase; the model's forward marks fp start and its backward
  bp end. The model is the `nn.Module` whose parameters are the optimizer's: of the modules alive
  then (the garbage collector's list), the one holding the most of the optimizer's parameters and
  the fewest others, the outermost one on a tie (a DDP wrapper rather than the module it wraps).
  When no module holds them, the optimizer's step alone ends the steps (a step post hook).
- **every `torch.utils.data.DataLoader` iteration** (`DataLoader.__iter__`): each fetch is a
  `data` phase (the loop's data wait), as `ProfiledDataLoader` times it; the first loader with
  worker processes also has its worker queue probed as `host_queue`.

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
import gc
import importlib.abc
import importlib.util
import json
import os
import runpy
import signal
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Optional

from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.formats import HOST_QUEUE, rank_file
from profiler.profiler import Profiler
from profiler.record.recorder import active_recorder, now_ns
from profiler.schedule import schedule
from profiler.store.kinds import PHASE
from profiler.store.raw import raw_file_name

#: the environment variable naming the file descriptor `profview run` reads this module's events on
CONTROL_FD_ENV = "PROFVIEW_RUN_FD"
#: with --ops, the steps whose operators torch.profiler captures (one window, after a few steps)
OPS_SCHEDULE = dict(skip_first=5, wait=0, warmup=2, active=5, repeat=1)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so the recording is analysed before the process ends."""


class AutoProfiler:
    """A Profiler for a script that has none (see the module doc)."""

    def __init__(self, output_path: str | os.PathLike = "./profiler_data", *, ops: bool = False,
                 attach: bool = True, data: bool = True, advisor_thresholds: Optional[dict] = None,
                 cluster_timeout_s: float = 120.0, control: Optional[Callable[[dict], None]] = None) -> None:
        self.output_path = Path(output_path)
        self.ops = ops
        self.follow_optimizer = attach
        self.time_data = data
        self.advisor_thresholds = advisor_thresholds
        self.cluster_timeout_s = cluster_timeout_s
        self.control = control or (lambda event: None)
        self.profiler: Optional[Profiler] = None
        self.active = False
        self.stepped_aside = False
        self.optimizer: Any = None
        self.model: Any = None
        self._undo: list[Callable[[], None]] = []
        self._import_hook: Optional[_AfterImport] = None
        self._probed_queue = False
        self._probes: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
        self._created: list[Path] = []

    # ---- start / stop ----------------------------------------------------------------------

    def start(self) -> "AutoProfiler":
        """Start recording and put the patches in place (torch's when the script imports it)."""
        self._created = [p for p in (self.output_path, self.output_path / "raw") if not p.exists()]
        kwargs: dict[str, Any] = {"advisor_thresholds": self.advisor_thresholds}
        if self.ops:
            kwargs["ops_schedule"] = schedule(**OPS_SCHEDULE)
        self.profiler = Profiler(self.output_path, **kwargs)
        self.active = True
        self._patch(Profiler, "start", self._wrap_profiler_start(Profiler.start))
        if "torch" in sys.modules:
            self._patch_torch(sys.modules["torch"])
        else:
            self._import_hook = _AfterImport("torch", self._patch_torch)
            sys.meta_path.insert(0, self._import_hook)
        self.control({"event": "started", "output": str(self.output_path.resolve()), "rank": self.profiler.rank,
                      "world_size": self.profiler.world_size, "pid": os.getpid()})
        return self

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def unpatch(self) -> None:
        """Put every patched function back."""
        if self._import_hook is not None and self._import_hook in sys.meta_path:
            sys.meta_path.remove(self._import_hook)
        self._import_hook = None
        while self._undo:
            self._undo.pop()()

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
            print(f"profview run: the recording could not be analysed: {exc} (raw store: {self.output_path / 'raw'})",
                  file=sys.stderr)
        except KeyboardInterrupt:
            print(f"profview run: analysis interrupted; run `profview analyse {self.output_path}` to analyse the "
                  "recording", file=sys.stderr)
        except Exception as exc:        # never hide the script's own outcome behind an analysis failure
            print(f"profview run: the analysis failed ({type(exc).__name__}: {exc}); run `profview analyse "
                  f"{self.output_path}` to retry", file=sys.stderr)
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
                print(f"profview run: the script records with its own Profiler ({profiler.output_path}); "
                      "the automatic one stepped aside", file=sys.stderr)
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
        for path in reversed(self._created):       # folders the automatic profiler made, when still empty
            try:
                path.rmdir()
            except OSError:
                pass

    # ---- torch -----------------------------------------------------------------------------

    def _patch_torch(self, torch: Any) -> None:
        if not self.active:
            return
        try:
            if self.follow_optimizer:
                optimizer = torch.optim.Optimizer
                self._patch(optimizer, "__init__", self._wrap_optimizer_init(optimizer.__init__))
            if self.time_data:
                loader = torch.utils.data.DataLoader
                self._patch(loader, "__iter__", self._wrap_loader_iter(loader.__iter__))
        except Exception as exc:        # an unexpected torch: record without the torch hooks
            warnings.warn(f"profview run: cannot follow torch ({type(exc).__name__}: {exc}); recording without "
                          "its optimizer and DataLoader hooks", ProfilerUsageWarning, stacklevel=2)

    def _wrap_optimizer_init(self, original: Callable) -> Callable:
        auto = self

        @functools.wraps(original)
        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if auto.active and auto.optimizer is None:
                auto.optimizer = optimizer
                try:
                    auto._attach(optimizer)
                except Exception as exc:
                    warnings.warn(f"profview run: cannot attach to the optimizer ({type(exc).__name__}: {exc}); "
                                  "steps are not recorded", ProfilerUsageWarning, stacklevel=2)

        return __init__

    def _attach(self, optimizer: Any) -> None:
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        model = find_model(params)
        self.model = model
        p = self.profiler
        self._time_collectives(p)
        if model is not None:
            p.attach(model, optimizer, ops=self.ops)
            return
        optimizer.register_step_post_hook(lambda *_: p.step())    # no module holds them: its step ends the steps

    @staticmethod
    def _time_collectives(p: Profiler) -> None:
        """The process group a script initialises after the Profiler started: time its collectives
        (and, through attach(), a DDP model's gradient buckets) from now on, as a Profiler made after
        init_process_group does."""
        from profiler.capture.distributed import CollectiveCapture, initialised_dist

        if initialised_dist() is not None and not any(isinstance(s, CollectiveCapture) for s in p.sources):
            p.add_source(CollectiveCapture())

    def _wrap_loader_iter(self, original: Callable) -> Callable:
        auto = self

        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            if not auto.active:
                return original(loader)
            got = auto._epoch_probe(loader)
            return TimedIterator(original(loader), got, active=lambda: auto.active)

        return __iter__

    def _epoch_probe(self, loader: Any) -> Optional[Callable[[int, int], bool]]:
        """The worker-queue probe of the first loader with workers (as ProfiledDataLoader probes it)."""
        probed = self._probes.get(loader)
        if probed is None:
            if self._probed_queue or int(getattr(loader, "num_workers", 0) or 0) == 0:
                return None
            from profiler.data.torch_data import ProfiledDataLoader

            try:
                probed = self._probes[loader] = ProfiledDataLoader(loader, HOST_QUEUE)
            except Exception:
                return None
            self._probed_queue = True
        return probed.epoch_probe()


class TimedIterator:
    """A DataLoader iterator whose every fetch is a `data` phase (and, with `got`, a worker-queue get).
    Everything else (len(), the iterator's own attributes) is the wrapped iterator's."""

    def __init__(self, it: Any, got: Optional[Callable[[int, int], bool]] = None,
                 active: Callable[[], bool] = lambda: True) -> None:
        self._it = it
        self._got = got
        self._active = active

    def __iter__(self) -> "TimedIterator":
        return self

    def __next__(self) -> Any:
        recorder = active_recorder()
        if recorder is None or not self._active():       # not into a Profiler the script made itself
            return next(self._it)
        with recorder.span(PHASE, "data"):
            t0 = now_ns()
            item = next(self._it)
            got = self._got
            if got is not None and not got(t0, now_ns()):
                self._got = None       # the workers predate the wrap: their queue cannot be probed
        return item

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_TimedIterator") or name in ("_it", "_got", "_active"):
            raise AttributeError(name)
        return getattr(self._it, name)


def find_model(param_ids: set) -> Any:
    """The nn.Module alive now that holds the most of these parameters and the fewest others (the
    outermost on a tie), or None."""
    import torch.nn as nn

    best, best_key = [], None
    with warnings.catch_warnings():            # isinstance() on deprecated torch aliases warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if isinstance(obj, nn.Module)]
    for obj in modules:
        try:
            mine = {id(p) for p in obj.parameters()}
        except Exception:
            continue
        overlap = len(mine & param_ids)
        if overlap == 0:
            continue
        key = (overlap, -len(mine - param_ids))
        if best_key is None or key > best_key:
            best, best_key = [obj], key
        elif key == best_key:
            best.append(obj)
    if not best:
        return None
    inner = {id(m) for b in best for m in b.modules() if m is not b}
    outer = [b for b in best if id(b) not in inner]
    return (outer or best)[0]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` once the module `name` has been imported (a post-import hook)."""

    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenLoader(spec.loader, self._done)
        return spec

    def _done(self, module: Any) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback(module)


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, then: Callable[[Any], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


# ---- running the script ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m profiler.auto", description="Run a script with profview profiling it.")
    p.add_argument("-o", "--output", default="./profiler_data", help="where the recording and its outputs go")
    p.add_argument("--ops", action="store_true", help="also capture operators through torch.profiler on a few steps")
    p.add_argument("--no-attach", action="store_true", help="do not follow the first torch optimizer")
    p.add_argument("--no-data", action="store_true", help="do not time DataLoader fetches")
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="an advisor threshold for the analysis (repeatable)")
    p.add_argument("--cluster-timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a module as `python -m MODULE` does (the rest of the line is its arguments)")
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
        sys.argv = [module, *args]                 # sys.path[0] is the working directory, as for python -m
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
                print("profview run: the script did not stop on SIGTERM (blocked outside Python); exiting without "
                      "the analysis (run `profview analyse DIR`)", file=sys.stderr, flush=True)
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
    auto = AutoProfiler(args.output, ops=args.ops, attach=not args.no_attach, data=not args.no_data,
                        advisor_thresholds=thresholds or None, cluster_timeout_s=args.cluster_timeout,
                        control=control)

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
        exc.__traceback__ = _own_frames(exc.__traceback__)    # the hook prints the exception's own traceback
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    finally:
        if signal.getsignal(signal.SIGTERM) is on_term:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    auto.finish()
    if isinstance(ending, _Terminated):             # die by SIGTERM, as the script would have
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
    from profiler.auto import main as _main      # the module proper, not this __main__ copy

    sys.exit(_main())
