"""What the LiteRT row ran (:func:`report`), from its own evidence: the op resolver, which
nodes XNNPACK took (``DELEGATE`` partitions) and which stayed on the builtin kernels, and the
numerics XNNPACK runs here (f32: the interpreter asks for no fp16 inference; an int8 file's
hybrid kernels quantize activations per call; litert-torch's dynamic-range files, int8 or int4
weights, are the same kind). The KV cache's fact names whose export wrote the file. Nothing
here imports LiteRT."""

from __future__ import annotations

from typing import Any

from rtmatrix.converters import dtypes as vendor
from rtmatrix.numerics import Fact, Numerics, StackReport, unavailable
from rtmatrix.runtimes.litert.layout import LITERT_TORCH

MATMULS = ("FULLY_CONNECTED", "BATCH_MATMUL")
_SETTINGS = "the interpreter's settings as this row built it"


def kernels(ev: dict[str, Any]) -> dict[str, Any]:
    p = ev.get("partitions") or {}
    if "delegated_by_type" not in p:
        return unavailable("no delegate partition record")
    return {
        "source": p.get("source"),
        "on_delegate": {k: v for k, v in p["delegated_by_type"].items() if k in MATMULS},
        "on_builtin_kernels": {
            k: v for k, v in (p.get("kept_by_type") or {}).items() if k in MATMULS
        },
    }


def backend(ev: dict[str, Any]) -> dict[str, Any]:
    settings = ev.get("settings") or {}
    out: dict[str, Any] = {}
    if settings.get("resolver"):
        out["resolver"] = settings["resolver"]
    if ev.get("partitions"):
        out["delegate_partitions"] = ev["partitions"].get("partitions")
    if isinstance(settings.get("asked"), dict):
        out["asked"] = settings["asked"]
    return out or unavailable("the row recorded no resolver")


def numerics(ev: dict[str, Any], dtype: str | None) -> Numerics:
    asked = (ev.get("settings") or {}).get("asked") or {}
    xnn = bool(asked.get("xnnpack", True))
    where = "XNNPACK" if xnn else "the builtin kernels"
    if dtype in ("f32", "f16", None):
        matmul = Fact("f32", f"{where}: f32 FULLY_CONNECTED (no fp16 inference asked)", _SETTINGS)
        act = None
    else:
        bits = vendor.bits(dtype) or 8  # a converter's own (litert-int4), else rtmatrix's int8
        matmul = Fact(f"i{bits}", f"{where}: int{bits} weights, hybrid kernels", _SETTINGS)
        hybrid = f"TFLite's hybrid FULLY_CONNECTED (float activations, int{bits} weights)"
        act = Fact("i8", "hybrid kernels quantize the float activations to int8 per call", hybrid)
    kv = _kv_cache((ev.get("static_shapes") or {}).get("made_by"))
    return Numerics(devices=["cpu"], matmul=matmul, kv_cache=kv, activation_quantization=act)


def _kv_cache(made_by: str | None) -> Fact:
    """The cache is the file's own f32 tensors, whoever wrote the file (the row feeds them back)."""
    if made_by == LITERT_TORCH:
        return Fact("f32", "explicit f32 cache tensors kv_cache_k_<i>/kv_cache_v_<i> written "
                    "with DYNAMIC_UPDATE_SLICE, fed back by the row", LITERT_TORCH)  # fmt: skip
    return Fact("f32", "explicit f32 cache tensors written with DYNAMIC_UPDATE_SLICE",
                "rtmatrix's .tflite export")  # fmt: skip


def report(ev: dict[str, Any], dtype: str | None) -> StackReport:
    return StackReport(backend=backend(ev), kernels=kernels(ev), numerics=numerics(ev, dtype))
