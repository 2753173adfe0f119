"""Shared fixtures: the real captures in tests/data (see its README for provenance and licences)."""

import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Real captures written by real profilers on real hardware, kept in the repository unchanged.
CAPTURES = REPO / "tests" / "data"


def pytest_configure(config) -> None:
    """Ctrl-C at its default here, so in every process a test starts: the tests that send SIGINT
    play a user at a terminal, but a shell script's background job (`pytest ... &`) starts with
    SIGINT ignored, and a child inherits that (it would never see the signal)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
