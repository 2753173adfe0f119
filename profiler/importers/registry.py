"""Every foreign capture format profview reads, and the one place to add one.

A format is an `Importer` (profiler.importers.base) declared by its own module. Built-in formats
are listed in BUILT_IN, one line each; an installed package adds its own through the
`profview.importers` entry-point group (an entry point naming an Importer object), and a program
at run time with `register`. `profview import`, `profview PATH` (viewer/inputs.py) and what the
analysis says about imported runs (analysis/steps.py, analysis/advisor.py) all look formats up here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Optional

from profiler.errors import ProfviewError
from profiler.importers import ascend, kineto, mindspore
from profiler.importers.base import NOT_IT, Importer
from profiler.model import NATIVE_ORIGIN
from profiler.plugins import load_plugins

#: The built-in formats. When two are equally confident about an input, the earlier one reads it.
BUILT_IN: tuple[Importer, ...] = (ascend.IMPORTER, mindspore.IMPORTER, kineto.IMPORTER)

#: The entry-point group through which installed packages add formats.
ENTRY_POINT_GROUP = "profview.importers"

_registered: list[Importer] = []


def register(importer: Importer) -> None:
    """Add a format for the rest of this process (after the built-in and installed ones).

    Raises ValueError when `importer` is not an Importer or its data_origin is taken.
    """
    problem = _problem(importer, importers())
    if problem:
        raise ValueError(problem)
    _registered.append(importer)


def unregister(data_origin: str) -> None:
    """Remove the format `register` added under `data_origin` (nothing when there is none)."""
    _registered[:] = [importer for importer in _registered if importer.data_origin != data_origin]


def importers() -> list[Importer]:
    """Every format: the built-in ones, the installed ones (entry points), the registered ones."""
    return [*BUILT_IN, *_installed(), *_registered]


def importer_for(data_origin: str) -> Optional[Importer]:
    """The format whose runs carry `data_origin`; None for recordings and for an origin no format has."""
    if data_origin == NATIVE_ORIGIN:
        return None
    return next((importer for importer in importers() if importer.data_origin == data_origin), None)


def importer_named(data_origin: str) -> Importer:
    """The format called `data_origin` (`profview import --from`), or ProfviewError listing the known ones."""
    found = importer_for(data_origin)
    if found is None:
        known = ", ".join(f"{i.data_origin} ({i.title})" for i in importers())
        raise ProfviewError(f"no importer is called {data_origin!r}; the formats are {known}")
    return found


def detect(path: Path) -> Optional[Importer]:
    """The format most confident that it reads `path` (equally confident: the earlier one), or None.

    An OSError from looking at `path` (a name too long, a directory that vanished) propagates, for
    the caller to say in one sentence.
    """
    best, best_confidence = None, NOT_IT
    for importer in importers():
        confidence = _confidence(importer, path)
        if confidence > best_confidence:
            best, best_confidence = importer, confidence
    return best


def formats_sentence() -> str:
    """The formats as a list for a sentence: "an Ascend profiling JOB directory, a ... or a ..."."""
    titles = [importer.title_with_article for importer in importers()]
    return titles[0] if len(titles) == 1 else f"{', '.join(titles[:-1])} or {titles[-1]}"


def _confidence(importer: Importer, path: Path) -> float:
    """`importer.detect(path)`; a detector that fails on a foreign input (a plug-in's bug) does not
    stop the others: it says so in a warning and claims nothing."""
    try:
        return float(importer.detect(path))
    except OSError:
        raise
    except Exception as exc:
        warnings.warn(
            f"the {importer.data_origin} importer failed to look at {path} "
            f"({type(exc).__name__}: {exc}); it is taken not to be a {importer.title}",
            stacklevel=2,
        )
        return NOT_IT


@cache
def _installed() -> tuple[Importer, ...]:
    """The formats installed packages add (ENTRY_POINT_GROUP), loaded once; one that cannot be
    loaded, is not an Importer or takes a known data_origin is left out with a warning."""
    return tuple(load_plugins(ENTRY_POINT_GROUP, "importer", lambda obj, loaded: _problem(obj, [*BUILT_IN, *loaded])))


def _problem(importer: object, known: Iterable[Importer]) -> str:
    """Why `importer` cannot join the `known` formats ("" when it can)."""
    if not isinstance(importer, Importer):
        return f"{importer!r} is not a profiler.importers.base.Importer"
    if importer.data_origin == NATIVE_ORIGIN or any(i.data_origin == importer.data_origin for i in known):
        return f"the data_origin {importer.data_origin!r} is taken"
    return ""
