"""The incremental reader of a growing raw store (profiler/store/follow.py) following a real recording
while it runs: the step count grows with the recording, it reaches the recording's own count, nothing
is read as a torn chunk, and the window of every step is the raw store as load_rank reads it."""

from __future__ import annotations

import time

import pytest

from profiler.postprocess.recording import load_rank
from profiler.store.follow import Follower
from profiler.store.interpret import interpret

from support.live_helpers import start_recorder, steps_in

pytestmark = pytest.mark.timing


def test_the_follower_keeps_up_with_a_growing_recording_and_reaches_its_step_count(tmp_path):
    out = tmp_path / "run"
    proc = start_recorder(out, steps=600, data_s=0.004)
    follower = Follower(out, keep_steps=10_000)
    seen = []
    try:
        while proc.poll() is None:
            follower.poll()
            if follower.ranks:
                seen.append(follower.ranks[0].step_count)
            assert not any(s.torn_chunks for s in follower.ranks.values()), "a chunk being written is not corruption"
            time.sleep(0.05)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        follower.poll()
        state = follower.ranks[0]
        # the count grew while the steps came in (after the last one the recorder still runs its analysis,
        # which takes long on a loaded machine: most polls may then read all 600)
        assert seen == sorted(seen) and len({s for s in seen if 0 < s < 600}) >= 2, (
            "the count grew while the recording ran"
        )
        assert state.step_count == steps_in(out) == 600
        assert follower.finished and state.torn_chunks == 0
        # the window of every step is the raw store as load_rank reads it
        run, full = interpret(follower.window(0, 10_000)), load_rank(out, 0)
        for name in ("steps", "spans", "ops", "instants", "queues", "threads"):
            a, b = getattr(run, name).reset_index(drop=True), getattr(full, name).reset_index(drop=True)
            assert a.astype(str).equals(b.astype(str)), name
    finally:
        follower.close()
        if proc.poll() is None:
            proc.kill()
