"""The contract of an importer: what one foreign capture format declares (profiler.importers.registry
lists them).

An `Importer` says how to recognise its format from the input's content (`detect`, a confidence),
how to read it into `Run`s, the `data_origin` those runs carry, and how the analysis speaks about
them (whose vocabulary the advisor's suggestions use, how to capture exact step boundaries).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from profiler.model import Run

#: `detect` confidences. The most confident importer reads an input; 0 means "not this format".
#: The input's content has this format's signature (a Kineto header, Ascend slices, MindSpore files).
CERTAIN = 1.0
#: The content has the format's shape without its signature (Chrome-trace JSON without Kineto's
#: categories, MindSpore's directories without their files): reading it says what is wrong.
SHAPED = 0.5
#: Only the name matches (a `.json.gz` that does not unzip): reading it says what is wrong.
NAMED = 0.1
NOT_IT = 0.0

#: The frameworks whose terms the advisor's suggestions use (analysis/advice_text.py).
FRAMEWORKS = ("torch", "mindspore", "plain")


@dataclass(frozen=True)
class Importer:
    """One foreign capture format.

    `detect(path)` must be cheap (it runs on every input that is not a profview directory: read a
    few bytes or list a directory, never parse it all) and must not raise for an input of another
    format. `read(path)` returns one Run per rank, or raises ProfviewError with one sentence naming
    the input; `runs(path)` is `read` with every run's data_origin set.
    """

    data_origin: str  # the runs' info["data_origin"]; `profview import --from` value
    title: str  # what the input is, for sentences: "PyTorch profiler (Kineto) trace"
    detect: Callable[[Path], float]  # confidence that `path` is this format (CERTAIN ... NOT_IT)
    read: Callable[[Path], list[Run]]  # the runs, one per rank
    framework: str  # FRAMEWORKS: whose terms the advisor's suggestions use
    exact_steps: str  # how to capture exact step boundaries, said when steps are inferred

    def runs(self, path: Path) -> list[Run]:
        """`read(path)`, every run's data_origin set to this format's (what the analysis looks it up by)."""
        runs = self.read(path)
        for run in runs:
            run.info["data_origin"] = self.data_origin
        return runs

    @property
    def title_with_article(self) -> str:
        """The title for a sentence: "an Ascend profiling JOB directory", "a PyTorch ... trace"."""
        return f"{'an' if self.title[:1].lower() in 'aeiou' else 'a'} {self.title}"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.data_origin):
            raise ValueError(
                f"importer data_origin {self.data_origin!r} should be a lower-case identifier "
                "(it names temporary directories and is typed on the command line)"
            )
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"importer {self.data_origin!r}: framework must be one of {FRAMEWORKS}, not {self.framework!r}"
            )
