"""llama-server's error lines (its log, which the adapter's errors carry) -> error kinds: the
llama.cpp library's own patterns, then the server's."""

from __future__ import annotations

from rtmatrix.outcome import ErrorKind
from rtmatrix.runtimes.llama_cpp.errors import ERROR_PATTERNS as LIBRARY_PATTERNS

ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    *LIBRARY_PATTERNS,
    (ErrorKind.BAD_FILE, r"failed to load model|error loading model"),
)
