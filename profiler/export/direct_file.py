"""A write-only file that bypasses the page cache (O_DIRECT) where the OS and filesystem allow it.

Why: a 1e7-event timeline is ~450 MB. Written through the page cache, every byte first needs a
fresh page-cache page; on virtual machines whose memory the host reclaims while the guest is not
using it, such pages cost ~2 s per GB (benchmarks/bench_core.py; docs/architecture.md), more than
formatting the rows. With O_DIRECT the data goes from one reused, page-aligned buffer to the
device. The last partial block is written after O_DIRECT is switched off again, so the file has
exactly the bytes written. Where O_DIRECT is missing (macOS, Windows) or refused (tmpfs, some
network filesystems) this is an ordinary buffered file.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

BLOCK = 4096  # O_DIRECT alignment of addresses, sizes and offsets (covers 512-byte devices)
BUFFER_BYTES = 8 << 20  # one device write per 8 MiB


class DirectFile:
    """`open(path, "wb")` for large sequential writes, without filling the page cache."""

    def __init__(self, path: Path, buffer_bytes: int = BUFFER_BYTES) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
        self._fd = -1
        self.direct = False  # the descriptor has O_DIRECT now
        self.direct_bytes = 0  # bytes that went to the device around the page cache
        if hasattr(os, "O_DIRECT"):
            try:
                self._fd = os.open(path, flags | os.O_DIRECT, 0o644)
                self.direct = True
            except OSError:
                pass
        if self._fd < 0:
            self._fd = os.open(path, flags, 0o644)
        self._buffer = mmap.mmap(-1, buffer_bytes)  # anonymous mmap: page-aligned, reused for every write
        self._view = memoryview(self._buffer)
        self._fill = 0
        self._written = 0

    # the file-object methods a stream writer (pyarrow's PythonFile) asks for
    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        """Nothing to do: bytes reach the device when the buffer fills, and at close."""

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def write(self, data) -> int:
        """Append `data` (bytes-like); each full buffer goes to the device."""
        data = memoryview(data).cast("B")
        n, pos = len(data), 0
        self._written += n
        capacity = len(self._view)
        while pos < n:
            take = min(capacity - self._fill, n - pos)
            self._view[self._fill : self._fill + take] = data[pos : pos + take]
            self._fill += take
            pos += take
            if self._fill == capacity:
                self._drain(capacity)
        return n

    def _drain(self, size: int) -> None:
        """Write the buffer's first `size` bytes (a multiple of BLOCK while direct), keep the rest."""
        done = 0
        while done < size:
            try:
                n = os.write(self._fd, self._view[done:size])
            except OSError:
                if not self.direct:
                    raise
                self._buffered()  # the filesystem took the open but refuses direct writes
                continue
            done += n
            self.direct_bytes += n if self.direct else 0
        self._fill -= size
        if self._fill:
            self._view[: self._fill] = self._view[size : size + self._fill]

    def _buffered(self) -> None:
        """Switch the descriptor to ordinary buffered writes."""
        import fcntl

        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self.direct = False

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            aligned = self._fill - self._fill % BLOCK if self.direct else self._fill
            if aligned:
                self._drain(aligned)
            if self._fill:  # the unaligned tail, through the page cache
                if self.direct:
                    self._buffered()
                self._drain(self._fill)
        finally:
            os.close(self._fd)
            self._fd = -1
            self._view.release()
            self._buffer.close()

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
