"""Verdict benchmark: run the scenario bank (tests/support/scenario_bank.py) and say how many verdicts are right,
on a quiet machine and again with busy background processes.

    python benchmarks/bench_verdicts.py [--only NAME,NAME] [--busy 1] [--no-busy] [--keep DIR]

For each scenario (a real PyTorch loop with one injected bottleneck) the table shows what was injected,
what a correct profiler says, what profview says (report_0.json's verdict, or cluster_summary.json for
the DDP straggler), whether that is right, the key figures (the loop's own clock next to profview's
numbers) and the seconds the scenario took (loop + analyse). `known` marks the scenarios the test
suite expects profview to get wrong today (xfail). The second pass starts `--busy` processes spinning
`while True: pass` and reruns the bank: how many verdicts stay right under load.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.scenario_bank import SCENARIOS, Outcome, run_scenario  # noqa: E402


def run_bank(names: list[str], root: Path, label: str) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    started = time.perf_counter()
    for name in names:
        try:
            outcomes[name] = run_scenario(SCENARIOS[name], root / label / name)
        except Exception as exc:  # a scenario that crashes is reported, the others still run
            o = Outcome(name, root / label / name, {})
            o.problems = [f"crashed: {exc!r}"]
            o.figures = "crashed"
            outcomes[name] = o
        o = outcomes[name]
        print(f"  [{label}] {name}: {'right' if o.right else 'WRONG'} ({o.seconds:.1f} s)", file=sys.stderr, flush=True)
    print(f"  [{label}] bank: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return outcomes


def got(o: Outcome) -> str:
    sc = SCENARIOS[o.name]
    if sc.multiprocess and o.cluster:
        s = o.cluster.get("straggler") or {}
        return f"straggler_rank {s.get('rank')}" if s else "no straggler"
    return o.verdict


def table(outcomes: dict[str, Outcome], title: str) -> None:
    print(f"\n## {title}\n")
    print("| scenario | expected | got | right? | known wrong today | key figures | s |")
    print("|---|---|---|---|---|---|---|")
    for name, o in outcomes.items():
        sc = SCENARIOS[name]
        right = "yes" if o.right else ("NO (injection failed: " + "; ".join(o.insane) + ")" if o.insane else "NO")
        known = ("flaky" if sc.flaky_today else "yes") if sc.wrong_today else ""
        print(f"| {name} | {sc.expected} | {got(o)} | {right} | {known} | {o.figures} | {o.seconds:.1f} |")
    right = sum(o.right for o in outcomes.values())
    print(f"\n{right} of {len(outcomes)} right; total {sum(o.seconds for o in outcomes.values()):.1f} s")


def wrong_details(outcomes: dict[str, Outcome]) -> None:
    print("\nWhat is wrong, per scenario:")
    for name, o in outcomes.items():
        if not o.right:
            for line in o.problems + [f"(injection) {x}" for x in o.insane]:
                print(textwrap.fill(line, 110, initial_indent=f"  {name}: ", subsequent_indent="      "))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: the whole bank)")
    ap.add_argument("--busy", type=int, default=1, help="busy background processes in the second pass (default 1)")
    ap.add_argument("--no-busy", action="store_true", help="skip the second pass")
    ap.add_argument("--keep", type=Path, help="keep the output directories here")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    tmp = None
    root = args.keep
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_verdicts_")
        root = Path(tmp.name)
    try:
        quiet = run_bank(names, root, "quiet")
        table(quiet, "quiet machine")
        wrong_details(quiet)
        if args.no_busy or args.busy < 1:
            return 0
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            time.sleep(0.5)
            busy = run_bank(names, root, "busy")
        finally:
            for p in spinners:
                p.kill()
                p.wait()
        table(busy, f"with {args.busy} busy background process(es)")
        wrong_details(busy)
        stayed = [n for n in names if quiet[n].right and busy[n].right]
        flipped_wrong = [n for n in names if quiet[n].right and not busy[n].right]
        flipped_right = [n for n in names if not quiet[n].right and busy[n].right]
        print(
            f"\nUnder load: {len(stayed)} of {sum(o.right for o in quiet.values())} verdicts that were right on the "
            f"quiet machine stayed right; {sum(o.right for o in busy.values())} of {len(names)} right under load."
        )
        if flipped_wrong:
            print(f"  right quiet, wrong under load: {', '.join(flipped_wrong)}")
        if flipped_right:
            print(f"  wrong quiet, right under load: {', '.join(flipped_right)}")
        print(
            f"Bank time: quiet {sum(o.seconds for o in quiet.values()):.1f} s, "
            f"busy {sum(o.seconds for o in busy.values()):.1f} s"
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
