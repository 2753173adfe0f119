"""Framework description lines: vm and ge (GraphEngine) decoding, and the op names framework_raw shows."""

from __future__ import annotations

from pathlib import Path

from profiler.export.mindspore import short_op_name
from profiler.importers.ascend.framework_desc import parse_graph_line

GRAPH_DESC = "ascend/JOB3/Framework.host.vm.graph_desc_info.1.slice_0"


def test_vm_graph_line_from_job3(captures: Path):
    first = (captures / GRAPH_DESC).read_text().splitlines()[0]
    name, op_type, op_info = parse_graph_line(first, "vm")
    assert (name, op_type) == ("Default/AssignAdd-op414", "AssignAdd")
    assert op_info == {
        f"{d}_{k}": {"format": "DefaultFormat", "data_type": "NUMBER_TYPE_INT32", "shape": "1"}
        for d, k in (("input", 0), ("input", 1), ("output", 0))
    }


def test_ge_graph_line_names_enums_and_unknowns():
    line = (
        "op_name:Default/Conv2D-op1 op_type:Conv2D input_id:0 input_format:3 input_data_type:1 "
        'input_shape:"32,1,28,28,16" output_id:0 output_format:99 output_data_type:0 output_shape:""'
    )
    assert parse_graph_line(line, "ge") == (
        "Default/Conv2D-op1",
        "Conv2D",
        {
            "input_0": {"format": "FORMAT_NC1HWC0", "data_type": "DT_FLOAT16", "shape": "32,1,28,28,16"},
            "output_0": {"format": "UNKNOWN", "data_type": "DT_FLOAT", "shape": ""},
        },
    )
    assert parse_graph_line(line.replace("input_data_type:1", "input_data_type:77"), "vm")[2]["input_0"] == {
        "format": "3",
        "data_type": "UNKNOWN",
        "shape": "32,1,28,28,16",
    }


def test_short_op_names():
    assert short_op_name("Default/net/MatMul-op12", "vm") == "MatMul-op12"
    assert short_op_name("Default/net/MatMul-op12Default/net/BiasAdd-op3", "ge") == "MatMul-op12+BiasAdd-op3"
    assert short_op_name("kernel_graph_0/Cast-op1", "vm") == "kernel_graph_0/Cast-op1"
