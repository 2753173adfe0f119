"""Prove that a refactoring changed no output: analyse the same inputs with a baseline commit and
with this checkout, and compare every file they write, byte for byte.

    python scripts/check_identical_outputs.py --baseline <git-ref> [--events 1000000] [--keep DIR]

Inputs are made once, by the baseline's code (the raw store format is shared):
  * a 1e6-event recording (phases, spans, user ops on two threads, marks, instants, counters,
    queue probes, steps) and a second rank recorded into the same directory (cluster files);
  * a PyTorch loop with attach(), torch.profiler op capture and a gloo collective (world size 1);
  * the reference Ascend-style device (sample_runs/ascend_reference_device.py, feed mode);
  * the real captures (tests/data): every Kineto trace, the Ascend JOB3 directory
    (profview and MindSpore formats), the MindSpore 2.x CPU directory; and torch.profiler's traces of
    the recorded views loop (tests/data/recorded/views: memory events, module and Python frames).
Each tree then runs `profview analyse`, the importers, `profview DIR -o report.html` (the build
time stamp in the footer is masked), `--summary` and `compare`, and the outputs are compared.
Exit status 1 when any file differs or exists on one side only.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the real captures kept in the repository (tests/data, see its README)
CAPTURES = ROOT / "tests" / "data"
#: torch.profiler's own traces of a recorded loop with profile_memory, with_modules and with_stack (memory
#: events, module and Python frames: paths the real GPU captures do not take), imported like them
TORCH_VIEWS_TRACES = sorted((CAPTURES / "recorded" / "views").glob("*/raw/*-torch-*.json.gz"))

RECORD_EVENTS = r"""
import sys, threading
from profiler import Profiler, ProfiledQueue
out, n_events, rank = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3])
p = Profiler(out, rank=rank, world_size=2, host_counters=False, gpu_counters=False, memory_budget_mb=256)
q = ProfiledQueue(maxsize=4, name="host_queue")
per_step = 40                                   # events per step on the main thread
steps = max(n_events // (per_step + 20), 1)
def worker():
    for i in range(steps):
        with p.op("Decode", op_type="IO"):
            pass
        q.put(i)
t = threading.Thread(target=worker, name="loader")
t.start()
for s in range(steps):
    q.get()
    with p.phase("forward"):
        for k in range(6):
            with p.op(f"MatMul_{k}", op_type="MatMul"):
                pass
    p.mark("bp_end")
    with p.phase("backward"):
        for k in range(6):
            with p.op(f"MatMulGrad_{k}", op_type="MatMul"):
                with p.op("Cast", op_type="Cast"):
                    pass
    with p.span("logging"):
        p.counter("loss", 1.0 / (s + 1))
    p.instant("tick")
    p.step()
t.join()
p.analyse(progress=False)
"""

RECORD_TORCH = r"""
import os, sys, torch, torch.distributed as dist
from profiler import Profiler
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
p = Profiler(sys.argv[1], host_counters=False, gpu_counters=False, framework="torch")
p.attach(model, opt)
for _ in range(8):
    x = torch.randn(16, 32)
    loss = model(x).sum()
    opt.zero_grad(); loss.backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)
    opt.step()
p.analyse(progress=False)
dist.destroy_process_group()
"""


def run(cmd: list[str], tree: Path, cwd: Path | None = None, ok_codes=(0,)) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, cwd=cwd or tree, env=env, capture_output=True, text=True)
    if done.returncode not in ok_codes:
        raise SystemExit(f"failed ({done.returncode}) in {tree}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return done


def make_inputs(tree: Path, inputs: Path, events: float) -> None:
    py = sys.executable
    for rank in (0, 1):
        run(
            [py, "-c", RECORD_EVENTS, str(inputs / "events"), str(events if rank == 0 else events / 10), str(rank)],
            tree,
        )
    run([py, "-c", RECORD_TORCH, str(inputs / "torch"), "29731"], tree)
    run(
        [
            py,
            "sample_runs/ascend_reference_device.py",
            "--out",
            str(inputs / "ascend_ref"),
            "--steps",
            "8",
            "--loader-ms",
            "5",
        ],
        tree,
    )


def outputs_of(tree: Path, inputs: Path, out: Path) -> None:
    """Everything `tree` writes from `inputs`, under `out`."""
    py, cli = sys.executable, [sys.executable, "-m", "viewer.cli"]
    shutil.copytree(inputs, out / "recordings", symlinks=True)
    recordings = [
        out / "recordings" / "events",
        out / "recordings" / "torch",
        out / "recordings" / "ascend_ref" / "feed",
    ]
    for directory in recordings:
        run(cli + ["analyse", str(directory)], tree)
    imported = out / "imported"
    for trace in [*sorted((CAPTURES / "kineto").glob("*.json.gz")), *TORCH_VIEWS_TRACES]:
        run(cli + ["import-kineto", str(trace), "-o", str(imported / trace.name.split(".")[0])], tree)
    run(
        cli + ["import-ascend", str(CAPTURES / "ascend" / "JOB3"), "-o", str(imported / "JOB3"), "--format", "both"],
        tree,
    )
    module = "profiler.postprocess.imported" if (tree / "profiler/postprocess").is_dir() else "profiler.importers"
    mindspore = f"import sys\nfrom {module} import import_mindspore_dir\nimport_mindspore_dir(sys.argv[1], sys.argv[2])"
    run([py, "-W", "ignore", "-c", mindspore, str(CAPTURES / "mindspore_cpu"), str(imported / "mindspore_cpu")], tree)
    texts, reports = out / "texts", out / "reports"
    texts.mkdir()
    reports.mkdir()
    for directory in recordings + sorted(p for p in imported.iterdir() if p.is_dir()):
        name = directory.name if directory.parent != imported else f"imported_{directory.name}"
        run(cli + [str(directory), "-o", str(reports / f"{name}.html")], tree)
        (texts / f"{name}.summary.txt").write_text(run(cli + [str(directory), "--summary"], tree).stdout)
    compare = run(cli + ["compare", str(imported / "diff_control"), str(imported / "diff_test")], tree, ok_codes=(0, 1))
    (texts / "compare.txt").write_text(compare.stdout)
    for report in reports.glob("*.html"):  # the build time stamp is the one varying byte
        report.write_text(
            re.sub(
                r"built by profview (\S+) on [^<]*<",
                r"built by profview \1 on STAMP<",
                report.read_text(encoding="utf-8"),
            ),
            encoding="utf-8",
        )


def compare_trees(a: Path, b: Path) -> tuple[int, list[str]]:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    problems = [f"only in baseline: {p}" for p in sorted(files_a - files_b)]
    problems += [f"only in this checkout: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if not filecmp.cmp(a / rel, b / rel, shallow=False):
            problems.append(f"differs: {rel}")
    return len(files_a & files_b), problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="git ref of the behaviour to preserve")
    ap.add_argument("--events", type=float, default=1e6, help="events in the synthetic recording")
    ap.add_argument("--keep", type=Path, help="keep the work directory here instead of a temporary one")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="profview-identical-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / "baseline-tree"
    if base.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.baseline], cwd=ROOT, check=True)
    try:
        for tree in (base, ROOT):
            run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], tree)
        inputs = work / "inputs"
        shutil.rmtree(inputs, ignore_errors=True)
        print(f"recording inputs with {args.baseline} ({args.events:.0e} events) ...", flush=True)
        make_inputs(base, inputs, args.events)
        for name, tree in (("baseline", base), ("current", ROOT)):
            shutil.rmtree(work / name, ignore_errors=True)
            shutil.rmtree(work / "out", ignore_errors=True)
            print(f"analysing with the {name} tree ...", flush=True)
            outputs_of(tree, inputs, work / "out")  # one path for both: outputs quote their paths
            (work / "out").rename(work / name)
        n, problems = compare_trees(work / "baseline", work / "current")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    for line in problems:
        print(line)
    print(
        f"{n} files compared: {n - sum(p.startswith('differs') for p in problems)} identical, "
        f"{len(problems)} problem(s) (work directory: {work})"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
