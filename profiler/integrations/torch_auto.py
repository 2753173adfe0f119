"""Following a PyTorch script that has no profiling code: what `profview run` installs (profiler/auto.py)
once the script imports torch; everything it patches is undone with its `Patches`.

- **the first optimizer created** (`torch.optim.Optimizer.__init__`) is attached with
  `Profiler.attach(model, optimizer)`: `optimizer.step()` ends each profiler step (steps ==
  optimizer steps) and is the `optimizer` phase; the model's forward marks fp start and its backward
  bp end. The model is the `nn.Module` whose parameters are the optimizer's (`find_model`): of the
  modules alive then (the garbage collector's list), the one holding the most of the optimizer's
  parameters and the fewest others, the outermost one on a tie (a DDP wrapper rather than the
  module it wraps). When no module holds them, the optimizer's step alone ends the steps (a step
  post hook). A process group initialised after the Profiler started gets its collectives timed.
- **every `torch.utils.data.DataLoader` iteration** (`DataLoader.__iter__`): each fetch is a
  `data` phase (the loop's data wait, `data/fetch.TimedFetches`), as `ProfiledDataLoader` times
  it; the first loader with worker processes also has its worker queue probed as `host_queue`.
"""

from __future__ import annotations

import functools
import gc
import warnings
import weakref
from typing import Any, Callable, Optional

from profiler.capture.distributed import Collectives, initialised_dist
from profiler.data.fetch import TimedFetches, fetching
from profiler.data.torch_data import ProfiledDataLoader
from profiler.errors import ProfilerUsageWarning
from profiler.formats.columns import HOST_QUEUE
from profiler.integrations.patching import Patches
from profiler.profiler import Profiler


class TorchFollower:
    """Attaches `profiler` to the script's first optimizer (`attach`) and times its DataLoader
    fetches (`data`), through `patches`, while `following()` says so."""

    def __init__(
        self,
        profiler: Profiler,
        patches: Patches,
        following: Callable[[], bool],
        *,
        attach: bool = True,
        data: bool = True,
        ops: bool = False,
    ) -> None:
        self.profiler = profiler
        self.patches = patches
        self.following = following
        self.follow_optimizer = attach
        self.time_data = data
        self.ops = ops
        self.optimizer: Any = None
        self.model: Any = None
        self._probed_queue = False
        self._probes: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def install(self) -> None:
        """Patch torch now if the script imported it, else when it does."""
        self.patches.after_import("torch", self._patch_torch)

    def _patch_torch(self, torch: Any) -> None:
        if not self.following():
            return
        try:
            if self.follow_optimizer:
                optimizer = torch.optim.Optimizer
                self.patches.replace(optimizer, "__init__", self._wrap_optimizer_init(optimizer.__init__))
            if self.time_data:
                loader = torch.utils.data.DataLoader
                self.patches.replace(loader, "__iter__", self._wrap_loader_iter(loader.__iter__))
        except Exception as exc:  # an unexpected torch: record without the torch hooks
            warnings.warn(
                f"profview run: cannot follow torch ({type(exc).__name__}: {exc}); recording without "
                "its optimizer and DataLoader hooks",
                ProfilerUsageWarning,
                stacklevel=2,
            )

    # ---- the optimizer ---------------------------------------------------------------------

    def _wrap_optimizer_init(self, original: Callable) -> Callable:
        follower = self

        @functools.wraps(original)
        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if follower.following() and follower.optimizer is None:
                follower.optimizer = optimizer
                try:
                    follower._attach(optimizer)
                except Exception as exc:
                    warnings.warn(
                        f"profview run: cannot attach to the optimizer ({type(exc).__name__}: {exc}); "
                        "steps are not recorded",
                        ProfilerUsageWarning,
                        stacklevel=2,
                    )

        return __init__

    def _attach(self, optimizer: Any) -> None:
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        model = find_model(params)
        self.model = model
        p = self.profiler
        self._time_collectives()
        if model is not None:
            p.attach(model, optimizer, ops=self.ops)
            return
        optimizer.register_step_post_hook(lambda *_: p.step())  # no module holds them: its step ends the steps

    def _time_collectives(self) -> None:
        """The process group a script initialises after the Profiler started: time its collectives
        (and, through attach(), a DDP model's gradient buckets) from now on, as a Profiler made after
        init_process_group does."""
        p = self.profiler
        if initialised_dist() is not None and not any(isinstance(s, Collectives) for s in p.sources):
            p.add_source(Collectives())

    # ---- the DataLoader --------------------------------------------------------------------

    def _wrap_loader_iter(self, original: Callable) -> Callable:
        follower = self

        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            if not follower.following() or fetching():  # a ProfiledDataLoader's own: it times and probes it
                return original(loader)
            probe = follower._epoch_probe(loader)  # first: it wraps collate_fn before the workers start
            return TimedFetches(original(loader), then=probe, timing=follower.following)

        return __iter__

    def _epoch_probe(self, loader: Any) -> Optional[Callable[[int, int], None]]:
        """The worker-queue probe of the first loader with workers (as ProfiledDataLoader probes it), for one epoch."""
        probed = self._probes.get(loader)
        if probed is None:
            if self._probed_queue or int(getattr(loader, "num_workers", 0) or 0) == 0:
                return None
            try:
                probed = self._probes[loader] = ProfiledDataLoader(loader, HOST_QUEUE)
            except Exception:
                return None
            self._probed_queue = True
        return probed.epoch_probe()


def find_model(param_ids: set) -> Any:
    """The nn.Module alive now that holds the most of these parameters and the fewest others (the
    outermost on a tie), or None."""
    import torch.nn as nn

    best, best_key = [], None
    with warnings.catch_warnings():  # isinstance() on deprecated torch aliases warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if isinstance(obj, nn.Module)]
    for obj in modules:
        try:
            mine = {id(p) for p in obj.parameters()}
        except Exception:
            continue
        overlap = len(mine & param_ids)
        if overlap == 0:
            continue
        key = (overlap, -len(mine - param_ids))
        if best_key is None or key > best_key:
            best, best_key = [obj], key
        elif key == best_key:
            best.append(obj)
    if not best:
        return None
    inner = {id(m) for b in best for m in b.modules() if m is not b}
    outer = [b for b in best if id(b) not in inner]
    return (outer or best)[0]
