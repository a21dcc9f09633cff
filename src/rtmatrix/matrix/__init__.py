"""Matrix files (TOML): runtimes x fixtures x parameters -> cells."""

from __future__ import annotations

from rtmatrix.matrix.load import (
    Cell,
    FixtureEntry,
    Matrix,
    MatrixError,
    RuntimeEntry,
    load_matrix,
    parse_matrix,
)

__all__ = [
    "Cell",
    "FixtureEntry",
    "Matrix",
    "MatrixError",
    "RuntimeEntry",
    "load_matrix",
    "parse_matrix",
]
