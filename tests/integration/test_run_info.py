"""`Run.info` has one definition, `profiler.model.RunInfo`: every field real sources write into
profiler_info_{rank}.json (a recording with a reference Ascend device, a recording whose steps are
inferred, every real capture imported) is declared there with the type it has, and the checks of
the validated reader (formats.documents.INFO_FIELDS) agree with it."""

from __future__ import annotations

import json
import types
import typing
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profiler import Profiler
from profiler.formats.documents import INFO_FIELDS
from profiler.model import RunInfo
from profiler.postprocess.imported import import_capture
from profview_reference_device.device import AscendReferenceDevice


def type_problems(value: Any, hint: Any, where: str) -> list[str]:
    """Where `value` (read back from JSON) is not of the declared type `hint`."""
    if hint is Any:
        return []
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        fields = typing.get_type_hints(hint)
        return [
            problem
            for key, item in value.items()
            for problem in (
                type_problems(item, fields[key], f"{where}.{key}")
                if key in fields
                else [f"{where}.{key} is not declared in {hint.__name__}"]
            )
        ]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return (
            []
            if any(not type_problems(value, option, where) for option in args)
            else [f"{where}: {value!r} is none of {args}"]
        )
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        return [p for key, item in value.items() for p in type_problems(item, args[1], f"{where}.{key}")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for i, item in enumerate(value) for p in type_problems(item, args[0], f"{where}[{i}]")]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    allowed = (int, float) if hint is float else (hint,)
    if isinstance(value, bool) and hint is not bool or not isinstance(value, allowed):
        return [f"{where}: {value!r} is not {hint.__name__}"]
    return []


@pytest.fixture(scope="module")
def written_infos(tmp_path_factory, captures: Path) -> dict[str, dict]:
    """profiler_info of each kind of run, as written."""
    root = tmp_path_factory.mktemp("infos")
    profiler = Profiler(root / "device", host_counters=False, gpu_counters=False)
    device = AscendReferenceDevice(profiler, streams=1)
    for step in range(3):  # the device's iterations cut the steps
        device.fp_start()
        device.launch("Default/Mul-op1", "Mul", np.multiply, np.ones(4), step)
        device.bp_end()
        device.iter_end().result(timeout=10)
        profiler.step()
    profiler.analyse(progress=False)
    unmarked = Profiler(root / "unmarked", host_counters=False, gpu_counters=False)
    for _ in range(6):  # no step(): steps are inferred from the phases
        with unmarked.phase("forward"):
            with unmarked.op("matmul", "MatMul"):
                pass
        with unmarked.phase("backward"):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the inferred steps, the captures' own problems: not the subject
        unmarked.analyse(progress=False)
        for name, capture in [
            ("kineto", "kineto/sampled_rank-1.json.gz"),
            ("ascend", "ascend/JOB3"),
            ("mindspore", "ascend/run_1_gold"),
            ("mindspore_cpu", "mindspore_cpu"),
        ]:
            import_capture(captures / capture, root / name)
    return {
        directory.name: json.loads(info.read_text())
        for directory in sorted(root.iterdir())
        for info in sorted(directory.glob("profiler_info_*.json"))
    }


def test_every_written_field_is_declared_with_its_type(written_infos):
    assert sorted(written_infos) == ["ascend", "device", "kineto", "mindspore", "mindspore_cpu", "unmarked"]
    assert written_infos["device"]["steps_from"] == "npu:0" and len(written_infos["device"]["ascend_devices"]) == 1
    assert written_infos["unmarked"]["step_boundaries"]["source"] == "inferred"
    for name, info in written_infos.items():
        assert type_problems(info, RunInfo, name) == [], name
    written = {key for info in written_infos.values() for key in info}
    assert written >= {
        "schema_version",
        "recording",
        "config",
        "devices",
        "kineto",
        "ascend",
        "mindspore",
        "outputs",
        "source_path",
        "device_id",
        "origin_unix_ns",
        "step_boundaries",
        "ascend_devices",
    }


def test_a_field_of_the_wrong_type_is_found():
    assert type_problems({"rank": "0", "clock": {"origin_unix_ns": 1.5}, "extra": 1}, RunInfo, "info") == [
        "info.rank: '0' is not int",
        "info.clock.origin_unix_ns: 1.5 is not int",
        "info.extra is not declared in RunInfo",
    ]


def test_the_reader_checks_agree_with_the_definition():
    fields = typing.get_type_hints(RunInfo)
    for key, (json_types, _) in INFO_FIELDS.items():
        declared = typing.get_origin(fields[key]) or (dict if typing.is_typeddict(fields[key]) else fields[key])
        assert json_types == (declared,), key
