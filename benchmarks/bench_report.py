"""Report benchmark: the report and the timeline from the columnar event file, against json.load, at 1e5 .. 1e7
events (and 1e8 with --events 1e8), in one run.

    python benchmarks/bench_report.py [--events 1e5,1e6,1e7] [--repeat 3] [--keep DIR] [--no-browser] [--no-json]
                                      [--baseline TREE_OR_GIT_REF]

For each size, on the same synthetic run (tests/support/viewer_fixtures.py: its event file written by the
generator, chunk by chunk; a Chrome trace of exactly the same events written with profview's row
writer), each in a fresh process, `--repeat` times (min-max printed, the machine is shared):
  * report: the whole HTML report built from the directory (wall, CPU, peak RSS, HTML size);
  * timeline read: opening the event file and the whole-run level-of-detail pass (what the
    timeline page reads), against `json.load` of the same trace;
  * browser: headless Chromium, from navigation until every plot of every tab is drawn; then a
    zoom on the whole-run view (1/40 of the run): the time until the finer level is drawn.
With `--baseline TREE_OR_GIT_REF` (another checkout, or a git ref of this repository, checked out into
a temporary worktree with its C extensions built: a released version, the commit before a change),
the baseline writes its own synthetic run of the same events and its report build and timeline read
are timed too, alternating with this checkout's (before / after under the same load). The JSON path
the viewer used before the event file is such a baseline: any commit from before the event file.
Targets (issue 16): at 1e7 events the report builds in <= 5 s with peak RSS <= 1 GB and HTML <= 15 MB;
the page opens in <= 3 s; a zoom redraw takes <= 300 ms. At 1e8 it builds in bounded memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

STEPS = 200
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def prelude(tree: Path) -> str:
    """The start of every child's code: profview, its tests and benchmarks imported from the checkout `tree`."""
    return (
        "import sys, time, resource, json\n"
        f"sys.path[:0] = [{str(tree)!r}, {str(tree / 'tests')!r}, {str(tree / 'benchmarks')!r}]\n"
    )


WRITE_RUN = r"""
from pathlib import Path
try:
    from support.viewer_fixtures import Spec, write_run
except ImportError:  # a checkout from before tests/support/
    from viewer_fixtures import Spec, write_run
write_run(Path(sys.argv[1]), Spec(steps=int(sys.argv[2]), ops_per_step=int(sys.argv[3]), queues=False, counters=False))
print("{}")
"""

BUILD = r"""
from pathlib import Path
from viewer.context import Context
from viewer.report import build_report
from viewer.inputs import load_input
d, out = Path(sys.argv[1]), Path(sys.argv[2])
t, c = time.perf_counter(), time.process_time()
html = build_report(Context(load_input(d)))
wall, cpu = time.perf_counter() - t, time.process_time() - c
out.write_text(html, encoding="utf-8")
print(json.dumps({"wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "bytes": out.stat().st_size}))
"""

READ_EVENTS = r"""
from pathlib import Path
from viewer.trace import load_timeline
from viewer.lod import busy_levels
t = time.perf_counter()
tl = load_timeline(Path(sys.argv[1]))
t0, t1 = tl.time_range_ns()
lanes = [l for l in range(len(tl.lanes)) if tl.lanes["kind"][l] != "steps" and tl.file.lane_rows(l)[1]]
levels = busy_levels(tl, lanes, t0, t1)
print(json.dumps({"wall": time.perf_counter() - t, "events": tl.events,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

READ_JSON = r"""
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    doc = json.load(f)
print(json.dumps({"wall": time.perf_counter() - t, "events": len(doc["traceEvents"]),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def synthetic_run(directory: Path, events: int, tree: Path = ROOT) -> Path:
    """A run whose event file holds about `events` events (2 per op plus 3 per step), written by `tree`."""
    if not (directory / "profiler_info_0.json").exists():
        made = child(WRITE_RUN, directory, STEPS, max(1, (events - 3 * STEPS) // (2 * STEPS)), tree=tree, timeout=None)
        if "error" in made:
            raise SystemExit(f"writing the synthetic run with {tree} failed: {made['error']}")
    return directory


def chrome_trace_of(directory: Path) -> Path:
    """timeline_0.json holding exactly the event file's events, in profview's layout (row kernel)."""
    import numpy as np

    from profiler.export.chrome_trace import head_text
    from profiler.export.event_file import read_event_file
    from profiler.export.timeline_model import Head
    from profiler.export.trace_text import row_texts

    path = directory / "timeline_0.json"
    if path.exists():
        return path
    f = read_event_file(directory / "events_0.arrow")
    lanes = f.lanes
    with open(path, "wb") as out:
        out.write(b'{"traceEvents":[\n')
        for start, stop in f.chunks():
            cols = {
                c: f.column(c, start, stop) for c in ("ph", "lane", "start_ns", "dur_ns", "name", "category", "args")
            }
            import pandas as pd

            code1, _ = pd.factorize(
                (cols["lane"].astype(np.uint64) << np.uint64(48))
                | (cols["name"].astype(np.uint64) << np.uint64(20))
                | (cols["category"].astype(np.uint64) << np.uint64(8))
                | cols["ph"].astype(np.uint64)
            )
            key, _ = pd.factorize(code1.astype(np.int64) * (len(f.args) + 1) + cols["args"] + 1)
            first = np.zeros(key.max() + 1, np.int64)
            first[key[::-1]] = np.arange(len(key))[::-1]
            heads = []
            for i in first.tolist():
                lane = lanes[int(cols["lane"][i])]
                a = int(cols["args"][i])
                args = json.loads(f.args[a]) if a >= 0 else None
                ph = chr(int(cols["ph"][i]))
                heads.append(
                    head_text(
                        Head(
                            ph,
                            lane["pid"],
                            lane["tid"],
                            f.categories[int(cols["category"][i])],
                            f.names[int(cols["name"][i])],
                            args,
                        )
                    )
                )
            blob = b"".join(heads)
            offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])]).astype(np.int64)
            x = cols["ph"] == ord("X")
            for sel, dur in ((x, cols["dur_ns"]), (~x, None)):
                rows = np.flatnonzero(sel)
                if len(rows):
                    for text in row_texts(
                        blob,
                        offsets,
                        key.astype(np.int64),
                        cols["start_ns"].astype(np.int64),
                        None if dur is None else dur.astype(np.int64),
                        rows.astype(np.int64),
                    ):
                        out.write(text)
        meta = [
            {"ph": "M", "pid": lane["pid"], "tid": lane["tid"], "name": "thread_name", "args": {"name": lane["thread"]}}
            for lane in lanes
        ]
        out.write(",\n".join(json.dumps(m) for m in meta).encode() + b'\n],"displayTimeUnit":"ms"}\n')
    return path


def child(code: str, *args, tree: Path = ROOT, timeout: Optional[int] = 1800) -> dict:
    """Run `code` in a fresh process importing from `tree`; its last line of output, as JSON."""
    r = subprocess.run(
        [sys.executable, "-c", prelude(tree) + code, *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["killed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def browser(page: Path, repeat: int) -> tuple[list[float], list[float], list[float]]:
    """Seconds until the first tab is drawn (the page is open) and until every plot of every tab is;
    ms of each zoom redraw (two zooms per load: 1/40 and 1/400 of the run)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    from support.viewer_browser import ALL_TABS_DRAWN

    opens, loads, zooms = [], [], []
    for _ in range(repeat):
        options = Options()
        options.binary_location = CHROMIUM
        with tempfile.TemporaryDirectory() as profile:
            for arg in (
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
                "--window-size=1400,1000",
                f"--user-data-dir={profile}",
            ):
                options.add_argument(arg)
            driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
            driver.set_script_timeout(300)
            try:
                started = time.perf_counter()
                driver.get(page.as_uri())
                driver.execute_async_script(FIRST_TAB_DRAWN)
                opens.append(time.perf_counter() - started)
                driver.execute_async_script(ALL_TABS_DRAWN)
                loads.append(time.perf_counter() - started)
                driver.execute_script("profview.show('timeline')")
                for fraction in (40, 400):
                    zooms.append(driver.execute_async_script(ZOOM, fraction))
            finally:
                driver.quit()
    return opens, loads, zooms


#: Calls back once the plots of the tab shown on opening are drawn.
FIRST_TAB_DRAWN = """
const done = arguments[arguments.length - 1];
(function poll() {
  const page = document.querySelector('.page.active');
  const plots = page ? Array.from(page.querySelectorAll('div.plot')).filter(d => d.offsetParent !== null) : [];
  if (page && plots.every(d => d.dataset.done)) { done(true); } else { setTimeout(poll, 10); }
})();
"""

#: Zoom the whole-run view to 1/arguments[0] of the run; calls back with the ms until it was redrawn.
ZOOM = """
const done = arguments[arguments.length - 1], fraction = arguments[0];
const div = document.querySelector('#page-timeline div.plot[data-lod]');
const lod = JSON.parse(document.getElementById(div.dataset.lod).textContent);
const mid = (lod.t0 + lod.t1) / 2, half = (lod.t1 - lod.t0) / fraction / 2;
delete div.dataset.zoomMs;
Plotly.relayout(div, {'xaxis.range': [mid - half, mid + half]});
(function poll() { if (div.dataset.zoomMs) done(Number(div.dataset.zoomMs)); else setTimeout(poll, 5); })();
"""


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    return (fmt.format(min(values)) + "-" + fmt.format(max(values))) if values else "-"


def print_build(label: str, events: Path, builds: list[dict], reads: list[dict]) -> None:
    """The event file's size, the report build and the timeline read of one checkout's run."""
    ok = [b for b in builds if "error" not in b]
    print(
        f"  event file{label}: {events.stat().st_size / 1e6:.0f} MB, "
        f"{events.stat().st_size / reads[0]['events']:.1f} B/event",
        flush=True,
    )
    if not ok:
        print(f"  report build{label} failed: {builds[0]['error']}")
        return
    print(
        f"  report build{label}: wall {span([b['wall'] for b in ok])} s, cpu {span([b['cpu'] for b in ok])} s, "
        f"peak RSS {span([b['rss_mb'] for b in ok], '{:.0f}')} MB, HTML {ok[0]['bytes'] / 1e6:.1f} MB",
        flush=True,
    )
    print(
        f"  timeline read{label}, event file + level of detail: {span([r['wall'] for r in reads])} s, "
        f"peak RSS {span([r['rss_mb'] for r in reads], '{:.0f}')} MB",
        flush=True,
    )


def baseline_tree(baseline: str, base: Path) -> Path:
    """The baseline's checkout: a directory as given, else the git ref checked out (once) into a worktree
    under `base`, its C extensions built in place with this interpreter."""
    if Path(baseline).is_dir():
        return Path(baseline).resolve()
    tree = base / f"baseline-{baseline.replace('/', '_')}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), baseline], check=True)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True)
    return tree.resolve()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1e5,1e6,1e7", help="comma-separated event counts")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep the synthetic runs here (re-used when present)")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--no-json", action="store_true", help="skip the Chrome-trace baselines")
    parser.add_argument(
        "--baseline", help="another checkout, or a git ref of this repository, timed alternating with this one"
    )
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="profview-bench-"))
    for count in (int(float(x)) for x in args.events.split(",")):
        directory = synthetic_run(base / f"run-{count}", count)
        trees = {"": (ROOT, directory)}
        if args.baseline:
            tree = baseline_tree(args.baseline, base)
            trees[f" [baseline {tree}]"] = (tree, synthetic_run(base / f"run-{count}-baseline", count, tree))
        print(f"== {count:,} events (load average {os.getloadavg()[0]:.1f})", flush=True)
        builds: dict[str, list[dict]] = {label: [] for label in trees}
        reads: dict[str, list[dict]] = {label: [] for label in trees}
        for _ in range(args.repeat):  # the checkouts alternate: the same load for both
            for label, (tree, run) in trees.items():
                report = base / f"report-{count}{'-baseline' if label else ''}.html"
                builds[label].append(child(BUILD, run, report, tree=tree))
                reads[label].append(child(READ_EVENTS, run / "events_0.arrow", tree=tree))
        for label, (_tree, run) in trees.items():
            print_build(label, run / "events_0.arrow", builds[label], reads[label])
        print(f"  load average now {os.getloadavg()[0]:.1f}", flush=True)
        new = reads[""]
        if all("error" in b for b in builds[""]):
            continue
        if not args.no_json and count <= 2 * 10**7:
            trace = chrome_trace_of(directory)
            print(f"  Chrome trace of the same events: {trace.stat().st_size / 1e6:.0f} MB", flush=True)
            whole = [child(READ_JSON, trace) for _ in range(1 if count >= 10**7 else args.repeat)]
            for label, runs in (("json.load", whole),):
                good = [r for r in runs if "error" not in r]
                if not good:
                    print(f"  {label}: failed: {runs[0]['error']}")
                    continue
                ratio = min(r["wall"] for r in good) / min(r["wall"] for r in new)
                print(
                    f"  {label}: {span([r['wall'] for r in good])} s, peak RSS "
                    f"{span([r['rss_mb'] for r in good], '{:.0f}')} MB -> event file x{ratio:.1f} faster",
                    flush=True,
                )
        if not args.no_browser and count <= 2 * 10**7:
            opens, loads, zooms = browser(base / f"report-{count}.html", args.repeat)
            print(
                f"  browser: page open (first tab drawn) {span(opens)} s, all tabs drawn {span(loads)} s; "
                f"zoom redraw {span(zooms, '{:.0f}')} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
