"""Deprecated path of :mod:`rtmatrix.runtimes.tvm.adapter`, where it moved.

Importing it warns (DeprecationWarning) and gives the same objects; kept for one release."""

from __future__ import annotations

from typing import Any

from rtmatrix.adapters._moved import warn_moved
from rtmatrix.runtimes.tvm import adapter as _new
from rtmatrix.runtimes.tvm.adapter import *  # noqa: F403

warn_moved(__name__)


def __getattr__(name: str) -> Any:
    """The moved module's other names (private ones too), for code that reached them."""
    return getattr(_new, name)
