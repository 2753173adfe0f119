"""Multi-process runs: rank detection, the clock offset to rank 0, and collectives as spans.

Rank / world size (`detect_rank`): explicit arguments, else torch.distributed when it is
initialised, else the launcher's environment (RANK / WORLD_SIZE, LOCAL_RANK when RANK is absent).

Clock offset (`exchange_clock_offsets`): every rank reads its recording clock (perf_counter_ns)
just before and just after each of a few tiny all_gather rounds. No rank can leave an all_gather
before the last rank entered it, so that instant lies inside every rank's [before, after]
window; for rank i and rank 0 this bounds their clock difference to
[before_i - after_0, after_i - before_0]. Intersecting the rounds' bounds gives the offset
(midpoint) and its uncertainty (half-width); the first round (ranks arriving at different times)
is wide, later ones are tight. If the bounds do not intersect (a clock stepped), the round with
the smallest round-trip is used. Every rank must take part, which is why a Profiler that does
not record (`ranks=` leaves it out) still calls this.

Collectives (`Collectives`, `instrument_ddp`): torch.distributed's Python collectives
(all_reduce, broadcast, all_gather, reduce_scatter, barrier and their tensor variants) are
wrapped, and DDP gradient buckets are timed through a communication hook. Each collective is one
4-word sample `(start, code, duration, bytes)` recorded when it completes (async work: from its
future's callback, on whichever thread completes it), so no begin / end pairing across threads
is needed. `comm_tables` turns those samples into `comm` ops (the step trace's all-reduce time)
and a `comm_bytes` counter series. Launch to completion is what the rank experienced: waiting for
slower ranks included, which is how the cluster analysis measures the wait.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.capture.base import Source
from profiler.errors import ProfilerUsageWarning
from profiler.kernels.intervals import assign_steps
from profiler.model import COUNTER_COLUMNS, OP_COLUMNS, Run, conform
from profiler.record.recorder import hot, now_ns
from profiler.store.kinds import COMM
from profiler.store.load import Recording
from profiler.store.tables import RawTables, descriptor_columns
from profiler.store.windows import window_of, windows_from_samples

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder

#: host lane of the collective ops in the op table and timeline
COMM_STREAM = "collectives"
#: op name of a DDP gradient bucket's all-reduce
DDP_BUCKET = "all_reduce (DDP bucket)"
#: torch.distributed functions wrapped by Collectives (those that exist in the installed torch)
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "gather",
    "scatter",
    "barrier",
)
CLOCK_ROUNDS = 8

_inside_hook = threading.local()  # a DDP bucket being timed: its inner dist.all_reduce is not timed twice


# ---- rank detection -----------------------------------------------------------------------


def initialised_dist() -> Any:
    """torch.distributed when it is imported, available and initialised, else None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def detect_rank(rank: Optional[int] = None, world_size: Optional[int] = None) -> tuple[int, int]:
    """(rank, world size): explicit, else torch.distributed when initialised, else the environment, else (0, 1)."""
    dist = initialised_dist()
    if dist is not None:
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if rank is None:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", 1))
    return int(rank), int(world_size)


# ---- clock offset to rank 0 ---------------------------------------------------------------


def estimate_offsets(stamps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clock offset of every rank to rank 0 from all_gather round stamps (pure).

    `stamps[rank, round] = (before_ns, after_ns)` on each rank's own clock. Returns per rank the
    offset (its clock minus rank 0's clock at the same instant), the uncertainty (half-width of
    the bound) and whether the rounds' bounds intersected (else the min-round-trip round is used).
    """
    before, after = stamps[..., 0].astype(np.int64), stamps[..., 1].astype(np.int64)
    lo = (before - after[0]).max(axis=1)
    hi = (after - before[0]).min(axis=1)
    consistent = lo <= hi
    rtt = (after - before) + (after[0] - before[0])
    best = rtt.argmin(axis=1)
    rows = np.arange(len(stamps))
    mid = (before + after) // 2
    fallback = mid[rows, best] - mid[0, best]
    offset = np.where(consistent, (lo + hi) // 2, fallback)
    uncertainty = np.where(consistent, (hi - lo) // 2, rtt[rows, best] // 2)
    return offset, uncertainty, consistent


def collective_device(dist: Any) -> Any:
    """Where a collective's tensors must live for the default group's backend (CUDA for NCCL)."""
    import torch

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def exchange_clock_offsets(rounds: int = CLOCK_ROUNDS) -> dict:
    """This rank's clock offset to rank 0, agreed with every rank through all_gather rounds.

    A collective call: every rank of the default group must call it at the same point. Without
    an initialised torch.distributed, ranks cannot talk and their Unix clocks are trusted
    (method `unix_clock`, uncertainty unknown). Returns the `clock` fields of profiler_info.
    """
    dist = initialised_dist()
    if dist is None or dist.get_world_size() < 2:
        return {"offset_method": "unix_clock", "offset_to_rank0_ns": None, "offset_uncertainty_ns": None}
    import torch

    device = collective_device(dist)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    world = dist.get_world_size()
    token = torch.zeros(1, dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(token) for _ in range(world)]
    stamps = np.empty((rounds, 2), dtype=np.int64)
    for k in range(rounds):
        stamps[k, 0] = now_ns()
        dist.all_gather(gathered, token)
        sync()
        stamps[k, 1] = now_ns()
    mine = torch.from_numpy(stamps).to(device)
    everyone = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    all_stamps = np.stack([t.cpu().numpy() for t in everyone])
    offset, uncertainty, consistent = estimate_offsets(all_stamps)
    rank = dist.get_rank()
    return {
        "offset_method": "all_gather_bounds" if consistent[rank] else "all_gather_min_rtt",
        "offset_to_rank0_ns": int(offset[rank]),
        "offset_uncertainty_ns": int(uncertainty[rank]),
        "offset_rounds": rounds,
    }


_arrivals = itertools.count()  # one key per analyse() call: every rank makes the same calls


def wait_for_ranks(timeout_s: float) -> bool:
    """Rank 0 waits (up to `timeout_s`) until every rank has called this; other ranks return at once.

    The barrier before the cluster analysis: it goes through the process group's key-value
    store, not a collective, so ranks other than 0 never block, and a rank that died (or does
    not call analyse()) costs rank 0 the timeout, after which it merges the ranks that wrote
    data. True when everyone arrived (always True on ranks other than 0, and without torch.distributed).
    """
    dist = initialised_dist()
    if dist is None:
        return True
    key = f"profview/analysed/{next(_arrivals)}"
    world = dist.get_world_size()
    arrived = 0
    try:
        store = dist.distributed_c10d._get_default_store()
        arrived = store.add(key, 1)
        if dist.get_rank() != 0:
            return True
        deadline = time.monotonic() + timeout_s
        while arrived < world and time.monotonic() < deadline:
            time.sleep(0.02)
            arrived = store.add(key, 0)
    except Exception as exc:  # the store lives on rank 0's host: it died with it
        warnings.warn(
            f"profview: cannot reach the job's store to meet the other ranks ({exc}); "
            "run `profview analyse DIR` afterwards to merge the ranks",
            ProfilerUsageWarning,
            stacklevel=3,
        )
        return False
    if arrived < world:
        warnings.warn(
            f"profview: only {arrived} of {world} ranks reached analyse() within {timeout_s:g} s; "
            "the cluster files cover the ranks that wrote data (a rank may have died)",
            ProfilerUsageWarning,
            stacklevel=3,
        )
    return arrived >= world


# ---- collectives as samples ---------------------------------------------------------------


def tensor_bytes(obj: Any) -> int:
    """Payload bytes of a tensor or a (nested) list of tensors; 0 for anything else."""
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o) for o in obj)
    numel = getattr(obj, "numel", None)
    if numel is None or not hasattr(obj, "element_size"):
        return 0
    return int(numel()) * int(obj.element_size())


#: which argument of each collective is the payload this rank sends (position, keyword)
_PAYLOAD_ARG = {
    "all_gather": (1, "tensor"),
    "all_gather_into_tensor": (1, "input_tensor"),
    "reduce_scatter": (1, "input_list"),
    "reduce_scatter_tensor": (1, "input"),
    "all_to_all": (1, "input_tensor_list"),
    "all_to_all_single": (1, "input"),
    "scatter": (1, "scatter_list"),
    "barrier": (None, None),
}


def payload_bytes(op: str, args: tuple, kwargs: dict) -> int:
    """Bytes this rank contributes to collective `op` called with (args, kwargs)."""
    pos, key = _PAYLOAD_ARG.get(op, (0, "tensor"))
    if pos is None:
        return 0
    value = args[pos] if len(args) > pos else kwargs.get(key)
    return tensor_bytes(value)


class Collectives(Source):
    """Wraps torch.distributed's collective functions for as long as the recording runs.

    Calls made through `torch.distributed.<op>` (and `dist.<op>` after `import torch.distributed
    as dist`) are timed; a function imported by name before the recording started
    (`from torch.distributed import all_reduce`) is not. DDP's gradient all-reduces do not go
    through these functions: `TorchHooks` on a DDP model (`Profiler.attach(ddp_model)`) times them
    when the Profiler has a Collectives source, or `instrument_ddp` does.
    """

    name = "collectives"

    @classmethod
    def merge(cls, run: Run, recording: Recording) -> Run:
        """The recorded collectives become `comm` ops and a `comm_bytes` counter (with_collectives)."""
        return with_collectives(run, recording.tables)

    def __init__(self) -> None:
        super().__init__()
        self._recorder: Optional[Recorder] = None
        self._originals: dict[str, Callable] = {}

    def start(self, recorder: Recorder) -> None:
        dist = initialised_dist()
        if dist is None:
            self.status = "absent: torch.distributed is not initialised"
            return
        self._recorder = recorder
        for op in COLLECTIVES:
            fn = getattr(dist, op, None)
            if fn is not None:
                self._originals[op] = fn
                setattr(dist, op, self._wrap(op, fn))
        self.details.update({"backend": str(dist.get_backend()), "wrapped": sorted(self._originals)})

    def stop(self) -> None:
        dist = sys.modules.get("torch.distributed")
        for op, fn in self._originals.items():
            setattr(dist, op, fn)
        self._originals = {}

    def _wrap(self, op: str, fn: Callable) -> Callable:
        code = self._recorder.point_code(COMM, op, op)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if getattr(_inside_hook, "active", False):
                return fn(*args, **kwargs)
            t0 = now_ns()
            work = fn(*args, **kwargs)
            record_completion(code, t0, payload_bytes(op, args, kwargs), work)
            return work

        return timed


def record_completion(code: int, t0: int, nbytes: int, work: Any) -> None:
    """Record a collective that started at t0: now for a blocking call, at completion for async work."""
    future = _future_of(work)
    if future is None:
        hot.sample(t0, code, now_ns() - t0, nbytes)
        return

    def done(fut: Any) -> None:
        hot.sample(t0, code, now_ns() - t0, nbytes)

    future.add_done_callback(done)


def _future_of(work: Any) -> Any:
    """The torch Future of an async collective's Work, or None (blocking call, or no future support)."""
    get_future = getattr(work, "get_future", None)
    if get_future is None:
        return None
    try:
        return get_future()
    except RuntimeError:  # backends without futures: the launch time is all we get
        return None


def instrument_ddp(model: Any, code_of: Callable[[], int], hook: Optional[Callable] = None, state: Any = None) -> bool:
    """Time every DDP gradient bucket's all-reduce through a communication hook (bytes = bucket size).

    `code_of()` gives the sample code of the bucket collective in the current recording (the
    recorder interns it; 0 while nothing records, when the hot path drops the sample anyway).
    `hook` / `state` are the communication hook DDP should run (default: its plain all-reduce,
    `allreduce_hook`); the timing wraps it. DDP accepts one hook, registered before training:
    when the model already has one, nothing is registered and False is returned (its buckets are
    then timed only through the collective calls its hook makes).
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    inner = hook or allreduce_hook

    def timed_hook(hook_state, bucket):  # no annotations: DDP checks them against its own types
        t0 = now_ns()
        nbytes = tensor_bytes(bucket.buffer())
        _inside_hook.active = True
        try:
            future = inner(hook_state, bucket)
        finally:
            _inside_hook.active = False
        return future.then(functools.partial(_bucket_done, code_of(), t0, nbytes))

    try:
        model.register_comm_hook(state, timed_hook)
    except RuntimeError:  # "register_comm_hook can only be called once"
        return False
    return True


def _bucket_done(code: int, t0: int, nbytes: int, fut: Any) -> Any:
    hot.sample(t0, code, now_ns() - t0, nbytes)
    return fut.value()


def is_ddp(model: Any) -> bool:
    """Whether `model` is a DistributedDataParallel wrapper (without importing torch)."""
    parallel = sys.modules.get("torch.nn.parallel")
    return parallel is not None and isinstance(model, parallel.DistributedDataParallel)


# ---- analysis side: samples -> comm ops and a bytes counter -------------------------------


def comm_tables(t: RawTables) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The collectives recorded in one rank's raw tables: (ops, counters), times relative to the origin.

    Ops: category `comm`, device `cpu`, stream `collectives`, name as recorded (`all_reduce`,
    `all_reduce (DDP bucket)`, ...), op type the collective. Counters: `comm` / `cpu` / `comm_bytes`
    at each collective's start. Samples outside the recording windows are not data.
    """
    kind_of, name_of, extra_of = descriptor_columns(t.descriptors)
    if len(t.sm) == 0 or len(kind_of) == 0:
        return pd.DataFrame(), pd.DataFrame()
    desc = t.sm[:, 1] >> 1
    s = t.sm[(kind_of[desc] == COMM) & (window_of(t.sm[:, 0], windows_from_samples(t.sm, kind_of)) >= 0)]
    s = s[np.argsort(s[:, 0], kind="stable")]
    d = s[:, 1] >> 1
    start = s[:, 0] - int(t.meta["clock"]["origin_monotonic_ns"])
    ops = pd.DataFrame(
        {
            "device": "cpu",
            "stream": COMM_STREAM,
            "name": name_of[d],
            "op_type": extra_of[d],
            "category": "comm",
            "start_ns": start,
            "dur_ns": s[:, 2],
            "self_ns": s[:, 2],
            "source": COMM,
        }
    )
    counters = pd.DataFrame(
        {"source": COMM, "device": "cpu", "metric": "comm_bytes", "time_ns": start, "value": s[:, 3].astype(np.float64)}
    )
    return ops, counters


def with_collectives(run: Run, t: RawTables) -> Run:
    """`run` with the collectives of its raw tables added to its ops (steps assigned) and counters."""
    ops, counters = comm_tables(t)
    if not len(ops):
        return run
    ops["step"] = assign_steps(ops["start_ns"].to_numpy(), run.steps)
    merged = pd.concat([run.ops, conform(ops, OP_COLUMNS)], ignore_index=True)
    run.ops = conform(merged.sort_values("start_ns", kind="stable", ignore_index=True), OP_COLUMNS)
    run.counters = conform(pd.concat([run.counters, counters], ignore_index=True), COUNTER_COLUMNS)
    return run
