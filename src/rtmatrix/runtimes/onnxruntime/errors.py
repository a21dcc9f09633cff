"""ONNX Runtime's own error messages -> error kinds (as ORT 1.32 prints them here)."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.DYNAMIC_SHAPE, r"Got invalid dimensions for input"),
    (ErrorKind.UNSUPPORTED_OP, r"is not a registered function/op|ValidateOpsetForDomain"),
    (ErrorKind.UNSUPPORTED_OP, r"only \*guarantees\* support for models stamped with"),
    (ErrorKind.MISSING_TENSOR, r"is not a graph input, initializer, or output of a previous node"),
    (ErrorKind.BAD_FILE, r"Protobuf parsing failed|No graph was found in the protobuf"),
)
