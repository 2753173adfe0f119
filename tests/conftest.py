"""Shared fixtures: where the real captures in ../shared/data live."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path:
    return Path(os.environ.get("PROFVIEW_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real captures (Kineto, Ascend, MindSpore). Required in CI, skipped elsewhere."""
    path = _shared_data()
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"shared data not found at {path}")
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.fixture(scope="session")
def job3(shared_data: Path) -> Path:
    """Raw Ascend profiling slices of a real WideDeep run (device 1, 322 steps)."""
    return shared_data / "ascend" / "JOB3"


@pytest.fixture(scope="session")
def gold(shared_data: Path) -> Path:
    """What MindSpore/MindInsight's 2020 parser wrote from JOB3."""
    return shared_data / "ascend" / "run_1_gold"


def pytest_report_header(config) -> str:
    """One visible line: whether the real captures are here (without them their tests skip)."""
    path = _shared_data()
    if path.is_dir():
        return f"shared data: {path} (tests on real captures run)"
    return f"shared data: NOT FOUND at {path}: every test on real captures is SKIPPED"


def pytest_terminal_summary(terminalreporter) -> None:
    """Repeat it at the end, with the count, when the real captures were missing."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "shared data not found" in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} tests on real captures SKIPPED: shared data not found at "
                                    f"{_shared_data()}", yellow=True, bold=True)


@pytest.fixture(scope="module")
def torch_one_thread():
    """torch on one thread for a module's tests (the integrations' tiny models), restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)      # a tiny model: threads only contend with a busy machine
    yield torch
    torch.set_num_threads(before)
