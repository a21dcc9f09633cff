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
    (ErrorKind.CONTEXT_LENGTH, r"context[ _](length|size|window)|exceeds? (the )?(max|context)"),
    (ErrorKind.DYNAMIC_SHAPE, r"invalid dimensions? for input|\bshape\b.*(mismatch|expected)"),
    (
        ErrorKind.MISSING_TENSOR,
        r"missing tensor|tensor '?[\w.]+'? not found|missing (weight|initializer)",
    ),
    (ErrorKind.UNKNOWN_ARCH, r"(unknown|unsupported) (model )?arch(itecture)?\b"),
    (
        ErrorKind.UNSUPPORTED_OP,
        r"not a registered (function/)?op|unsupported op(erator)?|no kernel",
    ),
    (ErrorKind.BAD_FILE, r"invalid magic|failed to read magic|not within the file bounds"),
    (ErrorKind.BAD_FILE, r"unexpected end of (file|stream)|sha256 .* differs|not a valid"),
)
#: file paths are removed before matching: a fixture's path may spell its own variant's name
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+\-]+){2,}")


def classify_error(
    error_type: str | None,
    message: str,
    log_tail: str = "",
    patterns: Sequence[tuple[ErrorKind | str, str]] = (),
) -> ErrorKind:
    """The kind of one failure: the runtime's own ``patterns`` first, then the generic ones."""
    text = _PATH.sub("<path>", f"{error_type or ''}: {message}\n{log_tail}")
    for kind, pattern in (*patterns, *GENERIC_PATTERNS):
        if re.search(pattern, text, re.IGNORECASE | re.MULTILINE):
            return ErrorKind(kind)
    return ErrorKind.UNCLASSIFIED
