"""The reference Ascend-style device (docs/ascend.md): a device backend for machines without an NPU
that runs real work on stream threads and reports through an Ascend JOB log (`log_writer.py`),
merged into the host run after recording (`merge.py`). A test and demo backend, not a capture."""
from profiler.capture.base import Source
from profiler.reference.device import AscendReferenceDevice

#: The reference backends' source kinds, for the analysis to merge their logs.
SOURCE_TYPES: list[type[Source]] = [AscendReferenceDevice]
