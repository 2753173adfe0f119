"""Shared fixtures (the real captures in tests/data, see its README for provenance and licences) and the
rule that keeps the layout and the tiers in step (docs/testing.md): every test under tests/e2e/ carries a
tier marker (timing, browser, fuzz, slow), no test under tests/unit/ or tests/integration/ does."""

import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Real captures written by real profilers on real hardware, kept in the repository unchanged.
CAPTURES = REPO / "tests" / "data"
#: The markers of the timed tier (setup.cfg); a test with none of them is in the deterministic tier.
TIER_MARKERS = ("timing", "browser", "fuzz", "slow")
#: Where the tests of each tier live.
TIMED_DIR = "e2e"
DETERMINISTIC_DIRS = ("unit", "integration")


def pytest_configure(config) -> None:
    """Ctrl-C at its default here, so in every process a test starts: the tests that send SIGINT
    play a user at a terminal, but a shell script's background job (`pytest ... &`) starts with
    SIGINT ignored, and a child inherits that (it would never see the signal)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items) -> None:
    """Refuse a collection where a test's folder and its tier disagree (a timed test in unit/, an
    unmarked one in e2e/, a test outside the three folders): the folder says at a glance what a test is."""
    misplaced = []
    for item in items:
        folder = Path(str(item.path)).relative_to(REPO / "tests").parts[0]
        timed = any(item.get_closest_marker(name) for name in TIER_MARKERS)
        if folder == TIMED_DIR and not timed:
            misplaced.append(
                f"{item.nodeid}: under tests/{TIMED_DIR}/ without a tier marker ({', '.join(TIER_MARKERS)})"
            )
        elif folder in DETERMINISTIC_DIRS and timed:
            misplaced.append(
                f"{item.nodeid}: a timed-tier marker under tests/{folder}/ (it belongs in tests/{TIMED_DIR}/)"
            )
        elif folder not in (TIMED_DIR, *DETERMINISTIC_DIRS):
            misplaced.append(f"{item.nodeid}: outside tests/unit, tests/integration and tests/e2e")
    if misplaced:
        raise pytest.UsageError("tests in the wrong place for their tier:\n  " + "\n  ".join(misplaced))


@pytest.fixture(scope="session")
def captures() -> Path:
    """The read-only real captures (Kineto, Ascend, MindSpore): tests/data."""
    return CAPTURES


@pytest.fixture(scope="session")
def job3(captures: Path) -> Path:
    """Raw Ascend profiling slices of a real WideDeep run (device 1, 322 steps)."""
    return captures / "ascend" / "JOB3"


@pytest.fixture(scope="session")
def gold(captures: Path) -> Path:
    """What MindSpore/MindInsight's 2020 parser wrote from JOB3."""
    return captures / "ascend" / "run_1_gold"


@pytest.fixture(scope="module")
def torch_one_thread():
    """torch on one thread for a module's tests (the integrations' tiny models), restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only contend with a busy machine
    yield torch
    torch.set_num_threads(before)
