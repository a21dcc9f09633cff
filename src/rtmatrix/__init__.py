"""rtmatrix: an acceptance-matrix test harness for on-device LLM runtimes."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
