"""Effective numerics (``rtmatrix.numerics``): precision words, what a cell is judged as, and
both branches end to end with small fake adapters in real worker processes — one that computes
in bf16 and says so (judged as bf16, marked, control run diagnosed), one that computes in bf16
and claims f32 (wrong output: a verdict is never loosened without the runtime's word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.converters.dtypes import names as converter_dtypes
from rtmatrix.numerics import (
    OWN_QUANTIZED,
    QUANTIZED,
    Fact,
    Numerics,
    StackReport,
    judged_as,
    precision,
)
from tests.unit.test_runner import by_runtime, matrix_text, run

FIXTURES = "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"


@pytest.mark.parametrize(
    ("word", "want"),
    [("bfloat16", "bf16"), ("<Type: 'bfloat16'>", "bf16"), ("f32", "f32"), ("FP16", "f16"),
     ("u8", "u8"), ("q8_0", "i8"), ("dynamic", None)],
)  # fmt: skip
def test_a_runtimes_precision_words_are_named_one_way(word: str, want: str | None) -> None:
    assert precision(word) == want


def test_the_quantized_dtypes_are_rtmatrixs_own_and_every_converters() -> None:
    assert {"q8_0", "int8w", "as-shipped"} <= OWN_QUANTIZED
    assert {"genai-int4", "ov-int8", "mnn-q4"} <= set(converter_dtypes())
    for dtype in (*OWN_QUANTIZED, *converter_dtypes()):
        assert dtype in QUANTIZED, dtype
    assert "f32" not in QUANTIZED and "bf16" not in QUANTIZED and None not in QUANTIZED
    assert set(QUANTIZED) == OWN_QUANTIZED | set(converter_dtypes()) and len(QUANTIZED) == len(
        set(QUANTIZED)
    )
    assert judged_as("mnn-q4", _num("bf16")).judged_as == "mnn-q4"  # a quantized file's own


def _num(matmul: str | None = None, kv: str | None = None, host: bool = True) -> Numerics:
    def fact(v: str | None) -> Fact | None:
        return Fact(v, f"said {v}", "here", default=host, host_dependent=host) if v else None

    return Numerics(devices=["cpu"], matmul=fact(matmul), kv_cache=fact(kv))


def test_a_float_cell_is_judged_as_the_lowest_precision_that_ran() -> None:
    assert not judged_as("f32", None).downgraded
    assert not judged_as("f32", _num("f32", "f32")).downgraded
    j = judged_as("f32", _num("bf16"), "openvino")
    assert j.judged_as == "bf16" and "openvino computed the matmuls in bf16" in str(j.reason)
    assert "its default on this host" in str(j.reason)
    assert judged_as("f32", _num("f32", "f16", host=False)).judged_as == "f16"
    assert judged_as("f32", _num("f32", "u8")).judged_as == "kv-q8"
    assert judged_as("f32", _num("f16", "bf16")).judged_as == "bf16"
    assert judged_as("f16", _num("f16", "f16")).judged_as == "f16"
    assert not judged_as("q8_0", _num("bf16")).downgraded  # a quantized file has its own


@pytest.mark.parametrize(
    ("attention", "want"),
    [("flash (f16)", "f16"), ("standard", "f32"), ("PA", "f32"), ("bf16 SDPA", "bf16")],
)
def test_attention_naming_a_precision_counts_like_the_matmuls(attention: str, want: str) -> None:
    num = Numerics(matmul=Fact("f32", "F32 weights", "file"), attention=Fact(attention, "x", "log"),
                   kv_cache=Fact("f32", "K (f32), V (f32)", "log"))  # fmt: skip
    j = judged_as("f32", num, "rt")
    assert j.judged_as == want
    assert (j.reason is not None) == (want != "f32")
    if j.reason:
        assert "computed attention in" in j.reason


def test_the_report_survives_the_protocol_round_trip() -> None:
    rep = StackReport(backend={"a": 1}, kernels={}, numerics=_num("bf16", "f16"))
    back = StackReport.from_dict(rep.to_dict())
    assert back == rep and back.numerics.host_changed() == ["matmul: said bf16",
                                                            "kv_cache: said f16"]  # fmt: skip


def test_bf16_said_is_judged_as_bf16_marked_and_diagnosed_by_a_control(
    tmp_path: Path, repo: Path
) -> None:
    text = matrix_text("Bf16Adapter", fixtures=FIXTURES)
    cell = by_runtime(run(tmp_path, repo, text))["bf16adapter"]
    par = cell["parity"]
    assert cell["outcome"]["status"] == "ok" and cell["verdict"] == "PASS"
    assert par["numerics"]["judged_as"] == "bf16" and par["logit_tolerance"] == 0.25
    assert par["numerics"]["within_requested_tolerance"] is False  # 8 bits, not f32's
    assert "judged as bf16, not f32" in cell["numerics_mark"]
    assert cell["evidence"]["stack"]["numerics"]["host_changed"] == ["matmul: PRECISION = bf16"]
    ctl = cell["numerics_control"]
    assert ctl["options"] == {"precision": "f32"} and ctl["diagnosed"]
    assert ctl["outcome"]["status"] == "ok" and "numerics" not in ctl["parity"]
    assert "diagnosed: bf16 by default" in cell["verdict_reason"]
    assert "f32 with precision=f32 (control ok" in cell["verdict_reason"]


def test_bf16_computed_but_f32_claimed_is_wrong_output(tmp_path: Path, repo: Path) -> None:
    text = matrix_text("SilentBf16Adapter", fixtures=FIXTURES)
    cell = by_runtime(run(tmp_path, repo, text))["silentbf16adapter"]
    assert cell["outcome"]["status"] == "wrong-output" and cell["verdict"] == "FAIL"
    assert "numerics" not in cell["parity"] and "numerics_control" not in cell
