"""MNN's converter wrapper: flags from the row's options, and its log read for failure (the
converter exits 0 and says "Converted Success" only when it is)."""

from __future__ import annotations

import re

import pytest

from rtmatrix.errorkinds import classify_error
from rtmatrix.runtimes.mnn import convert
from rtmatrix.runtimes.mnn.errors import ERROR_PATTERNS


def test_flags_follow_the_options() -> None:
    assert convert.flags({}) == []
    assert convert.flags({"weight_quant_bits": 8}) == ["--weightQuantBits", "8"]
    assert convert.flags(
        {"weight_quant_bits": 4, "weight_quant_block": 32, "weight_quant_asymmetric": True}
    ) == ["--weightQuantBits", "4", "--weightQuantBlock", "32", "--weightQuantAsymmetric"]
    assert convert.flags({"weight_quant_block": 32, "fp16": True}) == ["--fp16"]


def test_bad_bits_are_refused_with_the_valid_range() -> None:
    with pytest.raises(ValueError, match=re.escape("0 (none) or 2..8")):
        convert.flags({"weight_quant_bits": 16})


LOGS = {
    "unsupported-op": "[06:47:46] :220: These Op Not Support: ONNX::RtmatrixUnknownOp\n"
    "Converted Failed!\n",
    "missing-tensor": "Check it out ==> blk.0.k.matmul has empty input, the index is 1\n"
    "Converted Success!\n",
    "bad-file": "[ERROR] Model file is not onnx model.\n"
    "[ERROR] Convert error, please check your file format.\n",
}


@pytest.mark.parametrize("kind", sorted(LOGS))
def test_the_converters_own_lines_name_the_failure_and_its_kind(kind: str) -> None:
    said = convert.problems(LOGS[kind])
    assert said, LOGS[kind]
    assert classify_error("ConvertError", "; ".join(said), "", ERROR_PATTERNS) == kind


def test_a_clean_log_has_no_problems() -> None:
    log = "Start to Convert Other Model Format To MNN Model..., target version: 3.6\n"
    assert convert.problems(log + "Converted Success!\n") == []
