"""A write-only file that bypasses the page cache (O_DIRECT) where the OS and filesystem allow it.

Why: a 1e7-event timeline is ~450 MB. Written through the page cache, every byte first needs a
fresh page-cache page; on virtual machines whose memory the host reclaims while the guest is not
using it, such pages cost ~2 s per GB (benchmarks/bench_core.py; docs/architecture.md), more than
formatting the rows. With O_DIRECT the data goes from one reused, page-aligned buffer to the
device, written by a helper thread while the next buffer fills. The last partial block is written after O_DIRECT is switched off again, so the file has
exactly the bytes written. Where O_DIRECT is missing (macOS, Windows) or refused (tmpfs, some
network filesystems) this is an ordinary buffered file.
"""
from __future__ import annotations

import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Optional

BLOCK = 4096                   # O_DIRECT alignment of addresses, sizes and offsets (covers 512-byte devices)
BUFFER_BYTES = 8 << 20         # one device write per 8 MiB


class DirectFile:
    """`open(path, "wb")` for large sequential writes, without filling the page cache.

    Two aligned buffers take turns: while one is written to the device by a helper thread (the
    write releases the GIL), the caller fills the other.
    """

    def __init__(self, path: Path, buffer_bytes: int = BUFFER_BYTES) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
        self._fd = -1
        self.direct = False            # the descriptor has O_DIRECT now
        self.direct_bytes = 0          # bytes that went to the device around the page cache
        if hasattr(os, "O_DIRECT"):
            try:
                self._fd = os.open(path, flags | os.O_DIRECT, 0o644)
                self.direct = True
            except OSError:
                pass
        if self._fd < 0:
            self._fd = os.open(path, flags, 0o644)
        # anonymous mmaps: page-aligned, as O_DIRECT needs, and reused for the whole file
        self._maps = [mmap.mmap(-1, buffer_bytes) for _ in range(2)]
        self._views = [memoryview(m) for m in self._maps]
        self._in_flight: list[Optional[Future]] = [None, None]
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="profview-direct-write")
        self._current = 0
        self._fill = 0

    def write(self, data) -> int:
        """Append `data` (bytes-like); each full buffer goes to the device while the next fills."""
        data = memoryview(data).cast("B")
        n, pos = len(data), 0
        while pos < n:
            view = self._views[self._current]
            take = min(len(view) - self._fill, n - pos)
            view[self._fill:self._fill + take] = data[pos:pos + take]
            self._fill += take
            pos += take
            if self._fill == len(view):
                self._send(self._fill)
        return n

    def _send(self, size: int) -> None:
        """Hand the current buffer's first `size` bytes to the writer thread and continue in the
        other buffer (once its previous write is done), carrying over the bytes after `size`."""
        current, other = self._current, 1 - self._current
        self._wait(other)
        rest = self._fill - size
        if rest:
            self._views[other][:rest] = self._views[current][size:self._fill]
        self._in_flight[current] = self._writer.submit(self._write_out, self._views[current][:size])
        self._current, self._fill = other, rest

    def _wait(self, i: int) -> None:
        future, self._in_flight[i] = self._in_flight[i], None
        if future is not None:
            future.result()                 # re-raises the writer's error here

    def _wait_all(self) -> None:
        self._wait(0)
        self._wait(1)

    def _write_out(self, view: memoryview) -> None:
        """Write all of `view` (a multiple of BLOCK while direct)."""
        done = 0
        while done < len(view):
            try:
                n = os.write(self._fd, view[done:])
            except OSError:
                if not self.direct:
                    raise
                self._buffered()            # the filesystem took the open but refuses direct writes
                continue
            done += n
            self.direct_bytes += n if self.direct else 0

    def _buffered(self) -> None:
        """Switch the descriptor to ordinary buffered writes."""
        import fcntl

        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self.direct = False

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self._wait_all()
            aligned = self._fill - self._fill % BLOCK if self.direct else self._fill
            if aligned:
                self._send(aligned)
                self._wait_all()
            if self._fill:                  # the unaligned tail, through the page cache
                if self.direct:
                    self._buffered()
                self._write_out(self._views[self._current][:self._fill])
        finally:
            self._writer.shutdown(wait=True)
            os.close(self._fd)
            self._fd = -1
            for view, buffer in zip(self._views, self._maps):
                view.release()
                buffer.close()

    def __enter__(self) -> "DirectFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
