"""Live capture: the `Source`s a Profiler starts and stops (host and GPU counters, PyTorch hooks
and op capture, collectives, MindSpore's profiler) and the queue probe. Each source records
through the hot path and, after recording, merges what it left beside the raw store
(capture/base.py, `Source.merge`)."""
from profiler.capture.base import Source
from profiler.capture.distributed import CollectiveCapture
from profiler.capture.host import HostCounters
from profiler.capture.mindspore import MindSporeCapture
from profiler.capture.nvml import NvmlCounters
from profiler.capture.torch_capture import TorchCapture
from profiler.capture.torch_hooks import TorchHooks

#: Every kind of live source; the analysis looks here for the sources a recording names.
SOURCE_TYPES: list[type[Source]] = [HostCounters, NvmlCounters, TorchHooks, TorchCapture, CollectiveCapture,
                                    MindSporeCapture]
