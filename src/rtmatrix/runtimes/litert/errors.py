"""LiteRT's own error messages (ai-edge-litert 1.4 as it prints them here) -> error kinds."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    (ErrorKind.UNSUPPORTED_OP, r"unresolved custom op|Didn't find (custom|op for builtin)"),
    # the missing-tensor variant: a weight tensor with no data
    (ErrorKind.MISSING_TENSOR, r"Input tensor \d+ lacks data"),
    (ErrorKind.CONTEXT_LENGTH, r"exceeds this \.tflite's static KV cache"),
    (ErrorKind.BAD_FILE, r"not a valid Flatbuffer buffer|model identifier|Mmap of|codec can't"),
    (ErrorKind.BAD_FILE, r"Could not open|Model provided|buffer size|is empty"),
    # an empty file is no model_content at all to the Python wrapper
    (ErrorKind.BAD_FILE, r"`model_path` or `model_content` must be specified"),
    # a .tflite of neither layout the row drives (rtmatrix's own, litert-torch's): see layout.py
    (ErrorKind.BAD_FILE, r"no 'decode' signature|neither rtmatrix's 'prefill'|signature lacks"),
)
