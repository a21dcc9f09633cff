"""What the OpenVINO GenAI row ran (:func:`report`), from its own evidence: the pipeline exposes
no compiled-model properties, so each precision is what the row asked the pipeline for, else the
CPU device's own default read back with ``Core.get_property`` (``INFERENCE_PRECISION_HINT``:
bf16 on a CPU with AVX512_BF16 or AMX; ``KV_CACHE_PRECISION``: u8). Nothing here imports
OpenVINO."""

from __future__ import annotations

from typing import Any

from rtmatrix.numerics import Fact, Numerics, StackReport, precision, unavailable
from rtmatrix.runtimes.openvino.stack import F32_CONTROL, F32_EXPLAINS, devices

_ASKED = "the pipeline's properties (LLMPipeline(..., **properties)) as this row asked"
_DEFAULT = "Core.get_property(device, ...): the device's default (the row asked for nothing)"


def _fact(key: str, asked: dict[str, Any], defaults: dict[str, Any], what: str) -> Fact | None:
    if key in asked:
        return Fact(str(precision(asked[key]) or asked[key]), f"{key} = {asked[key]}", _ASKED)
    value = defaults.get(key)
    p = precision(value)
    if p is None:
        return None
    return Fact(p, f"{key} = {value} ({what})", _DEFAULT, default=True, host_dependent=True)


def numerics(ev: dict[str, Any], dtype: str | None) -> Numerics:
    settings = ev.get("settings") or {}
    asked = dict(settings.get("asked") or {})
    defaults = dict(settings.get("device_defaults") or {})
    matmul = _fact("INFERENCE_PRECISION_HINT", asked, defaults, "the CPU plugin's default here")
    kv = _fact("KV_CACHE_PRECISION", asked, defaults, "the CPU plugin's default here")
    batch = ev.get("batch_pipeline") or {}
    if batch.get("kv_cache_precision_note"):  # the serve scenario's pipeline ran with this one
        kv = Fact("bf16", f"KV_CACHE_PRECISION = {batch['kv_cache_precision_note']}",
                  "ContinuousBatchingPipeline(..., properties) as the row built it",
                  default=True, host_dependent=True)  # fmt: skip
    backend_asked = asked.get("ATTENTION_BACKEND")
    attention = Fact(str(backend_asked or "PA"),
                     f"ATTENTION_BACKEND = {backend_asked or 'PA (GenAI default)'}",
                     _ASKED if backend_asked else "GenAI's documented default",
                     default=backend_asked is None)  # fmt: skip
    downgraded = dtype in ("f32", "f16") and any(
        f is not None and f.value not in ("f32", dtype) for f in (matmul, kv)
    )
    control = dict(F32_CONTROL) | {"kv_cache_precision": "f32"} if downgraded else {}
    return Numerics(
        devices=devices(None, str(asked.get("device") or ev.get("device") or "CPU")),
        matmul=matmul,
        attention=attention,
        kv_cache=kv,
        control=control,
        control_explains=F32_EXPLAINS + " and its KV_CACHE_PRECISION" if control else "",
    )


def report(ev: dict[str, Any], dtype: str | None) -> StackReport:
    said = unavailable("OpenVINO GenAI's pipeline names no kernel and has no runtime model")
    return StackReport(backend={"engine": (ev.get("engine_loop") or {}).get("api")},
                       kernels=said, numerics=numerics(ev, dtype))  # fmt: skip
