"""The ONNX Runtime rows' home report (``runtimes/onnxruntime/stack.py``): a DequantizeLinear
left in a quantized file's optimized graph is a kernel-level fallback; devices from the
providers; dynamic activation quantization named."""

from __future__ import annotations

from typing import Any

from rtmatrix.runtimes.onnxruntime import stack


def ev(ops: dict[str, int], used: str = "CPUExecutionProvider") -> dict[str, Any]:
    return {
        "placement": {"used": [used], "nodes_by_provider": {used: 10}},
        "kernels": {"source": "a", "op_types": {used: ops}, "graph_optimization_level": "all"},
    }


def test_a_dequantize_left_in_the_graph_of_a_quantized_file_is_a_kernel_fallback() -> None:
    k = stack.report(ev({"MatMul": 4, "DequantizeLinear": 4, "Add": 2}), "int4w").kernels
    assert k["fallback"] and "4 DequantizeLinear" in k["fallback_reason"]
    assert "fallback" not in stack.report(ev({"MatMul": 4}), "f32").kernels


def test_devices_and_numerics_follow_the_providers_and_the_graph() -> None:
    f32 = stack.report(ev({"MatMul": 4}), "f32").numerics
    assert f32.devices == ["cpu"] and f32.matmul is not None and f32.matmul.value == "f32"
    q = stack.report(ev({"DynamicQuantizeMatMul": 4}), "int8").numerics
    assert q.activation_quantization is not None and q.activation_quantization.value == "u8"
    gpu = stack.report(ev({"MatMul": 4}, "CUDAExecutionProvider"), "f32").numerics
    assert gpu.devices == ["gpu:CUDAExecutionProvider"] and gpu.matmul is None
    assert stack.device_of("DmlExecutionProvider").startswith("gpu")
