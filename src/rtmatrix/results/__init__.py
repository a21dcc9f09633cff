"""Versioned run records: JSON Schema, atomic store, migrations."""

from __future__ import annotations

from rtmatrix.results.store import (
    SCHEMA_VERSION,
    ResultError,
    load_run,
    save_run,
    validate_run,
)

__all__ = ["SCHEMA_VERSION", "ResultError", "load_run", "save_run", "validate_run"]
