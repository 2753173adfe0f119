"""Writing outputs safely: every file is written under a temporary name unique to its writer and
renamed into place (`AtomicWrite`, the one place that does it), and one rank's outputs (or the
cluster files) are written under a lock, so two analyses of one directory never collide and a
killed one never leaves a half-written output under its final name (docs/architecture.md, "The lock
and the outputs")."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Optional

from profiler.errors import ProfviewError

_counter = itertools.count()
#: how long an analysis waits for another one holding the same lock before it refuses
LOCK_TIMEOUT_S = 600.0


def _temp_path(path: Path) -> Path:
    """A temporary name beside `path`, unique to this process, thread and call (`.NAME.PID-THREAD-N.tmp`)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident() % 100000}-{next(_counter)}.tmp")


class AtomicWrite:
    """A file written under a temporary name unique to its writer (`tmp`), then renamed to `path`.

    `commit()` renames it into place; `discard()` removes what was written (nothing after a
    commit). As a context manager it commits when the block ends normally and discards otherwise,
    so a failed or killed writer never leaves a partial file under the final name.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.tmp = _temp_path(self.path)

    def commit(self) -> Path:
        os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.tmp.unlink()

    def __enter__(self) -> AtomicWrite:
        return self

    def __exit__(self, exc_type: Optional[type], *rest: object) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()


def write_atomic(path: Path, data: bytes) -> Path:
    """Write `data` as the file `path`, atomically (AtomicWrite); returns the path."""
    with AtomicWrite(path) as out:
        out.tmp.write_bytes(data)
    return out.path


def remove_stale_temps(directory: Path, names: Iterable[str]) -> None:
    """Remove what killed writers of these outputs left behind (call it holding their lock)."""
    directory = Path(directory)
    for name in names:
        for stale in [*directory.glob(f".{name}.*.tmp"), directory / f"{name}.tmp"]:
            with contextlib.suppress(OSError):
                if stale.is_file():
                    stale.unlink()


def _lock_file(directory: Path, what: str) -> int:
    """An open descriptor of the lock file for `what`: in raw/ when it is writable, else beside the outputs."""
    last = None
    for path in (directory / "raw" / f".lock-{what}", directory / f".profview-lock-{what}"):
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            last = exc
    raise ProfviewError(f"cannot write in {directory}: {last.strerror if last else 'no lock file'}")


@contextlib.contextmanager
def output_lock(directory: Path, what: str, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock (fcntl.flock) on `what` ("r0", "cluster") of `directory`'s outputs.
    A second holder waits (saying so once on stderr), at most `timeout_s`, then refuses in one sentence."""
    directory = Path(directory)
    fd = _lock_file(directory, what)
    try:
        deadline, told = time.monotonic() + timeout_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    break  # a file system without flock: go on unlocked, as before locks existed
                if time.monotonic() > deadline:
                    raise ProfviewError(
                        f"another analysis of {directory} ({what}) has been writing its outputs for "
                        f"over {timeout_s:.0f} s; wait for it to finish, or stop it, and try again"
                    ) from None
                if not told:
                    print(f"profview: waiting for another analysis of {directory} ({what}) to finish", file=sys.stderr)
                    told = True
                time.sleep(0.05)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
