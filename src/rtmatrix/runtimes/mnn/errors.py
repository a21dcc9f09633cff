"""MNN's own error messages (its converter's and its runtime's, as mnn 3.6 prints them here) ->
error kinds."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.UNSUPPORTED_OP, r"Op Not Support"),
    # a tensor the graph names but nothing produces: the converter warns and goes on
    (ErrorKind.MISSING_TENSOR, r"has empty input"),
    (ErrorKind.BAD_FILE, r"read onnx model failed|Model file is not onnx model"),
    (ErrorKind.BAD_FILE, r"Invalid ONNX Model|Convert error, please check your file format"),
    (ErrorKind.BAD_FILE, r"load_module_from_file failed|Invalidate buffer to create MNN Module"),
)
