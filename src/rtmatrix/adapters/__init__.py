"""Runtime adapters: one abstract base class, one module per runtime, a lazy registry."""

from __future__ import annotations

from rtmatrix.adapters.base import (
    BUILTIN_ADAPTERS,
    Adapter,
    AdapterError,
    LoadParams,
    RuntimeUnavailable,
    load_adapter_class,
    resolve_adapter,
)

__all__ = [
    "BUILTIN_ADAPTERS",
    "Adapter",
    "AdapterError",
    "LoadParams",
    "RuntimeUnavailable",
    "load_adapter_class",
    "resolve_adapter",
]
