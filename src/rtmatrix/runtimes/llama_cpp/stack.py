"""What the llama.cpp row ran (:func:`report`), from its own evidence: the CPU backend's system
info, the model buffers it made (``CPU_REPACK`` / ``AMX``: weights repacked for this host's
kernels), the tensor types the GGUF file stores, and the effective numerics — the KV-cache types
from llama.cpp's own ``llama_kv_cache`` line (f16 by default under any weights), the attention
path as it resolved (flash attention's ``FLASH_ATTN_EXT`` uses an f16 mask on the CPU) and the
matmul precision the stored type implies. Nothing here imports llama.cpp."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from rtmatrix.numerics import (
    PRECISION_ORDER,
    Fact,
    Numerics,
    StackReport,
    precision,
    unavailable,
)

_LOG = "llama.cpp's log lines (llama_log_set)"
#: llama.cpp's KV-cache summary: "llama_kv_cache: size = … K (f16): … MiB, V (f16): … MiB"
KV_LINE = re.compile(r"K \((\w+)\):.*?V \((\w+)\):")
#: a model buffer line: "CPU_REPACK model buffer size = 10.00 MiB"
BUFFER_LINE = re.compile(r"(\S+) model buffer size\s*=\s*(\S+ \S+)")
#: the options that keep the KV cache in f32 (the numerics control run)
F32_KV_CONTROL = {"type_k": "f32", "type_v": "f32"}
F32_KV_EXPLAINS = "llama.cpp's KV-cache types (type_k/type_v, its tools' -ctk/-ctv; default f16)"
F32_ATTENTION_CONTROL = {"flash_attn": "off"}
F32_ATTENTION_EXPLAINS = (
    "llama.cpp's flash attention (flash_attn, its tools' -fa), which casts K/V to f16"
)
#: stored tensor type -> the precision llama.cpp's CPU matmul computes it in
_MATMUL = {"F32": "f32", "F16": "f16", "BF16": "bf16"}

#: the attention fact's value when flash attention ran (its precision: f16)
FLASH_F16 = "flash (f16)"


@cache
def _tensor_types(path: str) -> tuple[tuple[str, int], ...]:
    from collections import Counter

    from gguf import GGUFReader

    counts = Counter(t.tensor_type.name for t in GGUFReader(path).tensors)
    return tuple(sorted(counts.items()))


def tensor_types(path: Path) -> dict[str, int]:
    """The GGUF file's tensor types and counts ({} when it cannot be read)."""
    try:
        return dict(_tensor_types(str(path)))
    except Exception:  # a damaged or missing file: the kernels layer says what it knows
        return {}


def kernels(ev: dict[str, Any], types: dict[str, int]) -> dict[str, Any]:
    settings = ev.get("settings") or {}
    buffers = settings.get("model_buffers") or {}
    llamafile = "LLAMAFILE = 1" in str(ev.get("system_info") or "")
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


def backend(ev: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ev.get("system_info"):
        out["said"] = ev["system_info"]
    if ev.get("layer_placement"):
        out["layer_placement"] = ev["layer_placement"]
    return out or unavailable("llama.cpp reported no system info")


def _kv(settings: dict[str, Any], log: str) -> Fact | None:
    kv = settings.get("kv_cache") or {}
    if "type_k" not in kv:
        return None
    k, v = str(kv["type_k"]), str(kv["type_v"])
    worst = max((precision(k) or "f32", precision(v) or "f32"), key=PRECISION_ORDER.index)
    asked = kv.get("requested") or {}
    return Fact(worst, f"K ({k}), V ({v})", f"{log}: {kv.get('line', '')}".strip(),
                default=not asked)  # fmt: skip


def _attention(settings: dict[str, Any], log: str) -> Fact | None:
    eff = settings.get("effective") or {}
    resolved = eff.get("flash_attn_resolved")
    asked = eff.get("flash_attn")
    if resolved is None and asked is None:
        return None
    requested = (settings.get("requested") or {}).get("flash_attn")
    default = requested in (None, "auto")
    said = f"flash_attn = {asked}" + (f", resolved to {resolved}" if resolved else "")
    if resolved is None and str(asked).lower() not in ("on", "off", "enabled", "disabled"):
        return Fact("unknown", f"{said}; how it resolved is not in the log", log,
                    default=default)  # fmt: skip
    on = (resolved or asked) in ("enabled", "on", "1", "true")
    # llama-graph's build_attn_mha casts an f32 K/V to f16 before ggml_flash_attn_ext, so flash
    # attention computes its K·Q and V products in f16 whatever the KV cache holds
    what = ("flash attention (llama.cpp casts K and V to f16 for FLASH_ATTN_EXT: f16 K·Q and V "
            "products, f32 accumulation)") if on \
        else "standard attention (KQ and KQV matmuls at the KV cache's type)"  # fmt: skip
    value = FLASH_F16 if on else "standard"
    return Fact(value, f"{what}; {said}", log, default=default)


def _layout(settings: dict[str, Any], log: str) -> Fact | None:
    extra = (settings.get("extra_buffer_types") or {}).get("extra_in_use") or []
    if not extra:
        return Fact("as stored", "no extra buffer types in use (weights as the file stores them)",
                    log)  # fmt: skip
    requested = (settings.get("extra_buffer_types") or {}).get("requested", True)
    return Fact(f"repacked: {', '.join(extra)}",
                f"model buffers {', '.join(extra)}: weights repacked for this host's kernels",
                log, default=bool(requested), host_dependent=True)  # fmt: skip


def numerics(ev: dict[str, Any], dtype: str | None, types: dict[str, int]) -> Numerics:
    settings = ev.get("settings") or {}
    big = max(types.items(), key=lambda kv: kv[1])[0] if types else None
    matmul = None
    if big is not None:
        p = _MATMUL.get(big)
        matmul = Fact(p or big.lower(), f"{big} weights (×{types[big]} tensors) through the "
                      "ggml CPU backend", "the GGUF file's tensor types")  # fmt: skip
    log = str(ev.get("log_source") or _LOG)
    kv = _kv(settings, log)
    act = None
    if big is not None and (big.startswith("Q") or big.startswith("IQ")):
        said = (
            f"{big} weights: ggml's CPU dot products quantize the activations to Q8_0/Q8_K "
            "blocks (the type's vec_dot_type)"
        )
        act = Fact("i8", said, "ggml CPU backend type traits")
    attention = _attention(settings, log)
    control: dict[str, Any] = {}
    explains = []
    if dtype == "f32" and kv is not None and kv.value != "f32":
        control |= F32_KV_CONTROL
        explains.append(F32_KV_EXPLAINS)
    if dtype == "f32" and attention is not None and attention.value == FLASH_F16:
        control |= F32_ATTENTION_CONTROL
        explains.append(F32_ATTENTION_EXPLAINS)
    return Numerics(
        devices=["cpu"] + [f"gpu:{d}" for d in ev.get("layer_placement") or {} if d != "CPU"],
        matmul=matmul,
        attention=attention,
        kv_cache=kv,
        weight_layout=_layout(settings, log),
        activation_quantization=act,
        control=control,
        control_explains="; ".join(explains),
        unavailable=None if kv else "llama.cpp's log had no KV-cache line",
    )


def report(ev: dict[str, Any], dtype: str | None, types: dict[str, int]) -> StackReport:
    return StackReport(backend=backend(ev), kernels=kernels(ev, types),
                       numerics=numerics(ev, dtype, types))  # fmt: skip
