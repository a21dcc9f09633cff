"""TVM's (Relax VM's) error messages and our TVM adapter's own refusals -> error kinds."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.DYNAMIC_SHAPE, r"match_cast error|shape\[\d+\] mismatch to specified constant"),
    (ErrorKind.UNSUPPORTED_OP, r"Cannot find ffi::Function"),
    (ErrorKind.MISSING_TENSOR, r"Cannot find parameter in cache"),
    (ErrorKind.CONTEXT_LENGTH, r"exceeds the \d+ positions this library was built for"),
    (ErrorKind.BAD_FILE, r"differs from the artifact manifest"),
)
