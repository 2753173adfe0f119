"""Live capture: the `Source`s a Profiler starts and stops (host and GPU counters, PyTorch hooks
and op capture, collectives, MindSpore's profiler) and the queue probe. Each source records through the hot path and,
after recording, merges what it left beside the raw store (capture/base.py, `Source.merge`);
`registry.py` is where the analysis finds a recorded source's class."""

from profiler.capture.base import Source
from profiler.capture.distributed import Collectives
from profiler.capture.host import HostCounters
from profiler.capture.mindspore import MindSporeCapture
from profiler.capture.nvml import GpuCounters
from profiler.capture.torch_capture import TorchOps
from profiler.capture.torch_hooks import TorchHooks

__all__ = ["Collectives", "GpuCounters", "HostCounters", "MindSporeCapture", "Source", "TorchHooks", "TorchOps"]
