"""Runtime adapters: one abstract base class, a lazy registry, the capability protocols.

The built-in adapters live in ``rtmatrix.runtimes.<name>``, one folder per runtime.
"""

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
from rtmatrix.adapters.capabilities import (
    Abortable,
    Placement,
    ReferenceBenchmark,
    ServerDriver,
    ServerLaunch,
    Serving,
    StreamBackend,
    Streaming,
)

__all__ = [
    "BUILTIN_ADAPTERS",
    "Abortable",
    "Adapter",
    "AdapterError",
    "LoadParams",
    "Placement",
    "ReferenceBenchmark",
    "RuntimeUnavailable",
    "ServerDriver",
    "ServerLaunch",
    "Serving",
    "StreamBackend",
    "Streaming",
    "load_adapter_class",
    "resolve_adapter",
]
