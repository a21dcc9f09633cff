"""The OpenVINO row's home report (``runtimes/openvino/stack.py``) from its evidence: a
decompressed quantized file is a kernel-level fallback, and the effective matmul precision is
read from the runtime model and the compiled model's hint — both host branches."""

from __future__ import annotations

from typing import Any

import pytest

from rtmatrix.numerics import judged_as
from rtmatrix.runtimes.openvino import stack


def ev(hint: str, fc: dict[str, int], asked: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "device": "CPU",
        "settings": {
            "asked": asked or {"INFERENCE_NUM_THREADS": 2},
            "compiled_model": {
                "INFERENCE_PRECISION_HINT": hint,
                "EXECUTION_DEVICES": ["CPU"],
                "DYNAMIC_QUANTIZATION_GROUP_SIZE": 32,
            },
        },
        "runtime_model": {"source": "rt", "layers": {"FullyConnected": fc}, "primitives": {}},
    }


@pytest.mark.parametrize(
    ("layers", "fallback"),
    [({"f32": 8}, True), ({"bf16": 8}, True), ({"i4": 8}, False)],
)
def test_decompressed_weights_of_a_quantized_file_are_a_kernel_fallback(
    layers: dict[str, int], fallback: bool
) -> None:
    got = stack.report(ev("f32", layers), "int4w").kernels
    assert bool(got.get("fallback")) is fallback


def test_bf16_by_default_on_this_host_is_reported_with_its_control() -> None:
    num = stack.report(ev("<Type: 'bfloat16'>", {"bf16": 8}), "f32").numerics
    assert num.devices == ["cpu"]
    assert num.matmul is not None and num.matmul.value == "bf16" and num.matmul.host_dependent
    assert "8 at bf16" in num.matmul.said and "INFERENCE_PRECISION_HINT = bf16" in num.matmul.said
    assert num.control == {"inference_precision": "f32"}
    assert judged_as("f32", num, "openvino").judged_as == "bf16"
    assert any("INFERENCE_PRECISION_HINT" in line for line in num.host_changed())


def test_f32_on_an_avx2_host_or_when_asked_needs_no_control() -> None:
    plain = stack.report(ev("f32", {"f32": 8}), "f32").numerics
    assert plain.matmul is not None and plain.matmul.value == "f32" and not plain.control
    assert not judged_as("f32", plain).downgraded
    asked = stack.report(ev("f32", {"f32": 8}, {"INFERENCE_PRECISION_HINT": "f32"}), "f32")
    assert asked.numerics.matmul is not None and not asked.numerics.matmul.default


def stateful(kv: str, asked: dict[str, Any] | None = None) -> dict[str, Any]:
    """The evidence of a stateful IR (OpenVINO's exporter's) whose cache is kept in ``kv``."""
    out = ev("f32", {"f32": 8}, asked or {"INFERENCE_PRECISION_HINT": "f32"})
    out["settings"]["compiled_model"]["KV_CACHE_PRECISION"] = kv
    return out | {"stateful": True}


def test_an_explicit_cache_is_f32_whatever_the_property_says() -> None:
    plain = ev("f32", {"f32": 8})
    plain["settings"]["compiled_model"]["KV_CACHE_PRECISION"] = "<Type: 'uint8_t'>"
    kv = stack.report(plain, "f32").numerics.kv_cache
    assert kv is not None and kv.value == "f32" and "stateful models only" in kv.said


def test_a_stateful_models_cache_is_its_kv_cache_precision_u8_by_default() -> None:
    num = stack.report(stateful("<Type: 'uint8_t'>"), "f32").numerics
    assert num.kv_cache is not None and num.kv_cache.value == "u8" and num.kv_cache.default
    assert num.control == {"kv_cache_precision": "f32"}
    assert "KV_CACHE_PRECISION" in num.control_explains
    assert judged_as("f32", num, "openvino").judged_as == "kv-q8"


def test_a_stateful_models_cache_at_f32_as_asked_needs_no_control() -> None:
    asked = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    num = stack.report(stateful("<Type: 'float32'>", asked), "f32").numerics
    assert num.kv_cache is not None and num.kv_cache.value == "f32" and not num.kv_cache.default
    assert not num.control and not judged_as("f32", num).downgraded
