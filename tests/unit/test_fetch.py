"""The one timed iterator (profiler/data/fetch.py): every fetch a `data` phase, the wrapped object's
length and attributes kept, a probe's bookkeeping inside the fetch, and plain next() when told."""

from __future__ import annotations

import time

from profiler import Profiler
from profiler.data.fetch import TimedFetches
from profiler.postprocess.recording import load_rank

FETCH_S = 0.03


class SlowLoader:
    """Four batches, each taking FETCH_S to fetch; with a `batch_size` attribute, as loaders have."""

    batch_size = 8

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        for i in range(4):
            time.sleep(FETCH_S)
            yield i


def test_every_fetch_is_a_data_phase_and_the_loader_shows_through(tmp_path):
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    batches = p.iterate(SlowLoader())
    assert len(batches) == 4 and batches.batch_size == 8
    seen = []
    for batch in batches:
        seen.append(batch)
        p.step()
    p.analyse(progress=False, quiet=True)
    assert seen == [0, 1, 2, 3]
    run = load_rank(tmp_path, 0)
    data = run.spans[(run.spans["kind"] == "phase") & (run.spans["name"] == "data")]
    assert len(data) == 5  # four batches and the fetch that ended the loop
    assert (data["dur_ns"].iloc[:4] >= FETCH_S * 1e9).all()
    assert data["dur_ns"].iloc[4] < FETCH_S * 1e9 / 2


def test_then_gets_each_fetch_inside_it_and_timing_off_is_plain_next(tmp_path):
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    fetches, timing = [], [True]
    batches = TimedFetches(SlowLoader(), then=lambda t0, t1: fetches.append(t1 - t0), timing=lambda: timing[0])
    for _ in range(2):
        next(batches)
        p.step()
    timing[0] = False
    assert list(batches) == [2, 3]
    p.analyse(progress=False, quiet=True)
    assert len(fetches) == 2 and min(fetches) >= FETCH_S * 1e9
    run = load_rank(tmp_path, 0)
    assert (run.spans["name"] == "data").sum() == 2


def test_then_runs_without_a_recording():
    fetches = []
    assert list(TimedFetches(range(3), then=lambda t0, t1: fetches.append(t1 >= t0))) == [0, 1, 2]
    assert fetches == [True, True, True]


def test_a_fetch_inside_a_fetch_is_one_data_phase_and_keeps_its_bookkeeping(tmp_path):
    """profiler.iterate() over a ProfiledDataLoader (or `profview run`'s DataLoader patch under one): the inner
    fetch records no phase of its own (it was a second, nested one), but its probe's bookkeeping still runs."""
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    inner_fetches = []
    batches = p.iterate(TimedFetches(SlowLoader(), then=lambda t0, t1: inner_fetches.append(t1 - t0)))
    assert list(batches) == [0, 1, 2, 3]
    p.analyse(progress=False, quiet=True)
    run = load_rank(tmp_path, 0)
    assert (run.spans["name"] == "data").sum() == 5  # four batches and the end: one phase each
    assert len(inner_fetches) == 4 and min(inner_fetches) >= FETCH_S * 1e9
