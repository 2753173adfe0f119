"""Recorded source names resolve through one registry (profiler/capture/registry.py): built-in sources,
and sources from outside the production path (the reference device, a plug-in package) declared in
the `profview.sources` entry-point group, found by `profview analyse DIR` in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from support.cli import profview_command, python_env

#: A plug-in source: it records nothing through the hot path, and leaves a sidecar beside the raw
#: store that its merge turns into ops (as torch's traces or a device log are).
TOY_SOURCE = """
import json, os
from pathlib import Path
import pandas as pd
from profiler import Source
from profiler.model import OP_COLUMNS, conform


class ToyOps(Source):
    name = "toy_ops"

    def __init__(self, kernels):
        super().__init__()
        self.kernels = kernels

    def start(self, recorder):
        self.sidecar = Path(recorder.writer.path).with_suffix(".toy.json")

    def stop(self):
        self.sidecar.write_text(json.dumps(self.kernels))

    @classmethod
    def merge(cls, run, recording):
        kernels = []
        for path in sorted((recording.directory / "raw").glob(f"r{recording.rank}-p*.toy.json")):
            kernels += json.loads(path.read_text())
        start = int(run.steps["start_ns"].iat[0])
        toy = pd.DataFrame({"device": "toy:0", "stream": "0", "name": [k[0] for k in kernels],
                            "op_type": [k[0] for k in kernels], "category": "compute",
                            "start_ns": [start + 1000 * i for i in range(len(kernels))],
                            "dur_ns": [k[1] for k in kernels], "self_ns": [k[1] for k in kernels], "step": 0,
                            "source": "toy"})
        run.ops = conform(pd.concat([run.ops, conform(toy, OP_COLUMNS)], ignore_index=True), OP_COLUMNS)
        return run
"""

RECORD_TOY = """
import sys, time
from profiler import Profiler
from toy_profview_source import ToyOps
p = Profiler(sys.argv[1], host_counters=False, gpu_counters=False,
             sources=[ToyOps([["ToyKernel", 2000], ["ToyKernel", 3000], ["ToyCopy", 500]])])
for _ in range(3):
    time.sleep(0.01)
    p.step()
p.stop()
"""

RECORD_REFERENCE = """
import sys
import numpy as np
from profiler import Profiler
from profview_reference_device.device import AscendReferenceDevice
p = Profiler(sys.argv[1], host_counters=False, gpu_counters=False)
dev = AscendReferenceDevice(p, streams=1)
for _ in range(3):
    dev.fp_start()
    dev.launch("Default/MatMul-op1", "MatMul", np.matmul, np.ones((32, 32)), np.ones((32, 32)))
    dev.bp_end()
    dev.iter_end().result(timeout=30)
    p.step()
p.stop()
"""

#: Analyse in this fresh process, and say which reference / plug-in modules were imported before and after.
ANALYSE = """
import json, sys
from profiler.postprocess.recording import analyse_directory
def loaded():
    return sorted(m for m in sys.modules if m.startswith(("profview_reference_device", "toy_profview_source")))
before = loaded()
analyse_directory(sys.argv[1], progress=False)
print(json.dumps({"before": before, "after": loaded()}))
"""


def _plugin_dir(tmp_path: Path, entry_points: str, module: str = TOY_SOURCE) -> Path:
    """A directory holding a distribution (module + dist-info) that declares `entry_points`."""
    plug = tmp_path / "plugin"
    info = plug / "toy_profview_source-1.0.dist-info"
    info.mkdir(parents=True)
    (plug / "toy_profview_source.py").write_text(module)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-profview-source\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return plug


def _env(*paths: Path) -> dict:
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), env["PYTHONPATH"]])
    return env


def _run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_reference_device_recording_is_merged_by_a_fresh_analysis(tmp_path):
    out = tmp_path / "run"
    _run([sys.executable, "-c", RECORD_REFERENCE, str(out)], python_env())
    seen = json.loads(_run([sys.executable, "-c", ANALYSE, str(out)], python_env()).stdout)
    assert seen["before"] == []  # the analysis path itself imports no reference module
    assert "profview_reference_device.device" in seen["after"]  # the entry point named it for "ascend_dev0"
    ops = pd.read_csv(out / "op_detail_0.csv")
    assert ops[["device", "name", "count"]].values.tolist() == [["npu:0", "Default/MatMul-op1", 3]]
    assert json.loads((out / "profiler_info_0.json").read_text())["steps_from"] == "npu:0"


def test_a_recording_of_built_in_sources_loads_no_plugin(tmp_path):
    out = tmp_path / "run"
    plug = _plugin_dir(
        tmp_path,
        """
        [profview.sources]
        toy = toy_profview_source:ToyOps
    """,
    )
    record = (
        "import sys\nfrom profiler import Profiler\np = Profiler(sys.argv[1], gpu_counters=False)\np.step()\np.stop()"
    )
    _run([sys.executable, "-c", record, str(out)], python_env())
    seen = json.loads(_run([sys.executable, "-c", ANALYSE, str(out)], _env(plug)).stdout)
    assert seen == {"before": [], "after": []}


def test_a_plugin_source_declared_by_entry_point_is_merged_by_profview_analyse(tmp_path):
    plug = _plugin_dir(
        tmp_path,
        """
        [profview.sources]
        toy = toy_profview_source:ToyOps
    """,
    )
    out = tmp_path / "run"
    _run([sys.executable, "-c", RECORD_TOY, str(out)], _env(plug))
    _run(profview_command("analyse", str(out)), _env(plug))
    ops = pd.read_csv(out / "op_detail_0.csv").set_index("name")
    assert ops.loc["ToyKernel", "count"] == 2 and ops.loc["ToyCopy", "count"] == 1
    assert ops.loc["ToyKernel", "device"] == "toy:0"
    assert json.loads((out / "profiler_info_0.json").read_text())["sources"]["toy_ops"]["status"] == "ok"
    # the same recording where the plug-in is not installed: analysed, without the plug-in's data
    (out / "op_detail_0.csv").unlink()
    _run(profview_command("analyse", str(out)), python_env())
    assert not (out / "op_detail_0.csv").exists()


def test_a_broken_plugin_is_one_warning_and_the_analysis_goes_on(tmp_path):
    plug = _plugin_dir(
        tmp_path,
        """
        [profview.sources]
        broken = no_such_module_for_profview:Nothing
        toy = toy_profview_source:ToyOps
    """,
    )
    out = tmp_path / "run"
    _run([sys.executable, "-c", RECORD_TOY, str(out)], _env(plug))
    done = _run(profview_command("analyse", str(out)), _env(plug))
    assert "the source plug-in broken (no_such_module_for_profview:Nothing) cannot be loaded" in done.stderr
    assert "Traceback" not in done.stderr
    assert pd.read_csv(out / "op_detail_0.csv").set_index("name").loc["ToyKernel", "count"] == 2
