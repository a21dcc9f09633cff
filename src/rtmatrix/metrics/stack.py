"""The four layers of a cell, written down separately (``evidence.stack``): the **format** the
file is in, the **runtime** that read it, the **backend** it handed the work to, and the
**kernels** that computed the matmuls — each with what the runtime itself said, or
``unavailable`` with the reason.

Built in the parent from the cell's record: the format from the file itself (format libraries
only: ``gguf``, ``onnx``, the TVM manifest, ``tflite``; read once per file and cached by its
sha256), the runtime from the distribution and version the worker reported, the backend and the
kernels from the adapter's own evidence (ONNX Runtime's graph-assignment record of the optimized
graph, OpenVINO's runtime model, llama.cpp's buffer log lines and system info, LiteRT's delegate
partitions, TVM's compile manifest). Nothing here imports a runtime.

**Kernel-level fallback**: a quantized cell whose matmul weights were turned back into f32 — by
a ``DequantizeLinear`` node left in ONNX Runtime's optimized graph, by OpenVINO running its
FullyConnected layers at f32, by MNN's converter folding them — is marked (``fallback: true``
with the reason); the runner makes such a cell's outcome ``fallback``, as a placement fallback.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

QUANTIZED = frozenset({"q8_0", "q4_0", "int8", "int8w", "int4w", "as-shipped"})
#: op types that compute the model's matmuls, per container family
MATMUL_OPS = (
    "MatMul",
    "Gemm",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "MatMulNBits",
    "FusedMatMul",
    "QGemm",
    "DequantizeLinear",
)
LITERT_MATMULS = ("FULLY_CONNECTED", "BATCH_MATMUL")


def _unavailable(why: str) -> dict[str, Any]:
    return {"unavailable": why}


# -- format ----------------------------------------------------------------------------------
@cache
def _read_format(container: str, path: str, sha256: str) -> dict[str, Any]:
    p = Path(path)
    try:
        if container == "gguf":
            return _gguf(p)
        if container == "onnx":
            return _onnx(p)
        if container == "tvm":
            return _tvm(p)
        if container == "tflite":
            return _tflite(p)
    except Exception as exc:  # a damaged file is a fixture variant: say what the reader said
        return _unavailable(f"{container} reader: {type(exc).__name__}: {exc}"[:300])
    return _unavailable(f"rtmatrix reads no {container!r} files")


def _gguf(p: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    r = GGUFReader(str(p))
    arch_field = r.fields.get("general.architecture")
    arch = bytes(arch_field.parts[-1]).decode() if arch_field else None
    version_field = r.fields.get("GGUF.version")
    version = int(version_field.parts[-1][0]) if version_field else None
    types = Counter(t.tensor_type.name for t in r.tensors)
    return {
        "container": "GGUF",
        "version": version,
        "architecture": arch,
        "tensor_types": dict(types),
        "tensors": len(r.tensors),
    }


def _onnx(p: Path) -> dict[str, Any]:
    import onnx

    m = onnx.load(str(p), load_external_data=False)
    ops = Counter(
        (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type
        for n in m.graph.node
    )
    opsets = {o.domain or "ai.onnx": int(o.version) for o in m.opset_import}
    weight_types = Counter(onnx.TensorProto.DataType.Name(t.data_type) for t in m.graph.initializer)
    return {
        "container": "ONNX",
        "ir_version": int(m.ir_version),
        "opsets": opsets,
        "op_types": dict(ops),
        "initializer_types": dict(weight_types),
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
    }


def _tvm(p: Path) -> dict[str, Any]:
    folder = p if p.is_dir() else p.parent
    man = json.loads((folder / "tvm-manifest.json").read_text("utf-8"))
    return {
        "container": "TVM library + tensor cache",
        "manifest_version": man.get("manifest_version"),
        "tvm": (man.get("tvm") or {}).get("version"),
        "target": (man.get("target") or {}).get("json"),
        "param_mode": (man.get("compile") or {}).get("param_mode"),
    }


def _tflite(p: Path) -> dict[str, Any]:
    import tflite

    m = tflite.Model.GetRootAsModel(p.read_bytes(), 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        codes.append(oc.CustomCode().decode() if oc.CustomCode() else names.get(oc.BuiltinCode()))
    sigs = [m.SignatureDefs(i).SignatureKey().decode() for i in range(m.SignatureDefsLength())]
    return {
        "container": "TFLite flatbuffer",
        "schema_version": int(m.Version()),
        "operator_codes": codes,
        "signatures": sigs,
        "subgraphs": m.SubgraphsLength(),
    }


def format_layer(fixture: dict[str, Any]) -> dict[str, Any]:
    path, sha = fixture.get("path"), fixture.get("sha256")
    if not path or not Path(str(path)).exists():
        return _unavailable("no model file recorded for this cell")
    out = dict(_read_format(str(fixture.get("container")), str(path), str(sha)))
    out["dtype"] = fixture.get("dtype")
    return out


# -- backend and kernels, from each row's own evidence ---------------------------------------
def backend_layer(ev: dict[str, Any]) -> dict[str, Any]:
    placement = ev.get("placement") or {}
    out: dict[str, Any] = {}
    if placement.get("used"):
        out["used"] = placement["used"]
        out["nodes_by_provider"] = placement.get("nodes_by_provider")
    if ev.get("system_info"):
        out["said"] = ev["system_info"]
    if ev.get("device_name"):  # openvino
        out["device"] = ev["device_name"]
        out["capabilities"] = ev.get("device_capabilities")
    settings = ev.get("settings") or {}
    if isinstance(settings, dict) and settings.get("resolver"):  # litert
        out["resolver"] = settings["resolver"]
    if ev.get("partitions"):
        out["delegate_partitions"] = ev["partitions"].get("partitions")
    if isinstance(settings, dict) and isinstance(settings.get("effective"), dict):
        eff = settings["effective"]
        for k in ("target", "mcpu", "vector_width_bits"):  # tvm
            if k in eff:
                out[k] = eff[k]
    if isinstance(settings, dict) and isinstance(settings.get("asked"), dict):
        out.setdefault("asked", settings["asked"])
    return out or _unavailable("the row's evidence names no backend")


def _ort_kernels(ev: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    k = ev.get("kernels") or {}
    if not k.get("op_types"):
        return _unavailable(str(k.get("unavailable") or "no graph-assignment record"))
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


def _ov_kernels(ev: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    rt = ev.get("runtime_model") or {}
    if not rt.get("layers"):
        return _unavailable(str(rt.get("unavailable") or "no runtime model recorded"))
    keep = ("FullyConnected", "MatMul", "ScaledDotProductAttention")
    out: dict[str, Any] = {
        "source": rt.get("source"),
        "matmul_layers": {k: v for k, v in rt["layers"].items() if k in keep},
        "matmul_primitives": {k: v for k, v in (rt.get("primitives") or {}).items() if k in keep},
    }
    fc = rt["layers"].get("FullyConnected") or {}
    if dtype in QUANTIZED and fc and set(fc) <= {"f32", "f16", "bf16"}:
        out["fallback"] = True
        out["fallback_reason"] = (
            f"FullyConnected layers run at {sorted(fc)}: the quantized weights were decompressed"
        )
    return out


def _llama_kernels(ev: dict[str, Any], fmt: dict[str, Any]) -> dict[str, Any]:
    settings = ev.get("settings") or {}
    buffers = settings.get("model_buffers") or {}
    info = str(ev.get("system_info") or "")
    llamafile = "LLAMAFILE = 1" in info
    types = dict(fmt.get("tensor_types") or {})
    per_type: dict[str, str] = {}
    for t in types:
        if "CPU_REPACK" in buffers and t.startswith("Q4_0"):
            per_type[t] = "repacked into the CPU backend's interleaved Q4_0 layout (CPU_REPACK)"
        elif "AMX" in buffers:
            per_type[t] = "AMX buffer (the CPU backend's AMX tiles)"
        elif t in ("F32", "F16", "BF16") and llamafile:
            per_type[t] = "llamafile sgemm (tinyBLAS) for large matmuls, ggml vec_dot otherwise"
        else:
            per_type[t] = f"ggml CPU {t} dot-product kernels"
    return {
        "source": "llama.cpp's model buffer log lines and llama_print_system_info()",
        "model_buffers": buffers,
        "by_tensor_type": per_type,
        "note": "llama.cpp names no kernel per op; inferred from the buffers it made",
    }


def kernels_layer(
    runtime: str,
    ev: dict[str, Any],
    fmt: dict[str, Any],
    dtype: str | None,
    fixture: dict[str, Any],
) -> dict[str, Any]:
    if ev.get("kernels") and "op_types" in (ev.get("kernels") or {}):
        return _ort_kernels(ev, dtype)
    if ev.get("runtime_model"):
        return _ov_kernels(ev, dtype)
    if "model_buffers" in (ev.get("settings") or {}):
        return _llama_kernels(ev, fmt)
    if ev.get("partitions") and "delegated_by_type" in ev["partitions"]:
        p = ev["partitions"]
        return {
            "source": p.get("source"),
            "on_delegate": {k: v for k, v in p["delegated_by_type"].items() if k in LITERT_MATMULS},
            "on_builtin_kernels": {
                k: v for k, v in p["kept_by_type"].items() if k in LITERT_MATMULS
            },
        }
    manifest = ev.get("manifest") or {}
    if manifest.get("compile"):
        c = manifest["compile"]
        return {
            "source": "the TVM library's compile manifest",
            "schedule_rules": c.get("schedule_rules"),
            "functions_scheduled": len(c.get("prim_funcs_scheduled") or []),
            "functions_unscheduled": c.get("prim_funcs_unscheduled"),
        }
    conv = ev.get("conversion") or {}
    if conv.get("flags") is not None and "converter_says" in conv:  # mnn
        out: dict[str, Any] = _unavailable("MNN's module API names no kernel")
        size, src = conv.get("size_bytes"), fixture.get("size_bytes")
        if dtype in QUANTIZED and size and src and size > 2 * src:
            out |= {
                "fallback": True,
                "fallback_reason": f"MNN's converter wrote {size} bytes from a {src}-byte "
                f"{dtype} file: the quantized weights were folded back to f32",
            }
        return out
    return _unavailable(f"{runtime}: the runtime reports no kernel choice this row can read")


def build(record: dict[str, Any], runtime_info: dict[str, Any]) -> dict[str, Any]:
    """The four layers of one cell's record."""
    fixture = record.get("fixture") or {}
    ev = record.get("evidence") or {}
    fmt = format_layer(fixture)
    runtime = {
        "row": record.get("runtime"),
        "distribution": runtime_info.get("distribution"),
        "version": (record.get("outcome") or {}).get("runtime_version")
        or runtime_info.get("version"),
    }
    return {
        "format": fmt,
        "runtime": runtime,
        "backend": backend_layer(ev),
        "kernels": kernels_layer(
            str(record.get("runtime")), ev, fmt, fixture.get("dtype"), fixture
        ),
    }
