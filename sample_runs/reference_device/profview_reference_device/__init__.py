"""The reference Ascend-style device (docs/ascend.md): a device backend for machines without an NPU
that runs real work on stream threads and reports through an Ascend JOB log (`log_writer.py`),
merged into the host run after recording (`merge.py`). A test and demo backend, not a capture:
no production module imports it (an import-linter contract); the analysis finds its source class
through the `profview.sources` entry point this distribution declares (capture/registry.py)."""
