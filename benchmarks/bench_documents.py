"""The output documents' type checks: pydantic (what `read_document` uses) against msgspec and jsonschema, on
a run's documents and on a 4096-rank cluster summary (the largest document profview writes), in one run.

    python benchmarks/bench_documents.py [DIR ...] [--ranks 4096] [--repeat 5]

DIR: output directories whose report_*.json, queue_summary_*.json and cluster_summary.json are checked
(default: the recorded scenario `ddp_slow_rank` and advisor loop `input_bound_queue` of tests/data/recorded,
analysed into a temporary directory). The cluster summary is also grown to --ranks ranks (its per-rank list
and clock entries repeated): documents grow with the ranks, not with the events. Each library checks the
same documents against types made from `profiler.formats.documents.DOCUMENT_SCHEMAS`; the best of
--repeat rounds is printed, per document, in ms. msgspec needs `pip install msgspec`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
import typing
from pathlib import Path
from typing import Any, Callable, Optional, Union

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from profiler.formats.columns import MAX_WHOLE  # noqa: E402
from profiler.formats.documents import ANY_KEY, DOCUMENT_SCHEMAS, Nullable, document_problem  # noqa: E402

_names = itertools.count()


def plain_type(spec: Any) -> Any:
    """The schema node as plain typing types (msgspec's input)."""
    if isinstance(spec, Nullable):
        return Optional[plain_type(spec[0])]
    if isinstance(spec, dict):
        known = {key: plain_type(item) for key, item in spec.items() if key != ANY_KEY}
        if not known:
            return dict[str, plain_type(spec[ANY_KEY]) if ANY_KEY in spec else Any]
        return typing.TypedDict(f"Plain{next(_names)}", known, total=False)
    if isinstance(spec, list):
        return list[plain_type(spec[0])]
    types = [t for t in spec if t is not type(None)]
    single = types[0] if len(types) == 1 else Union[tuple(types)]
    return Optional[single] if type(None) in spec else single


def json_schema(spec: Any) -> dict:
    """The schema node as JSON Schema (2020-12)."""
    if isinstance(spec, Nullable):
        inner = json_schema(spec[0])
        inner["type"] = [inner["type"], "null"]
        return inner
    if isinstance(spec, dict):
        out: dict = {"type": "object"}
        known = {key: json_schema(item) for key, item in spec.items() if key != ANY_KEY}
        if known:
            out["properties"] = known
        if ANY_KEY in spec:
            out["additionalProperties"] = json_schema(spec[ANY_KEY])
        return out
    if isinstance(spec, list):
        return {"type": "array", "items": json_schema(spec[0])}
    names = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
    types = sorted({names[t] for t in spec} - ({"integer"} if float in spec else set()))
    out = {"type": types if len(types) > 1 else types[0]}
    if int in spec or float in spec:
        out.update(exclusiveMaximum=MAX_WHOLE, exclusiveMinimum=-MAX_WHOLE)
    return out


def checkers(kind: str) -> dict[str, Callable[[Any], object]]:
    """Each library's check of one kind of document."""
    out: dict[str, Callable[[Any], object]] = {"pydantic (read_document)": lambda doc: document_problem(doc, kind)}
    try:
        import msgspec

        wanted = plain_type(DOCUMENT_SCHEMAS[kind])
        out["msgspec"] = lambda doc: msgspec.convert(doc, wanted, strict=True)
    except ImportError:
        pass
    from jsonschema import validators

    strict = validators.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    validator = validators.extend(validators.Draft202012Validator, type_checker=strict)(
        json_schema(DOCUMENT_SCHEMAS[kind])
    )
    out["jsonschema"] = lambda doc: next(iter(validator.iter_errors(doc)), None)
    return out


def documents(directories: list[Path], ranks: int) -> list[tuple[str, str, Any]]:
    """(kind, label, document) of every document in the directories, and the grown cluster summary."""
    found = []
    for directory in directories:
        for path in sorted(directory.glob("*.json")):
            kind = next((k for k in DOCUMENT_SCHEMAS if path.name.startswith(k)), None)
            if kind:
                found.append((kind, str(path), json.loads(path.read_text())))
    cluster = next((doc for kind, _, doc in found if kind == "cluster_summary"), None)
    if cluster is not None and ranks:
        grown = json.loads(json.dumps(cluster))
        grown["per_rank"] = [dict(cluster["per_rank"][i % len(cluster["per_rank"])], rank=i) for i in range(ranks)]
        for key in ("profiled", "present"):
            grown["ranks"][key] = list(range(ranks))
        clock = next(iter(cluster["clock"]["per_rank"].values()))
        grown["clock"]["per_rank"] = {str(i): clock for i in range(ranks)}
        found.append(("cluster_summary", f"the cluster summary grown to {ranks} ranks", grown))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    directories = args.dirs
    if not directories:
        from support.recorded import analysed_copy

        tmp = Path(tempfile.mkdtemp(prefix="profview-docs-"))
        directories = [
            analysed_copy("scenarios", "ddp_slow_rank", tmp / "ddp"),
            analysed_copy("advisor", "input_bound_queue", tmp / "queue"),
        ]
    for kind, label, doc in documents(directories, args.ranks):
        size = len(json.dumps(doc))
        print(f"{kind} ({label}, {size / 1e3:.0f} kB)", flush=True)
        for name, check in checkers(kind).items():
            rounds = max(1, min(50, int(2e6 / max(size, 1))))
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                for _ in range(rounds):
                    check(doc)
                best = min(best, (time.perf_counter() - t) / rounds)
            print(f"  {name:26} {best * 1e3:10.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
