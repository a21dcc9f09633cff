"""The four layers (``rtmatrix.metrics.stack``) from records' evidence, the kernel-level
fallback rules, and the stack as the first explanation of a change (no runtime)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.fixtures import build_fixture
from rtmatrix.fixtures.spec import get_spec
from rtmatrix.metrics import stack
from rtmatrix.results.diff import compare_cells, default_checks
from rtmatrix.results.explain import stack_differences

ORT_EV = {
    "system_info": "onnxruntime 1.32.0",
    "placement": {"used": ["CPUExecutionProvider"], "nodes_by_provider": {"CPU": 10}},
    "kernels": {
        "source": "assignment",
        "op_types": {"CPUExecutionProvider": {"MatMul": 4, "DequantizeLinear": 4, "Add": 2}},
        "graph_optimization_level": "all",
    },
}


def record(dtype: str, ev: dict[str, Any], fixture: dict[str, Any] | None = None) -> Any:
    return {
        "runtime": "onnxruntime",
        "fixture": fixture or {"container": "onnx", "dtype": dtype, "path": None},
        "outcome": {"status": "ok", "runtime_version": "1.32.0"},
        "evidence": ev,
    }


def test_four_layers_with_unavailable_ones_saying_why() -> None:
    got = stack.build(record("f32", {}), {"distribution": "onnxruntime"})
    assert set(got) == {"format", "runtime", "backend", "kernels"}
    assert got["format"]["unavailable"] == "no model file recorded for this cell"
    assert got["runtime"] == {"row": "onnxruntime", "distribution": "onnxruntime",
                              "version": "1.32.0"}  # fmt: skip
    assert "unavailable" in got["backend"] and "unavailable" in got["kernels"]


def test_a_dequantize_left_in_the_graph_of_a_quantized_file_is_a_kernel_fallback() -> None:
    k = stack.build(record("int4w", ORT_EV), {})["kernels"]
    assert k["fallback"] and "4 DequantizeLinear" in k["fallback_reason"]
    assert k["matmul_kernels"] == {"CPUExecutionProvider": {"MatMul": 4, "DequantizeLinear": 4}}
    assert "fallback" not in stack.build(record("f32", ORT_EV), {})["kernels"]


@pytest.mark.parametrize(
    ("layers", "fallback"),
    [({"FullyConnected": {"f32": 8}}, True), ({"FullyConnected": {"i4": 8}}, False)],
)
def test_openvino_decompressed_weights_are_a_kernel_fallback(
    layers: dict[str, Any], fallback: bool
) -> None:
    ev = {"runtime_model": {"source": "rt", "layers": layers, "primitives": {}}}
    assert bool(stack.build(record("int4w", ev), {})["kernels"].get("fallback")) is fallback


def test_the_format_is_read_from_the_file(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    art = build_fixture(get_spec("tiny"), "gguf", "q4_0", root=tmp_path)
    fx = {"container": "gguf", "dtype": "q4_0", "path": str(art.path), "sha256": "x"}
    ev = {"settings": {"model_buffers": {"CPU_Mapped": "1 MiB", "CPU_REPACK": "1 MiB"}},
          "system_info": "CPU : AVX2 = 1 | LLAMAFILE = 1 |"}  # fmt: skip
    got = stack.build(record("q4_0", ev, fx), {})
    assert got["format"]["container"] == "GGUF" and "Q4_0" in got["format"]["tensor_types"]
    assert "CPU_REPACK" in got["kernels"]["by_tensor_type"]["Q4_0"]


def test_a_changed_kernel_is_the_first_stack_difference_and_diff_shows_it() -> None:
    a = record("f32", copy.deepcopy(ORT_EV))
    b = record("f32", copy.deepcopy(ORT_EV))
    b["evidence"]["kernels"]["op_types"]["CPUExecutionProvider"]["FusedMatMul"] = 4
    b["evidence"]["kernels"]["op_types"]["CPUExecutionProvider"].pop("MatMul")
    b["evidence"]["system_info"] = "onnxruntime 1.33.0"
    for r in (a, b):
        r["evidence"]["stack"] = stack.build(r, {})
    diffs = stack_differences(a, b)
    assert diffs[0].name.startswith("kernels.") and diffs[-1].name.startswith("backend.")
    names = [d.name for d in diffs]
    assert "kernels.matmul_kernels.CPUExecutionProvider.FusedMatMul" in names
    base = {"key": "k", "runtime": "onnxruntime", "verdict": "PASS", "metrics": {},
            "fixture": {"sha256": "s"}, "params": {}}  # fmt: skip
    cell = compare_cells(a | base, b | base, default_checks())
    assert cell.stack[0].startswith("kernels.") and "FusedMatMul" in " ".join(cell.stack)
