"""Re-record the recorded fixtures of the deterministic tier: tests/data/recorded/ (its README says what each holds).

    .venv/bin/python scripts/record_fixtures.py                 # every fixture
    .venv/bin/python scripts/record_fixtures.py scenarios/data_sleep_w0 advisor/comm_bound   # some of them

Each fixture is a real loop recorded by profview once: the raw store (`raw/`: what `Profiler` wrote while
the loop ran, torch captures included), nothing analysed, and `truth.json`, what the loop measured with
its own clock. The deterministic tests re-analyse the raw store (`profview analyse` gives the same files
for the same store, byte for byte) and judge the outputs with the same checks the timed tier applies to a
live run: tests/integration/test_recorded_scenarios.py (the scenario bank) and test_recorded_advisor.py.

A recording is kept only when its injection took effect (the scenario's own sanity check) and profview's
answer on it is right (its judge / check): a fixture never captures a wrong answer or a broken loop.
Record on a quiet machine. After re-recording, run `bash scripts/test.sh` and commit the new fixtures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support import advisor_loops, scenario_bank, torch_views_loop  # noqa: E402

RECORDED = REPO / "tests" / "data" / "recorded"


def _plain(value):
    """JSON for the loops' measurements (numpy numbers and arrays as plain numbers and lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in truth.json")


def keep(work: Path, dest: Path, truth: dict) -> None:
    """Keep the raw stores under `work` (raw/ of a recording, or of each rank's directory) and truth.json."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for raw in sorted(work.rglob("raw")):
        if raw.is_dir():
            target = dest / raw.relative_to(work)
            shutil.copytree(raw, target, ignore=shutil.ignore_patterns(".lock-*", "previous"))
    (dest / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True, default=_plain) + "\n")


class NotRecorded(Exception):
    """The loop did not do what it should (its sanity check) or profview's answer on it was wrong."""


def record_scenario(name: str, work: Path) -> None:
    sc = scenario_bank.SCENARIOS[name]
    outcome = scenario_bank.run_scenario(sc, work, attempts=3)
    if outcome.insane or outcome.problems:
        raise NotRecorded("; ".join(outcome.insane + outcome.problems))
    keep(work, RECORDED / "scenarios" / name, {"scenario": name, **outcome.truth})


def record_advisor_loop(name: str, work: Path) -> None:
    loop = advisor_loops.LOOPS[name]
    report = loop.run(work)
    try:
        loop.check(report, work)
    except AssertionError as exc:
        raise NotRecorded(str(exc).splitlines()[0] if str(exc) else "its check failed") from None
    keep(work, RECORDED / "advisor" / name, {"loop": name})


def record_straggler(work: Path) -> None:
    advisor_loops.run_straggler_ranks(work)
    keep(work, RECORDED / "advisor" / "straggler_ranks", {"ranks": [list(r) for r in advisor_loops.STRAGGLER_RANKS]})


def record_torch_views(work: Path) -> None:
    truth = torch_views_loop.run(work)
    keep(work, RECORDED / "views" / "torch_memory_modules", truth)


def fixtures() -> dict[str, callable]:
    """Every fixture by its path under tests/data/recorded/, and how it is recorded."""
    out = {f"scenarios/{name}": (lambda w, n=name: record_scenario(n, w)) for name in scenario_bank.SCENARIOS}
    out.update({f"advisor/{name}": (lambda w, n=name: record_advisor_loop(n, w)) for name in advisor_loops.LOOPS})
    out["advisor/straggler_ranks"] = record_straggler
    out["views/torch_memory_modules"] = record_torch_views
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="fixtures to re-record (default: all), e.g. scenarios/data_sleep_w0")
    args = ap.parse_args()
    table = fixtures()
    unknown = [n for n in args.names if n not in table]
    if unknown:
        ap.error(f"unknown fixture(s) {', '.join(unknown)}; known: {', '.join(table)}")
    names = args.names or list(table)
    failed = []
    for i, name in enumerate(names, 1):
        started = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                table[name](Path(tmp) / "run")
        except NotRecorded as exc:
            failed.append(name)
            print(f"[{i}/{len(names)}] {name}: NOT recorded (the earlier recording stays): {exc}", flush=True)
            continue
        size = sum(p.stat().st_size for p in (RECORDED / name).rglob("*") if p.is_file())
        print(f"[{i}/{len(names)}] {name}: {time.perf_counter() - started:.1f} s, {size / 1e3:.0f} kB", flush=True)
    if failed:
        print(f"not recorded: {' '.join(failed)} (on a quieter machine: scripts/record_fixtures.py {' '.join(failed)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
