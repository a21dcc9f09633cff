"""llama.cpp's error lines (the adapter leads its errors with them) -> error kinds."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.UNKNOWN_ARCH, r"unknown model architecture"),
    (ErrorKind.MISSING_TENSOR, r"tensor '[^']+' not found|missing tensor"),
    (ErrorKind.BAD_FILE, r"not within the file bounds|invalid magic|failed to read magic"),
    (ErrorKind.OUT_OF_MEMORY, r"failed to allocate \w+ buffer|unable to allocate"),
    (ErrorKind.CONTEXT_LENGTH, r"exceeds (the )?context|context size exceeded"),
)
