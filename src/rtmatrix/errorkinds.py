"""Error-kind classification: a runtime's exception and message -> an :class:`ErrorKind`.

Each runtime's home adds its own patterns (``Adapter.error_patterns``: the messages that runtime
really prints), which are tried before the generic ones here. Patterns are regular expressions
matched case-insensitively against ``"<ExceptionType>: <message>\\n<log tail>"``; the first
match wins. A message nothing matches is ``unclassified`` — its own visible kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rtmatrix.outcome import ErrorKind

#: (kind, pattern) pairs every runtime shares
GENERIC_PATTERNS: tuple[tuple[ErrorKind, str], ...] = (
    (ErrorKind.OUT_OF_MEMORY, r"^MemoryError\b|bad_alloc|out of memory|cannot allocate memory"),
    (ErrorKind.OUT_OF_MEMORY, r"failed to allocate|unable to allocate|mmap failed|failed to mmap"),
    (ErrorKind.CONTEXT_LENGTH, r"context (length|size|window)|exceeds? (the )?(max|context)"),
    (ErrorKind.DYNAMIC_SHAPE, r"\bshape\b.*(mismatch|expected|invalid)|invalid dimensions?"),
    (ErrorKind.MISSING_TENSOR, r"missing tensor|tensor .* not found|missing (weight|initializer)"),
    (ErrorKind.UNKNOWN_ARCH, r"(unknown|unsupported) (model )?arch(itecture)?\b"),
    (ErrorKind.UNSUPPORTED_OP, r"not (implemented|supported)|unsupported op|no kernel|opset"),
    (ErrorKind.BAD_FILE, r"invalid (magic|file|model|protobuf)|corrupt|truncated|failed to load"),
    (ErrorKind.BAD_FILE, r"unexpected end|not a valid|checksum|sha256"),
)


def classify_error(
    error_type: str | None,
    message: str,
    log_tail: str = "",
    patterns: Sequence[tuple[ErrorKind | str, str]] = (),
) -> ErrorKind:
    """The kind of one failure: the runtime's own ``patterns`` first, then the generic ones."""
    text = f"{error_type or ''}: {message}\n{log_tail}"
    for kind, pattern in (*patterns, *GENERIC_PATTERNS):
        if re.search(pattern, text, re.IGNORECASE | re.MULTILINE):
            return ErrorKind(kind)
    return ErrorKind.UNCLASSIFIED
