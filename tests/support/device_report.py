"""The installed `profview` command as a user runs it, and the "Device time" figures of its report as
the summary and the Overview tables show them: shared by tests/integration/test_gpu_view.py and the
timed tests it hands off to (tests/e2e/test_gpu_view_browser.py, tests/e2e/test_gpu_view_dataloader.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

from viewer.device_figures import IDLE_CAUSE_LABELS

REPO = Path(__file__).resolve().parents[2]
PROFVIEW = str(Path(sys.executable).with_name("profview"))


def profview(*args: str) -> subprocess.CompletedProcess:
    """The profview command, as a user runs it."""
    return subprocess.run([PROFVIEW, *args], capture_output=True, text=True, timeout=600, cwd=REPO)


def import_nccl_data(captures: Path, out: Path) -> Path:
    """nccl_data.json.gz imported by `profview import` into `out`."""
    result = profview("import", str(captures / "kineto" / "nccl_data.json.gz"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


def expected_row(d: dict) -> list[str]:
    """A report devices record as the Device time tables show it (one decimal, the report's values)."""
    causes = {c: d[f"idle_{c}_ms"] for c in ("sync", "data", "host", "launch", "other")}
    lead = max(causes, key=causes.get)
    return [
        d["device"],
        f"{d['busy_pct']:.1f}",
        f"{d['idle_pct']:.1f}",
        f"{d['compute_pct']:.1f}",
        f"{d['comm_pct']:.1f}",
        f"{d['memory_pct']:.1f}",
        f"{d['comm_compute_overlap_pct']:.1f}",
        f"{IDLE_CAUSE_LABELS[lead]}: {causes[lead]:.1f} ms ({100 * causes[lead] / d['idle_ms']:.1f} % of idle)",
    ]


def section_rows(html: str, page: str, title: str) -> list[list[str]]:
    """The rows of the first table under the section `title` of a report page, as cell texts."""
    body = html[html.index(f'id="page-{page}"') :]
    body = body[body.index(f"<h2>{title}</h2>") :]
    body = body[: body.index("</table>")]
    return [
        [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
        for tr in re.findall(r"<tr>(.*?)</tr>", body)[1:]
    ]
