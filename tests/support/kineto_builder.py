"""Kineto traces built event by event, for the tests of one definition's edge case each."""

from __future__ import annotations

from profiler.importers.kineto import run_from_kineto_trace


class Trace:
    """A Kineto trace built event by event (times in µs); `launch` adds a runtime call and its kernel."""

    def __init__(self, device_properties: list[dict] | None = None) -> None:
        self.events: list[dict] = []
        self.correlation = 0
        self.device_properties = device_properties

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args) -> Trace:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )
        return self

    def step(self, number: int, ts: float, dur: float) -> Trace:
        return self.op(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")

    def launch(self, at: float, kernel: str, start: float, dur: float, stream: int = 7, **args) -> Trace:
        self.correlation += 1
        self.op("cudaLaunchKernel", at, 1.0, cat="cuda_runtime")
        self.events[-1]["args"] = {"correlation": self.correlation}
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": start,
                "dur": dur,
                "args": {"correlation": self.correlation, "device": 0, "stream": stream, **args},
            }
        )
        return self

    def module(self, name: str, ts: float, dur: float) -> Trace:
        """An nn.Module frame as Kineto writes it with with_stack=True."""
        return self.op(f"nn.Module: {name}", ts, dur, cat="python_function")

    def memory(
        self, ts: float, size: int, addr: int, allocated: int, device_type: int = 0, reserved: int = 4096
    ) -> Trace:
        """An allocation (size > 0) or free (size < 0) of the block at `addr`; `allocated` and `reserved`: the
        totals after it."""
        args = {"Bytes": size, "Addr": addr, "Total Allocated": allocated, "Total Reserved": reserved}
        args.update({"Device Type": device_type, "Device Id": 0 if device_type else -1})
        self.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "args": args,
            }
        )
        return self

    def document(self) -> dict:
        """The trace as torch.profiler writes it (deviceProperties when given)."""
        doc: dict = {"traceEvents": self.events, "schemaVersion": 1}
        if self.device_properties is not None:
            doc["deviceProperties"] = self.device_properties
        return doc

    def run(self):
        return run_from_kineto_trace(self.document())
