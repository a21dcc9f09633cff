"""OpenVINO's own error messages -> error kinds (as openvino 2026.4 prints them here)."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    # a static input dimension the call does not match (the fixed-shape fixture)
    (ErrorKind.DYNAMIC_SHAPE, r"input tensor size is not equal to the model input type"),
    (ErrorKind.DYNAMIC_SHAPE, r"model input \(shape=.*\) and the tensor .* are incompatible"),
    # a static-shape file made stateful (OpenVINO GenAI's conversion): the cache state cannot
    # grow past the file's fixed dimensions
    (ErrorKind.DYNAMIC_SHAPE, r"input_shape\.compatible\(variable_shape\)"),
    (ErrorKind.UNSUPPORTED_OP, r"No conversion rule found for operations"),
    (ErrorKind.UNSUPPORTED_OP, r"Opset \w+ doesn't contain the operation"),
    (ErrorKind.MISSING_TENSOR, r"Input tensor isn't found for node"),
    (ErrorKind.BAD_FILE, r"Model can't be parsed|Unable to read the model|Cannot recognize input"),
    (ErrorKind.BAD_FILE, r"Incorrect weights in bin file|bin file cannot be found"),
)
