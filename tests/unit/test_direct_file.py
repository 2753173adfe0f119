"""DirectFile: the timeline's page-cache-bypassing writer gives exactly the bytes written."""

import os
from pathlib import Path

import numpy as np
import pytest

from profiler.export.direct_file import BLOCK, DirectFile


def _pieces(seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = list(rng.integers(1, 3 * BLOCK, 200)) + [70_000, 1, BLOCK, 2 * BLOCK + 3]
    return [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in sizes]


def _write(path: Path, pieces: list[bytes], buffer_bytes: int) -> DirectFile:
    with DirectFile(path, buffer_bytes=buffer_bytes) as f:
        for i, piece in enumerate(pieces):
            f.write(memoryview(piece) if i % 2 else piece)
    return f


@pytest.mark.parametrize("buffer_bytes", [BLOCK * 4, 1 << 20])
def test_exact_bytes_through_o_direct(tmp_path, buffer_bytes):
    """Pieces of every size, crossing buffer and block edges, with an unaligned tail."""
    pieces = _pieces(buffer_bytes)
    f = _write(tmp_path / "out.bin", pieces, buffer_bytes)
    assert (tmp_path / "out.bin").read_bytes() == b"".join(pieces)
    full_blocks = len(b"".join(pieces)) // BLOCK * BLOCK
    assert f.direct_bytes == (full_blocks if hasattr(os, "O_DIRECT") else 0)  # ext4 /tmp takes O_DIRECT


def test_tmpfs_gets_exact_bytes():
    """tmpfs (O_DIRECT only since Linux 6.6; refused at open before): exact bytes either way."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm (tmpfs) here")
    path = shm / f"profview-direct-{os.getpid()}.bin"
    try:
        pieces = _pieces(7)
        _write(path, pieces, BLOCK * 4)
        assert path.read_bytes() == b"".join(pieces)
    finally:
        path.unlink(missing_ok=True)


def test_switching_to_buffered_mid_file_keeps_every_byte(tmp_path):
    """What a write refused by the filesystem triggers: O_DIRECT is cleared on the live descriptor
    and the rest is written through the page cache (unaligned sizes from then on)."""
    pieces = _pieces(11)
    path = tmp_path / "out.bin"
    with DirectFile(path, buffer_bytes=BLOCK * 4) as f:
        for piece in pieces[:50]:
            f.write(piece)
        written_direct = f.direct_bytes
        f._buffered()
        for piece in pieces[50:]:
            f.write(piece)
    assert path.read_bytes() == b"".join(pieces)
    assert f.direct_bytes == written_direct and (written_direct > 0) == hasattr(os, "O_DIRECT")


def test_existing_file_is_replaced_not_appended(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"x" * 100_000)
    _write(path, [b"short"], BLOCK * 4)
    assert path.read_bytes() == b"short"
