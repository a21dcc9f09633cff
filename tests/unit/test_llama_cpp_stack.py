"""The llama.cpp row's home report (``runtimes/llama_cpp/stack.py``) from its evidence: the
KV-cache types from its log line (f16 by default: an f32 cell is judged as f16, with the f32
KV control), the attention path as it resolved, repacked weights as a host-dependent layout."""

from __future__ import annotations

from typing import Any

from rtmatrix.numerics import judged_as
from rtmatrix.runtimes.llama_cpp import stack


def ev(
    k: str = "f16", buffers: dict[str, str] | None = None, asked: bool = False, fa: str = "auto"
) -> Any:
    extra = sorted(b for b in (buffers or {}) if b not in ("CPU", "CPU_Mapped"))
    resolved = "disabled" if fa == "off" else "enabled"
    return {
        "system_info": "CPU : AVX2 = 1 | LLAMAFILE = 1 |",
        "settings": {
            "requested": {"flash_attn": fa},
            "effective": {"flash_attn": fa, "flash_attn_resolved": resolved},
            "model_buffers": buffers or {"CPU_Mapped": "1 MiB"},
            "extra_buffer_types": {"requested": True, "extra_in_use": extra},
            "kv_cache": {
                "type_k": k,
                "type_v": k,
                "line": f"K ({k}): 1 MiB, V ({k}): 1 MiB",
                "requested": {"type_k": k} if asked else {},
            },
        },
    }


def test_an_f16_kv_cache_under_f32_weights_is_judged_as_f16_with_an_f32_control() -> None:
    num = stack.report(ev(), "f32", {"F32": 40}).numerics
    assert num.kv_cache is not None and num.kv_cache.value == "f16" and num.kv_cache.default
    assert num.attention is not None and num.attention.value == "flash (f16)"
    assert num.control == {"type_k": "f32", "type_v": "f32", "flash_attn": "off"}
    j = judged_as("f32", num, "llama_cpp")
    assert j.judged_as == "f16" and "KV cache in f16" in str(j.reason)


def test_flash_attention_under_an_f32_kv_cache_is_judged_as_f16_and_its_control_turns_it_off(
) -> None:
    # llama.cpp casts an f32 K/V to f16 for FLASH_ATTN_EXT: an f32 KV cache does not make it f32
    num = stack.report(ev("f32", asked=True), "f32", {"F32": 40}).numerics
    assert num.attention is not None and num.attention.value == "flash (f16)"
    j = judged_as("f32", num, "llama_cpp")
    assert j.judged_as == "f16" and "computed attention in f16" in str(j.reason)
    assert num.control == {"flash_attn": "off"} and "casts K/V to f16" in num.control_explains


def test_an_f32_kv_cache_is_judged_as_f32_and_quantized_weights_quantize_activations() -> None:
    num = stack.report(ev("f32", asked=True, fa="off"), "f32", {"F32": 40}).numerics
    assert num.attention is not None and num.attention.value == "standard"
    assert not judged_as("f32", num).downgraded and not num.control
    q = stack.report(ev(), "q8_0", {"Q8_0": 30, "F32": 9}).numerics
    assert q.activation_quantization is not None and q.activation_quantization.value == "i8"
    assert not q.control  # a quantized file is judged by its own tolerance


def test_repacked_weights_are_a_host_dependent_layout() -> None:
    rep = stack.report(ev(buffers={"CPU_Mapped": "1 MiB", "CPU_REPACK": "1 MiB"}), "q4_0",
                       {"Q4_0": 30})  # fmt: skip
    assert "CPU_REPACK" in rep.kernels["by_tensor_type"]["Q4_0"]
    layout = rep.numerics.weight_layout
    assert layout is not None and layout.host_dependent and "CPU_REPACK" in layout.value
