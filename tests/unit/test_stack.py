"""The four layers (``rtmatrix.metrics.stack``): the format read from the file, the runtime from
the record, the rest as the runtime's home reported it (a typed StackReport), and the stack as
the first explanation of a change (no runtime). The homes' own rules are tested beside them
(test_openvino_stack, test_onnxruntime_stack, test_llama_cpp_stack)."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.fixtures import build_fixture
from rtmatrix.fixtures.spec import get_spec
from rtmatrix.metrics import stack
from rtmatrix.numerics import Fact, Numerics, StackReport
from rtmatrix.results.changes import stack_differences
from rtmatrix.results.diff import compare_cells, default_checks
from rtmatrix.runtimes.onnxruntime import stack as ort_stack

ORT_EV = {
    "system_info": "onnxruntime 1.32.0",
    "placement": {"used": ["CPUExecutionProvider"], "nodes_by_provider": {"CPU": 10}},
    "kernels": {
        "source": "assignment",
        "op_types": {"CPUExecutionProvider": {"MatMul": 4, "DequantizeLinear": 4, "Add": 2}},
        "graph_optimization_level": "all",
    },
}


def record(dtype: str, fixture: dict[str, Any] | None = None) -> Any:
    return {
        "runtime": "onnxruntime",
        "fixture": fixture or {"container": "onnx", "dtype": dtype, "path": None},
        "outcome": {"status": "ok", "runtime_version": "1.32.0"},
        "evidence": {},
    }


def test_layers_without_a_report_are_unavailable_saying_why() -> None:
    got = stack.build(record("f32"), {"distribution": "onnxruntime"}, None, "no capability")
    assert set(got) == {"format", "runtime", "backend", "kernels", "numerics"}
    assert got["format"]["unavailable"] == "no model file recorded for this cell"
    assert got["runtime"] == {"row": "onnxruntime", "distribution": "onnxruntime",
                              "version": "1.32.0"}  # fmt: skip
    assert got["backend"] == got["kernels"] == got["numerics"] == {"unavailable": "no capability"}


def test_the_homes_report_is_taken_as_it_is_with_what_the_host_changed() -> None:
    num = Numerics(devices=["cpu"], matmul=Fact("bf16", "INFERENCE_PRECISION_HINT = bf16", "p",
                                                 default=True, host_dependent=True))  # fmt: skip
    rep = StackReport(backend={"device": "CPU"}, kernels={"x": 1}, numerics=num)
    got = stack.build(record("f32"), {}, rep)
    assert got["backend"] == {"device": "CPU"} and got["kernels"] == {"x": 1}
    assert got["numerics"]["matmul"]["value"] == "bf16"
    assert got["numerics"]["host_changed"] == ["matmul: INFERENCE_PRECISION_HINT = bf16"]


def test_the_stack_module_names_no_runtime() -> None:
    text = inspect.getsource(stack).lower()
    # container formats (gguf, onnx, the tvm manifest, tflite) are formats, not runtimes
    for name in ("openvino", "llama", "onnxruntime", "litert", "mnn", "xnnpack", "genai"):
        assert name not in text, name


def test_the_format_is_read_from_the_file(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    art = build_fixture(get_spec("tiny"), "gguf", "q4_0", root=tmp_path)
    fx = {"container": "gguf", "dtype": "q4_0", "path": str(art.path), "sha256": "x"}
    got = stack.build(record("q4_0", fx), {})
    assert got["format"]["container"] == "GGUF" and "Q4_0" in got["format"]["tensor_types"]


def test_a_changed_kernel_is_the_first_stack_difference_and_diff_shows_it() -> None:
    a, b = record("f32"), record("f32")
    ev_b = copy.deepcopy(ORT_EV)
    ev_b["kernels"]["op_types"]["CPUExecutionProvider"]["FusedMatMul"] = 4  # type: ignore[index]
    ev_b["kernels"]["op_types"]["CPUExecutionProvider"].pop("MatMul")  # type: ignore[index]
    ev_b["system_info"] = "onnxruntime 1.33.0"
    a["evidence"]["stack"] = stack.build(a, {}, ort_stack.report(copy.deepcopy(ORT_EV), "f32"))
    b["evidence"]["stack"] = stack.build(b, {}, ort_stack.report(ev_b, "f32"))
    diffs = stack_differences(a, b)
    names = [d.name for d in diffs]
    assert names[0].startswith("kernels.")
    assert "kernels.matmul_kernels.CPUExecutionProvider.FusedMatMul" in names
    assert any(n.startswith("backend.") for n in names)
    base = {"key": "k", "runtime": "onnxruntime", "verdict": "PASS", "metrics": {},
            "fixture": {"sha256": "s"}, "params": {}}  # fmt: skip
    cell = compare_cells(a | base, b | base, default_checks())
    assert cell.stack[0].startswith("kernels.") and "FusedMatMul" in " ".join(cell.stack)
