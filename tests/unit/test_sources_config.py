"""Sources configured one way: built-in sources as Source objects in `sources=`, today's keywords as
shortcuts that build the same objects, settings grouped in `Settings` (profiler/config.py)."""

from __future__ import annotations

import inspect
import json
import time
import warnings

import pandas as pd
import pytest

from profiler import (
    Collectives,
    GpuCounters,
    HostCounters,
    Profiler,
    ProfilerUsageWarning,
    ProfviewError,
    Settings,
    Source,
    TorchHooks,
    TorchOps,
    schedule,
)
from profiler.config import Shortcuts


def _info(out) -> dict:
    return json.loads((out / "profiler_info_0.json").read_text())


def _record(p: Profiler, steps: int = 4, step_s: float = 0.03) -> dict:
    for _ in range(steps):
        time.sleep(step_s)
        p.step()
    p.analyse(progress=False, quiet=True)
    return _info(p.output_path)


def _comparable(info: dict) -> dict:
    """The config and the source options of a profiler_info, without what differs between two runs."""
    config = {k: v for k, v in info["config"].items() if k != "output_path"}
    options = {
        name: {
            k: v
            for k, v in s.items()
            if k
            in (
                "status",
                "interval_s",
                "record_shapes",
                "profile_memory",
                "with_stack",
                "step_on_optimizer",
                "model",
                "optimizer",
            )
        }
        for name, s in info["sources"].items()
    }
    return {"config": config, "sources": options}


def test_profiler_has_at_most_ten_parameters_of_its_own_and_every_old_keyword_is_a_shortcut():
    own = [
        p
        for p in inspect.signature(Profiler.__init__).parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    assert [p.name for p in own] == [
        "output_path",
        "start_profile",
        "schedule",
        "on_trace_ready",
        "sources",
        "rank",
        "world_size",
        "ranks",
        "settings",
    ]
    old = {
        "host_counters",
        "gpu_counters",
        "counter_interval_s",
        "collectives",
        "framework",
        "ops_schedule",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "memory_budget_mb",
        "flush_interval_s",
        "clock_sync",
        "gzip_timeline",
        "advisor_thresholds",
    }
    added = {"timeline_max_events", "with_modules"}  # a Settings field and a torch.profiler option added since
    assert set(Shortcuts.__annotations__) == old | added


def test_shortcuts_and_source_objects_record_the_same_configuration(tmp_path):
    by_keywords = _record(
        Profiler(
            tmp_path / "kw",
            gpu_counters=False,
            counter_interval_s=0.01,
            memory_budget_mb=8,
            flush_interval_s=0.05,
            gzip_timeline=True,
        )
    )
    by_objects = _record(
        Profiler(
            tmp_path / "obj",
            sources=[HostCounters(interval_s=0.01)],
            gpu_counters=False,
            settings=Settings(memory_budget_mb=8, flush_interval_s=0.05, gzip_timeline=True),
        )
    )
    assert _comparable(by_keywords) == _comparable(by_objects)
    assert by_objects["config"]["sources"] == ["host_counters"]
    assert by_objects["config"]["memory_budget_bytes"] == 8 << 20 and by_objects["config"]["flush_interval_s"] == 0.05
    assert (tmp_path / "obj" / "timeline_0.json.gz").is_file()
    counters = pd.read_csv(tmp_path / "obj" / "device_counters_0.csv")
    rss = counters[(counters["source"] == "host") & (counters["metric"] == "rss_bytes")]
    assert len(rss) >= 5  # 0.12 s of steps sampled every 10 ms (100 ms by default)


def test_a_source_object_replaces_the_default_of_its_kind(tmp_path):
    fake_gpu = GpuCounters(0.5)
    p = Profiler(tmp_path, start_profile=False, sources=[HostCounters(interval_s=0.5), fake_gpu])
    assert [type(s) for s in p.sources] == [HostCounters, GpuCounters]
    assert p.sources[0].interval_s == 0.5 and p.sources[1] is fake_gpu
    defaults = Profiler(tmp_path / "d", start_profile=False)
    assert [(type(s), s.interval_s) for s in defaults.sources] == [(HostCounters, 0.1), (GpuCounters, 0.1)]

    class Custom(Source):
        name = "custom"

    added = Profiler(tmp_path / "c", start_profile=False, host_counters=False, sources=[Custom()])
    assert [type(s) for s in added.sources] == [GpuCounters, Custom]  # other sources join the defaults


def test_a_shortcut_that_would_be_ignored_is_an_error(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"record_shapes= configures default sources, but the TorchOps given in "
        r"sources= has its own options",
    ):
        Profiler(tmp_path, start_profile=False, sources=[TorchOps()], record_shapes=True)
    with pytest.raises(ValueError, match="counter_interval_s="):
        Profiler(tmp_path, start_profile=False, sources=[HostCounters(), GpuCounters()], counter_interval_s=1)
    Profiler(tmp_path, start_profile=False, sources=[HostCounters()], counter_interval_s=1)  # the GPU default takes it
    with pytest.raises(
        TypeError, match=r"unexpected keyword argument 'host_counter' \(did you mean 'host_counters'\?\)"
    ):
        Profiler(tmp_path, start_profile=False, host_counter=False)
    with pytest.raises(ValueError, match="framework='jax'"):
        Profiler(tmp_path, start_profile=False, framework="jax")
    with pytest.raises(ProfviewError, match="unknown advisor threshold .no_such_threshold."):
        Settings(advisor_thresholds={"no_such_threshold": 1})


def test_a_shortcut_overrides_the_same_field_of_settings(tmp_path):
    p = Profiler(
        tmp_path,
        start_profile=False,
        settings=Settings(memory_budget_mb=8, flush_interval_s=0.5),
        flush_interval_s=0.05,
    )
    assert p.settings == Settings(memory_budget_mb=8, flush_interval_s=0.05)
    assert p.flush_interval_s == 0.05 and p.memory_budget_bytes == 8 << 20


def test_collectives_default_only_with_an_initialised_process_group(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    assert not any(isinstance(s, Collectives) for s in Profiler(tmp_path, start_profile=False).sources)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert [type(s) for s in Profiler(tmp_path, start_profile=False, host_counters=False).sources] == [
            GpuCounters,
            Collectives,
        ]
        assert not any(
            isinstance(s, Collectives) for s in Profiler(tmp_path, start_profile=False, collectives=False).sources
        )
        mine = Collectives()
        assert [
            s for s in Profiler(tmp_path, start_profile=False, sources=[mine]).sources if isinstance(s, Collectives)
        ] == [mine]
    finally:
        dist.destroy_process_group()


# ---- torch ------------------------------------------------------------------------------------


def _torch_loop(p: Profiler, model, optimizer, steps: int) -> None:
    import torch

    x = torch.randn(8, 16)
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def _model():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def test_torch_sources_as_objects_equal_attach_with_the_op_shortcuts(tmp_path):
    ops_steps = schedule(wait=2, warmup=1, active=2, repeat=1)
    model, optimizer = _model()
    p = Profiler(
        tmp_path / "kw",
        host_counters=False,
        gpu_counters=False,
        framework="torch",
        ops_schedule=ops_steps,
        record_shapes=True,
    )
    p.attach(model, optimizer)
    _torch_loop(p, model, optimizer, 7)
    p.analyse(progress=False, quiet=True)

    model, optimizer = _model()
    q = Profiler(
        tmp_path / "obj",
        host_counters=False,
        gpu_counters=False,
        sources=[TorchHooks(model, optimizer), TorchOps(ops_steps, record_shapes=True)],
    )
    _torch_loop(q, model, optimizer, 7)
    q.analyse(progress=False, quiet=True)

    kw, obj = _info(tmp_path / "kw"), _info(tmp_path / "obj")
    assert obj["config"]["framework"] == "torch" and obj["config"]["record_shapes"] is True
    assert obj["config"]["ops_schedule"] == kw["config"]["ops_schedule"] == "schedule.<locals>.action"
    assert _comparable(kw)["sources"] == _comparable(obj)["sources"]
    assert kw["config"]["sources"] == ["torch"]  # attach() added the hooks after start
    assert obj["config"]["sources"] == ["torch_hooks", "torch"]
    for out in (tmp_path / "kw", tmp_path / "obj"):
        steps = pd.read_csv(out / "step_trace_0.csv")
        assert steps["step"].tolist() == list(range(7))  # the optimizer ended the steps
        ops = pd.read_csv(out / "op_detail_0.csv")
        linear = ops[ops["name"] == "aten::linear"]
        assert linear["count"].sum() == 2 * 2  # two linears, captured on steps 3 and 4
    assert sum(isinstance(s, TorchOps) for s in q.sources) == 1


def test_torch_hooks_as_a_source_end_the_steps_and_step_is_ignored(tmp_path):
    model, optimizer = _model()
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False, sources=[TorchHooks(model, optimizer)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _torch_loop(p, model, optimizer, 3)
        p.step()
    assert p.step_num == 3
    assert any(
        "profiler.step() ignored" in str(w.message) for w in caught if issubclass(w.category, ProfilerUsageWarning)
    )
    with pytest.raises(ProfviewError, match="already ends the steps"):
        p.add_source(TorchHooks(model, optimizer))
    p.add_source(TorchHooks(model, optimizer, step_on_optimizer=False))  # marks only: accepted
    p.stop()


def test_a_profiler_that_records_nothing_binds_no_source(tmp_path):
    model, optimizer = _model()
    hooks = TorchHooks(model, optimizer)
    p = Profiler(
        tmp_path,
        host_counters=False,
        gpu_counters=False,
        rank=1,
        world_size=2,
        ranks=[0],
        clock_sync=False,
        sources=[hooks],
    )
    assert not p.active and hooks._end_step is None  # the optimizer does not end this rank's steps
    _torch_loop(p, model, optimizer, 2)
    p.step()
    assert p.step_num == 1
    p.stop()
