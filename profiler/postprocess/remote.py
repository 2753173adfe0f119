"""Captures named by URL (`s3://bucket/job/traces`, `gs://...`, `file:///...`): any filesystem fsspec
knows, with its package installed (s3fs, gcsfs, ...). A URL naming a directory stands for the traces in
it; each capture is copied to a local temporary directory by whoever imports it (a `--jobs` process, a
Dask worker), imported from there and deleted, so the importers read local files only and the bucket
needs no mount (docs/kineto.md, "Object storage")."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union

from profiler.errors import ProfviewError

#: A capture: a local path, or a URL (a str with a scheme) fsspec opens.
Capture = Union[Path, str]


def is_url(text: Any) -> bool:
    """Whether `text` names a capture by URL (`scheme://...`) rather than by local path."""
    return isinstance(text, str) and "://" in text


def capture_name(capture: Capture) -> str:
    """The capture's file name (its URL's last part)."""
    return capture.rstrip("/").rsplit("/", 1)[-1] if is_url(capture) else Path(capture).name


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for the URL and the path in it; ProfviewError in one sentence when fsspec or the
    scheme's package is missing."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise ProfviewError(f"reading {url} needs fsspec: pip install 'profview[remote]'") from None
    try:
        return url_to_fs(url)
    except ImportError as exc:  # fsspec knows the scheme; its package (s3fs, gcsfs, ...) is not installed
        raise ProfviewError(f"reading {url}: {str(exc).strip().splitlines()[0]}") from None
    except ValueError as exc:  # an unknown scheme
        raise ProfviewError(f"reading {url}: {exc}") from None


def traces_at(url: str, suffixes: tuple[str, ...]) -> list[str]:
    """The URLs of the traces (names ending in `suffixes`) a directory URL holds, sorted by name; the URL
    itself when it names a file."""
    fs, root = _filesystem(url)
    try:
        if not fs.isdir(root):
            if not fs.exists(root):
                raise ProfviewError(f"{url} does not exist")
            return [url]
        found = sorted(p for p in fs.ls(root, detail=False) if p.endswith(suffixes) and fs.isfile(p))
    except OSError as exc:
        raise ProfviewError(f"cannot list {url}: {exc.strerror or exc}") from None
    if not found:
        raise ProfviewError(f"{url} holds no trace (*.json, *.json.gz) to import")
    return [fs.unstrip_protocol(p) for p in found]


@contextlib.contextmanager
def local_copy(url: str) -> Iterator[Path]:
    """A local copy of the capture at `url` (a file, or a directory with what is in it), deleted on exit."""
    fs, path = _filesystem(url)
    with tempfile.TemporaryDirectory(prefix="profview-fetch-") as scratch:
        local = Path(scratch) / capture_name(url)
        if fs.isdir(path):
            fs.get(path.rstrip("/") + "/", str(local), recursive=True)
        else:
            fs.get(path, str(local))
        yield local
