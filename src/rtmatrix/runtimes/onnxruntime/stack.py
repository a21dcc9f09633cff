"""What the ONNX Runtime rows ran (:func:`report`), from their own evidence: the execution
providers that took the nodes (placement), the optimized graph's nodes per provider and op type
(``get_provider_graph_assignment_info``: fusions show; a ``DequantizeLinear`` left in front of
an f32 ``MatMul`` in a quantized file is a kernel-level fallback), the graph optimization level,
and the effective numerics the optimized graph implies (an f32 graph on the CPU provider runs
MLAS's f32 GEMM; ``DynamicQuantizeMatMul`` / ``MatMulInteger`` quantize activations to u8 at run
time). Nothing here imports onnxruntime."""

from __future__ import annotations

from typing import Any

from rtmatrix.numerics import QUANTIZED, Fact, Numerics, StackReport, unavailable

MATMUL_OPS = ("MatMul", "Gemm", "MatMulInteger", "MatMulIntegerToFloat",
              "DynamicQuantizeMatMul", "MatMulNBits", "FusedMatMul", "QGemm",
              "DequantizeLinear")  # fmt: skip
#: op types that quantize activations at run time
DYNAMIC_QUANT_OPS = ("DynamicQuantizeMatMul", "DynamicQuantizeLinear", "MatMulInteger")
_GRAPH = "the optimized graph's nodes per execution provider (get_provider_graph_assignment_info)"
_GPU_WORDS = ("CUDA", "TensorRT", "Dml", "DML", "ROCm", "MIGraphX", "WebGpu", "WebGPU", "CoreML")


def kernels(ev: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    k = ev.get("kernels") or {}
    if not k.get("op_types"):
        return unavailable(str(k.get("unavailable") or "no graph-assignment record"))
    matmuls = {
        ep: {op: n for op, n in ops.items() if op.split(".")[-1] in MATMUL_OPS}
        for ep, ops in k["op_types"].items()
    }
    dq = sum(
        n for ops in matmuls.values() for op, n in ops.items() if op.endswith("DequantizeLinear")
    )
    out: dict[str, Any] = {
        "source": k.get("source"),
        "matmul_kernels": matmuls,
        "graph_optimization_level": k.get("graph_optimization_level"),
        "op_types": k["op_types"],  # every kernel of the optimized graph (fusions show here)
    }
    if dtype in QUANTIZED and dq:
        out["fallback"] = True
        out["fallback_reason"] = (
            f"{dq} DequantizeLinear node(s) left in the optimized graph: the quantized weights are "
            "dequantized to f32 at run time and multiplied by an f32 MatMul"
        )
    return out


def backend(ev: dict[str, Any]) -> dict[str, Any]:
    placement = ev.get("placement") or {}
    out: dict[str, Any] = {}
    if placement.get("used"):
        out["used"] = placement["used"]
        out["nodes_by_provider"] = placement.get("nodes_by_provider")
    if ev.get("system_info"):
        out["said"] = ev["system_info"]
    session = ev.get("session") or {}
    if session.get("providers"):
        out.setdefault("used", session["providers"])
    return out or unavailable("the row recorded no execution provider")


def device_of(provider: str) -> str:
    """An execution provider's device kind: the CPU provider (and OpenVINO's, on its CPU
    device) -> ``cpu``; CUDA, TensorRT, DirectML, ROCm, ... -> ``gpu:<provider>``."""
    return f"gpu:{provider}" if any(w in provider for w in _GPU_WORDS) else "cpu"


def numerics(ev: dict[str, Any], dtype: str | None) -> Numerics:
    placed = (ev.get("placement") or {}).get("used")
    providers = list(
        placed or (ev.get("session") or {}).get("providers") or ["CPUExecutionProvider"]
    )
    devices = sorted({device_of(str(p)) for p in providers})
    ops = ((ev.get("kernels") or {}).get("op_types")) or {}
    matmul = act = None
    cpu_ops = ops.get("CPUExecutionProvider") or {}
    if ops and set(ops) == {"CPUExecutionProvider"} and dtype in ("f32", None):
        found = {op: n for op, n in cpu_ops.items() if op.split(".")[-1] in MATMUL_OPS}
        matmul = Fact("f32", f"CPUExecutionProvider {found}: MLAS f32 GEMM on an f32 graph",
                      _GRAPH)  # fmt: skip
    dyn = {op: n for op, n in cpu_ops.items() if op.split(".")[-1] in DYNAMIC_QUANT_OPS}
    if dyn:
        act = Fact("u8", f"{dyn}: activations quantized to uint8 per call at run time", _GRAPH)
    return Numerics(
        devices=devices,
        matmul=matmul,
        activation_quantization=act,
        unavailable=None if ops else "no optimized-graph record: precisions not read",
    )


def report(ev: dict[str, Any], dtype: str | None) -> StackReport:
    return StackReport(backend=backend(ev), kernels=kernels(ev, dtype),
                       numerics=numerics(ev, dtype))  # fmt: skip
