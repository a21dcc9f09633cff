"""ONNX Runtime's words in run records, for readers that must not import a runtime (the report).

A cell's ``evidence.partitions`` says ``role`` (delegate or control) in neutral words; a cell with
placement evidence only names the execution providers it requested, and which of those is a
delegate (an accelerator) is ORT's knowledge: every provider but the CPU one. Provider names end in
``ExecutionProvider``; the report shows them without it. Nothing here imports a runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

from rtmatrix.runtimes.onnxruntime.placement import CPU

SUFFIX = "ExecutionProvider"


def delegates(requested: Sequence[str]) -> list[str]:
    """The requested providers that are delegates, in the order asked for: all but the CPU one."""
    return [p for p in requested if p != CPU]


def short_name(provider: object) -> str:
    """``OpenVINOExecutionProvider`` -> ``OpenVINO``; a name without the suffix as it is."""
    return str(provider).removesuffix(SUFFIX) or str(provider)
