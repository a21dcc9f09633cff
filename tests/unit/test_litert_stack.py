"""What the LiteRT row says it ran, from its own evidence: the weights' bits of a converter's own
quantization, and whose export wrote the KV cache (rtmatrix's or litert-torch's)."""

from __future__ import annotations

from typing import Any

import pytest

from rtmatrix.runtimes.litert import layout, stack


def evidence(made_by: str | None = None, xnnpack: bool = True) -> dict[str, Any]:
    shapes = {"made_by": made_by} if made_by else {}
    return {"settings": {"asked": {"xnnpack": xnnpack}}, "static_shapes": shapes}


@pytest.mark.parametrize(
    ("dtype", "matmul", "act"),
    [("f32", "f32", None), ("int8", "i8", "i8"), ("litert-int8", "i8", "i8"),
     ("litert-int4", "i4", "i8")],
)  # fmt: skip
def test_the_matmuls_bits_are_the_files(dtype: str, matmul: str, act: str | None) -> None:
    got = stack.numerics(evidence(layout.LITERT_TORCH), dtype)
    assert got.matmul is not None and got.matmul.value == matmul
    assert (got.activation_quantization.value if got.activation_quantization else None) == act


def test_the_kv_cache_names_the_export_that_wrote_it() -> None:
    theirs = stack.numerics(evidence(layout.LITERT_TORCH), "f32").kv_cache
    ours = stack.numerics(evidence(), "f32").kv_cache
    assert theirs is not None and theirs.source == "litert-torch export_hf"
    assert ours is not None and ours.source == "rtmatrix's .tflite export"
    assert theirs.value == ours.value == "f32"
