"""What the OpenVINO row ran, read from its own evidence (:func:`report`): the device and its
capabilities, the CPU plugin's runtime model (layer types at their runtime precision: a
quantized file's FullyConnected at f32 is a kernel-level fallback) and the effective numerics —
the compiled model's ``INFERENCE_PRECISION_HINT`` (OpenVINO's CPU default is bf16 on a CPU with
AVX512_BF16 or AMX, f32 otherwise) checked against the runtime model's FullyConnected/MatMul
precisions, its KV-cache precision and dynamic quantization group. Nothing here imports
OpenVINO: the adapter's evidence is the input.
"""

from __future__ import annotations

from typing import Any

from rtmatrix.numerics import (
    PRECISION_ORDER,
    QUANTIZED,
    Fact,
    Numerics,
    StackReport,
    precision,
    unavailable,
)

MATMUL_LAYERS = ("FullyConnected", "MatMul", "ScaledDotProductAttention")
#: the options that force f32 compute (the numerics control run)
F32_CONTROL = {"inference_precision": "f32"}
F32_EXPLAINS = (
    "OpenVINO's INFERENCE_PRECISION_HINT (its CPU plugin's default is bf16 where the CPU has "
    "AVX512_BF16 or AMX; f32 keeps the model's own precision)"
)
_KV_EXPLAINS = (
    "OpenVINO's KV_CACHE_PRECISION (its CPU plugin keeps a stateful model's cache in u8 by "
    "default; f32 keeps the model's own precision)"
)
_RT_SOURCE = "CompiledModel.get_runtime_model(): rt_info runtimePrecision"
_PROP_SOURCE = "CompiledModel.get_property()"


def kernels(ev: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    """The matmul layers of the CPU plugin's runtime model, and whether a quantized file's
    weights were decompressed (FullyConnected at a float precision)."""
    rt = ev.get("runtime_model") or {}
    if not rt.get("layers"):
        return unavailable(str(rt.get("unavailable") or "no runtime model recorded"))
    out: dict[str, Any] = {
        "source": rt.get("source"),
        "matmul_layers": {k: v for k, v in rt["layers"].items() if k in MATMUL_LAYERS},
        "matmul_primitives": {
            k: v for k, v in (rt.get("primitives") or {}).items() if k in MATMUL_LAYERS
        },
    }
    fc = rt["layers"].get("FullyConnected") or {}
    if dtype in QUANTIZED and fc and set(fc) <= {"f32", "f16", "bf16"}:
        out["fallback"] = True
        out["fallback_reason"] = (
            f"FullyConnected layers run at {sorted(fc)}: the quantized weights were decompressed"
        )
    return out


def backend(ev: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ev.get("device_name"):
        out["device"] = ev["device_name"]
        out["capabilities"] = ev.get("device_capabilities")
    settings = ev.get("settings") or {}
    if isinstance(settings.get("asked"), dict):
        out["asked"] = settings["asked"]
    return out or unavailable("the row recorded no device")


def devices(execution: object, fallback: str) -> list[str]:
    """``EXECUTION_DEVICES`` (``['CPU']``) as device kinds (``cpu``, ``gpu:GPU.0``)."""
    names = execution if isinstance(execution, list) else [fallback]
    out = []
    for name in names:
        text = str(name)
        out.append("cpu" if text.upper().startswith("CPU") else f"gpu:{text}" if
                   text.upper().startswith("GPU") else text.lower())  # fmt: skip
    return out


def matmul_fact(hint: object, asked: bool, layers: dict[str, Any] | None) -> Fact | None:
    """The matmuls' precision: the runtime model's FullyConnected/MatMul runtime precisions
    (what the plugin compiled) where recorded, the compiled model's inference precision hint
    beside them."""
    said = f"INFERENCE_PRECISION_HINT = {precision(hint) or hint}"
    found: dict[str, int] = {}
    for layer in ("FullyConnected", "MatMul"):
        for prec, n in ((layers or {}).get(layer) or {}).items():
            if (p := precision(prec)) is not None:
                found[p] = found.get(p, 0) + int(n)
    if found:
        lowest = max(found, key=PRECISION_ORDER.index)
        counts = ", ".join(f"{n} at {p}" for p, n in sorted(found.items()))
        return Fact(lowest, f"FullyConnected/MatMul layers {counts}; {said}",
                    f"{_RT_SOURCE}; {_PROP_SOURCE}", default=not asked,
                    host_dependent=not asked)  # fmt: skip
    p = precision(hint)
    if p is None:
        return None
    return Fact(p, said, _PROP_SOURCE, default=not asked, host_dependent=not asked)


def kv_fact(stateful: bool, value: object, asked: bool) -> Fact | None:
    """The KV cache's precision: a stateful model's (the IR OpenVINO's exporter writes) is the
    compiled model's ``KV_CACHE_PRECISION``; an explicit past/present model's is its f32 tensors."""
    if not stateful:
        return Fact("f32", "explicit past/present tensors (f32 model inputs/outputs); "
                    f"KV_CACHE_PRECISION = {value} applies to stateful models only",
                    "the model's past_key_values inputs")  # fmt: skip
    p = precision(value)
    if p is None:
        return None
    return Fact(p, f"KV_CACHE_PRECISION = {value} (a stateful model: the cache is its state)",
                _PROP_SOURCE, default=not asked, host_dependent=not asked)  # fmt: skip


def numerics(ev: dict[str, Any], dtype: str | None) -> Numerics:
    settings = ev.get("settings") or {}
    cm = settings.get("compiled_model") or {}
    asked = settings.get("asked") or {}
    if not cm:
        return Numerics(devices=devices(None, str(ev.get("device", "CPU"))),
                        unavailable="no compiled model: nothing was read back")  # fmt: skip
    layers = (ev.get("runtime_model") or {}).get("layers")
    matmul = matmul_fact(cm.get("INFERENCE_PRECISION_HINT"),
                         "INFERENCE_PRECISION_HINT" in asked, layers)  # fmt: skip
    group = cm.get("DYNAMIC_QUANTIZATION_GROUP_SIZE")
    dyn = None
    if isinstance(group, int) and group > 0:
        dyn = Fact(
            f"group {group}",
            f"DYNAMIC_QUANTIZATION_GROUP_SIZE = {group} (activations of FullyConnected layers "
            "with compressed int8/int4 weights are quantized per group at run time)",
            _PROP_SOURCE,
            default="DYNAMIC_QUANTIZATION_GROUP_SIZE" not in asked,
            host_dependent="DYNAMIC_QUANTIZATION_GROUP_SIZE" not in asked,
        )
    kv = kv_fact(ev.get("stateful") is True, cm.get("KV_CACHE_PRECISION"),
                 "KV_CACHE_PRECISION" in asked)  # fmt: skip
    control = dict(F32_CONTROL) if dtype in ("f32", "f16") and matmul is not None and \
        matmul.value != "f32" else {}  # fmt: skip
    explains = F32_EXPLAINS if control else ""
    if dtype in ("f32", "f16") and kv is not None and kv.value not in ("f32", dtype):
        control |= {"kv_cache_precision": "f32"}
        explains = f"{explains} and its KV_CACHE_PRECISION" if explains else _KV_EXPLAINS
    return Numerics(
        devices=devices(cm.get("EXECUTION_DEVICES"), str(ev.get("device", "CPU"))),
        matmul=matmul,
        kv_cache=kv,
        activation_quantization=dyn,
        control=control,
        control_explains=explains,
    )


def report(ev: dict[str, Any], dtype: str | None) -> StackReport:
    return StackReport(backend=backend(ev), kernels=kernels(ev, dtype),
                       numerics=numerics(ev, dtype))  # fmt: skip
