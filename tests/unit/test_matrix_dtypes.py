"""Which dtypes a row may take for a fixture: a converter's own quantization on its own rows and
checkpoints only, rtmatrix's own weight-only dtypes on rtmatrix's own models only; each refusal
names the dtype the row does take."""

from __future__ import annotations

import pytest

from rtmatrix.fixtures import all_dtypes
from rtmatrix.matrix.dtypes import Row, problem, unknown, valid

HF = "smollm2-135m-hf"
GENAI = Row("onnxruntime", "ort_genai")
OV = Row("openvino", "optimum_intel")
MNN = Row("mnn_llm", "mnn_llmexport")
GGUF = Row("llama_cpp", "llama_cpp")
NONE = Row("mnn", None)


def test_valid_dtypes_are_rtmatrixs_own_then_every_converters() -> None:
    names = valid()
    assert names[: len(all_dtypes())] == all_dtypes()
    assert {"genai-int4", "genai-int8", "ov-int8", "ov-int4", "mnn-q8", "mnn-q4"} <= set(names)
    assert len(set(names)) == len(names)


def test_an_unknown_dtype_gets_the_closest_name_and_the_valid_list() -> None:
    assert unknown(["f32", "mnn-q4"]) is None
    got = unknown(["genai_int4", "q2_k"]) or ""
    assert got.startswith("unknown dtype 'genai_int4'; did you mean 'genai-int4'?")
    assert "valid: f32, f16, q8_0, q4_0" in got and got.endswith("(unknown too: 'q2_k')")


@pytest.mark.parametrize(
    ("dtype", "row"),
    [("genai-int4", GENAI), ("ov-int8", OV), ("mnn-q8", MNN), ("f32", OV), ("q8_0", OV),
     ("int8w", NONE)],
)  # fmt: skip
def test_a_converters_dtype_on_its_own_rows_and_a_plain_one_anywhere_is_fine(
    dtype: str, row: Row
) -> None:
    assert problem(dtype, HF, True, row) is None


def test_a_converters_dtype_on_another_converters_row_says_which_one_it_takes() -> None:
    why = problem("genai-int4", HF, True, OV, ["onnxruntime", "onnxruntime_genai"])
    assert why == (
        "'genai-int4' is converter ort_genai's own quantization (onnxruntime_genai.models.builder "
        "--precision int4); row 'openvino' is fed by converter optimum_intel; did you mean "
        "'ov-int4'? valid: f32, f16, ov-int8, ov-int4; or give this fixture runtimes = "
        "['onnxruntime', 'onnxruntime_genai']"
    )
    why = problem("mnn-q8", HF, True, GGUF)
    assert why is not None and "row 'llama_cpp' is fed by converter llama_cpp" in why
    assert why.endswith("valid: f32, f16, q8_0, q4_0")


def test_a_converters_dtype_on_a_row_without_a_converter_names_the_rows_it_feeds() -> None:
    why = problem("mnn-q4", HF, True, NONE, ["mnn_llm"])
    assert why is not None
    assert why.endswith("row 'mnn' takes no converter's file; or give this fixture runtimes = "
                        "['mnn_llm']")  # fmt: skip


def test_a_converters_dtype_on_rtmatrixs_own_model_means_its_own_weight_only_one() -> None:
    why = problem("genai-int4", "tiny", False, GENAI)
    assert why is not None and "model 'tiny' is written by rtmatrix's own exporters" in why
    assert "did you mean 'int4w'?" in why and "valid: f32, f16, q8_0, q4_0" in why
    assert "did you mean 'int8w'?" in (problem("ov-int8", "tiny", False, OV) or "")


def test_rtmatrixs_weight_only_dtype_on_a_converted_checkpoint_means_the_converters() -> None:
    why = problem("int8w", HF, True, MNN)
    assert why == (
        "'int8w' is rtmatrix's own ONNX writer's weight-only int8 (for its seeded models); model "
        "'smollm2-135m-hf' reaches row 'mnn_llm' through converter mnn_llmexport, whose "
        "quantization has a name of its own; did you mean 'mnn-q8'? valid: f16, mnn-q8, mnn-q4"
    )
    assert "did you mean 'genai-int4'?" in (problem("int4w", HF, True, GENAI) or "")
    assert "valid: f32, f16, q8_0, q4_0" in (problem("int4w", HF, True, GGUF) or "")
    assert problem("int4w", "tiny", False, GENAI) is None  # rtmatrix's own ONNX writer's
