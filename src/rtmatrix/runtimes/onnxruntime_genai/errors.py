"""onnxruntime-genai's error messages -> error kinds: its own, then ONNX Runtime's (which it
wraps: a model ORT refuses comes back with ORT's message)."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind
from rtmatrix.runtimes.onnxruntime.errors import ERROR_PATTERNS as ORT_PATTERNS

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.CONTEXT_LENGTH, r"max_length \(\d+\) cannot be greater than model context_length"),
    *ORT_PATTERNS,
)
