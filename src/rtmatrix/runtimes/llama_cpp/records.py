"""llama.cpp's words in run records, for readers that must not import a runtime (the report).

A measured reference figure (``pp_tps_reference``, ``tg_tps_reference``) names the tool that
measured it (``tool``, from :meth:`rtmatrix.runtimes.llama_cpp.reftool.BenchResult.evidence`). An
unavailable one (the tool could not be built or run) names none: for those the tool is known only
from the row, llama-bench for the llama.cpp rows (``llama_cpp``, ``llama_server``). Nothing here
imports a runtime.
"""

from __future__ import annotations

BENCH_TOOL = "llama-bench"


def legacy_reference_tool(runtime: str) -> str | None:
    """The reference tool of a cell whose figures do not name it: llama-bench for a llama.cpp row
    (its name starts with ``llama``), else ``None``."""
    return BENCH_TOOL if runtime.startswith("llama") else None
