"""A seeded fuzz campaign against every `profview` entry point (tests/support/fuzzing.py does the work).

    python benchmarks/fuzz_campaign.py --seed 1 --count 2000 --jobs 2 --failures test-artifacts/fuzz-failures

Case i of a campaign is drawn from Random(f"campaign/{seed}/{i}"): an entry point (weighted), one
of its mutations (of the `--mutation`s, when given), and that mutation's own integer seed; `--only I`
re-runs case I alone and prints it in full. Prints, per entry point: inputs, clean refusals, accepted,
tracebacks (and how many distinct signatures: exception type + innermost project frame), hangs,
signals, and the other failures (messy refusals, invalid input accepted, missing output, wrong
numbers); then every distinct failure signature with its entry points, mutations and a
reproducer. The first `--keep` failing inputs of each signature are kept under `--failures`
(case/, repro.sh, stderr.txt, case.json), with summary.json and summary.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support import fuzzing as fz  # noqa: E402

#: How often each entry point is drawn (serve has a single, quick family).
WEIGHTS = {
    "view-html": 3,
    "view-summary": 2,
    "analyse": 3,
    "import-kineto": 2,
    "import-ascend": 2,
    "compare": 2.5,
    "view-foreign": 3,
    "serve": 0.5,
    "watch": 1.5,
}


def draw(seed: int, index: int, entries: list[str], only: Optional[list[str]] = None) -> tuple[str, str, int]:
    """Case `index`'s entry point, mutation (among `only` when given) and mutation seed."""
    rng = random.Random(f"campaign/{seed}/{index}")
    if only:
        entries = [e for e in entries if set(fz.mutations_for(e)) & set(only)]
    entry = rng.choices(entries, weights=[WEIGHTS.get(e, 1) for e in entries])[0]
    mutation = rng.choice([m for m in fz.mutations_for(entry) if not only or m in only])
    return entry, mutation, rng.getrandbits(31)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=fz.DEFAULT_TIMEOUT_S, help="seconds before a run is a hang")
    p.add_argument(
        "--failures", type=Path, default=Path("test-artifacts") / "fuzz-failures", help="where failing inputs are kept"
    )
    p.add_argument("--keep", type=int, default=3, help="failing inputs kept per distinct signature")
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--entry", action="append", choices=sorted(fz.ENTRY_POINTS), help="only these entry points")
    p.add_argument(
        "--mutation",
        action="append",
        choices=sorted(fz.MUTATIONS),
        help="only these mutations (e.g. the classes of one issue)",
    )
    p.add_argument("--only", type=int, default=None, help="run case INDEX of the campaign alone, verbosely")
    args = p.parse_args(argv)

    entries = args.entry or list(fz.ENTRY_POINTS)
    scratch = Path(tempfile.mkdtemp(prefix="profview-fuzz-", dir=args.work))
    started = time.monotonic()
    print(f"building seeds in {scratch / 'seeds'} ...", file=sys.stderr)
    seeds = fz.build_seeds(scratch / "seeds")
    if seeds.privileged:
        print(
            "running privileged: chmod 000 does not deny reads, the unreadable-file cases are skipped", file=sys.stderr
        )

    indices = [args.only] if args.only is not None else list(range(args.count))
    lock = threading.Lock()
    kept: Counter = Counter()
    args.failures.mkdir(parents=True, exist_ok=True)

    def one(index: int) -> dict:
        entry, mutation, case_seed = draw(args.seed, index, entries, args.mutation)
        work = scratch / "cases" / f"{index:06d}"
        try:
            try:
                case = fz.make_case(entry, mutation, case_seed, seeds, work)
            except Exception as exc:  # a bug of the harness, not the product
                return {
                    "index": index,
                    "entry": entry,
                    "mutation": mutation,
                    "verdict": "harness_error",
                    "signature": f"harness: {type(exc).__name__}: {exc}"[:300],
                }
            verdict = fz.run_case(case, timeout=args.timeout)
            record = {
                "index": index,
                "entry": entry,
                "mutation": mutation,
                "family": case.family,
                "seed": case_seed,
                "detail": case.detail[:500],
                "expect": case.expect,
                "verdict": verdict.kind,
                "signature": verdict.signature,
                "message": verdict.message.splitlines()[-1][:300] if verdict.message else "",
                "seconds": round(sum(r.seconds for r in verdict.results), 2),
            }
            if args.only is not None:
                print(
                    fz.report(case, verdict)
                    if verdict.failed
                    else f"{verdict.kind}: {case.describe()}\n  | {verdict.message}"
                )
            if verdict.failed:
                with lock:
                    keep = kept[verdict.signature] < args.keep or verdict.kind in (fz.HANG, fz.SIGNAL)
                    kept[verdict.signature] += 1
                    n = kept[verdict.signature]
                if keep:
                    dest = args.failures / _slug(verdict.signature) / f"case-{index:06d}"
                    try:
                        fz.save_case(case, verdict, dest)
                        record["saved"] = str(dest)
                    except Exception as exc:  # keep going; say so in the record
                        record["saved_error"] = f"{type(exc).__name__}: {exc}"
                record["last_lines"] = verdict.message.splitlines()[-6:]
                record["occurrence"] = n
            return record
        finally:
            fz.remove_tree(work)

    records = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(one, i) for i in indices]
        for k, fut in enumerate(as_completed(futures), 1):
            records.append(fut.result())
            if k % 100 == 0 or k == len(futures):
                bad = sum(1 for r in records if r["verdict"] in fz.FAILURES)
                print(
                    f"  {k}/{len(futures)} cases, {bad} failing, {time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    records.sort(key=lambda r: r["index"])
    elapsed = time.monotonic() - started
    text = summarise(records, args, elapsed)
    print(text)
    (args.failures / "summary.md").write_text(text)
    (args.failures / "summary.json").write_text(
        json.dumps(
            {
                "seed": args.seed,
                "count": args.count,
                "jobs": args.jobs,
                "timeout": args.timeout,
                "elapsed_s": round(elapsed, 1),
                "records": records,
            },
            indent=1,
        )
    )
    fz.remove_tree(scratch)
    return 1 if any(r["verdict"] in fz.FAILURES for r in records) else 0


def _slug(signature: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in signature)[:120].strip("_") or "failure"


def summarise(records: list[dict], args, elapsed: float) -> str:
    cmd = (
        f"python benchmarks/fuzz_campaign.py --seed {args.seed} --count {args.count} --jobs {args.jobs} "
        f"--timeout {args.timeout:g}"
        + "".join(f" --entry {e}" for e in args.entry or [])
        + "".join(f" --mutation {m}" for m in args.mutation or [])
    )
    out = ["# profview fuzz campaign", "", f"`{cmd}` — {len(records)} inputs in {elapsed / 60:.1f} min", ""]
    cols = [
        "inputs",
        "refused",
        "accepted",
        "tracebacks",
        "distinct tb",
        "hangs",
        "signals",
        "messy",
        "accepted invalid",
        "no output",
        "wrong numbers",
        "skipped",
        "harness errors",
    ]
    out.append("| entry point | " + " | ".join(cols) + " |")
    out.append("|---|" + "---:|" * len(cols))
    by_entry = defaultdict(list)
    for r in records:
        by_entry[r["entry"]].append(r)
    for entry in list(fz.ENTRY_POINTS) + ["(all)"]:
        rs = records if entry == "(all)" else by_entry.get(entry, [])
        if not rs:
            continue
        c = Counter(r["verdict"] for r in rs)
        tbs = {r["signature"] for r in rs if r["verdict"] == fz.TRACEBACK}
        row = [
            len(rs),
            c[fz.REFUSED],
            c[fz.ACCEPTED],
            c[fz.TRACEBACK],
            len(tbs),
            c[fz.HANG],
            c[fz.SIGNAL],
            c[fz.MESSY],
            c[fz.ACCEPTED_INVALID],
            c[fz.NO_OUTPUT],
            c[fz.WRONG_NUMBER],
            c[fz.SKIPPED],
            c["harness_error"],
        ]
        out.append(f"| {entry} | " + " | ".join(str(x) for x in row) + " |")
    out += ["", "## Distinct failure signatures", ""]
    sigs = defaultdict(list)
    for r in records:
        if r["verdict"] in fz.FAILURES or r["verdict"] == "harness_error":
            sigs[(r["verdict"], r["signature"])].append(r)
    for (kind, sig), rs in sorted(sigs.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1])):
        families = Counter(r.get("family", "?") for r in rs)
        muts = Counter(r["mutation"] for r in rs)
        ents = Counter(r["entry"] for r in rs)
        saved = next((r["saved"] for r in rs if r.get("saved")), "")
        first = rs[0]
        out.append(
            f"- **{kind}** `{sig}` x{len(rs)} — families {dict(families)}; entries {dict(ents)}; mutations {dict(muts)}"
        )
        out.append(
            f"  - e.g. case {first['index']} ({first['entry']}, {first['mutation']}): {first.get('detail', '')[:200]}"
        )
        if first.get("message"):
            out.append(f"  - says: {first['message'][:240]}")
        if saved:
            out.append(f"  - reproduce: `sh {saved}/repro.sh`  (or `--only {first['index']}`)")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
