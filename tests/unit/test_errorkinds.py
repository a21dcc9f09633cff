from __future__ import annotations

import pytest

from rtmatrix.errorkinds import classify_error
from rtmatrix.outcome import ErrorKind

# messages the runtimes printed on this machine (default matrix, failing fixtures)
CASES = [
    (
        "ValueError",
        "llama_model_load: error loading model: unknown model architecture: 'x'",
        "unknown-arch",
    ),
    ("ValueError", "check_tensor_dims: tensor 'blk.0.attn_k.weight' not found", "missing-tensor"),
    ("ValueError", "tensor 'blk.2.ffn_gate.weight' data is not within the file bounds", "bad-file"),
    ("ValueError", "gguf_init_from_reader: invalid magic characters: '?0Uz'", "bad-file"),
    ("ValueError", "ggml_gallocr_reserve_n_impl: failed to allocate CPU buffer", "out-of-memory"),
    ("RuntimeError", "failed:std::bad_alloc", "out-of-memory"),
    (
        "RuntimeError",
        "max_length (4096) cannot be greater than model context_length (2048)",
        "context-length",
    ),
    (
        "InvalidArgument",
        "Got invalid dimensions for input: input_ids for the following indices",
        "dynamic-shape",
    ),
    (
        "AttributeError",
        "module 'tvm.target._ffi_api' has no attribute 'llvm_get_system_cpu'",
        "unclassified",
    ),
]


@pytest.mark.parametrize(("etype", "message", "kind"), CASES)
def test_generic_patterns(etype: str, message: str, kind: str) -> None:
    assert classify_error(etype, message) == kind


def test_a_path_naming_the_variant_does_not_classify_it() -> None:
    msg = "Load model from /root/.cache/fixtures/small-onnx-f32-truncated-b5/model.onnx failed"
    assert classify_error("InvalidProtobuf", msg) is ErrorKind.UNCLASSIFIED


def test_runtime_patterns_come_first() -> None:
    patterns = [(ErrorKind.BAD_FILE, r"protobuf parsing failed")]
    assert (
        classify_error("X", "Protobuf parsing failed. bad_alloc", patterns=patterns) == "bad-file"
    )


def test_the_log_tail_is_read_too() -> None:
    assert (
        classify_error("RuntimeError", "load failed", log_tail="out of memory") == "out-of-memory"
    )
