"""Matrix files (TOML): runtimes x fixtures x parameters -> cells."""

from __future__ import annotations

from rtmatrix.matrix.load import (
    Cell,
    FixtureEntry,
    Matrix,
    MatrixError,
    RuntimeEntry,
    key_with_target,
    load_matrix,
    options_text,
    parse_matrix,
)
from rtmatrix.matrix.targets import ClusterConfig, Target

__all__ = [
    "Cell",
    "ClusterConfig",
    "FixtureEntry",
    "Matrix",
    "MatrixError",
    "RuntimeEntry",
    "Target",
    "key_with_target",
    "load_matrix",
    "options_text",
    "parse_matrix",
]
