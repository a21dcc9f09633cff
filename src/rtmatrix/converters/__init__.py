"""Converters: each runtime vendor's own tool from a team's checkpoint to the file its runtime
reads, one home per converter (``rtmatrix.converters.<name>``), behind :mod:`.base`.

A home module provides ``TOOL`` (the tool's name in the vendor's words), ``DISTRIBUTION`` (the PyPI
distribution that carries it), ``EXTRA`` (the rtmatrix extra that installs it; None where rtmatrix
builds its own venv), ``CONTAINER``, ``DTYPES`` (rtmatrix dtype -> the converter's own option
value) and ``convert(folder, option, root=None, log=None) -> Converted`` (the main file, its
record, the cache entry's manifest, whether this call built it). A row names its converter with the
adapter's ``converter`` class attribute; the registry below is lazy, so nothing imports a
converter's home before a cell needs it. ``rtmatrix runtimes --json`` lists each home with the rows
it feeds (what ``nox -s upgrade_diff -- <its distribution> OLD NEW`` runs).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rtmatrix.converters.base import ChildRun, Conversion, ConverterRefused, run_offline

#: converter name -> its home module, imported on first use
HOMES: dict[str, str] = {
    "llama_cpp": "rtmatrix.converters.llama_cpp",
    "ort_genai": "rtmatrix.converters.ort_genai",
    "mnn_llmexport": "rtmatrix.converters.mnn_llmexport",
    "optimum_intel": "rtmatrix.converters.optimum_intel",
    "litert_torch": "rtmatrix.converters.litert_torch",
}


def home(name: str) -> ModuleType:
    """The home module of converter ``name`` (a ``KeyError`` names the valid ones)."""
    if name not in HOMES:
        msg = f"unknown converter {name!r}; valid: {', '.join(sorted(HOMES))}"
        raise KeyError(msg)
    return importlib.import_module(HOMES[name])


__all__ = ["HOMES", "ChildRun", "Conversion", "ConverterRefused", "home", "run_offline"]
