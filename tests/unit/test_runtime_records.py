"""The runtimes' words in run records, read without importing a runtime."""

from __future__ import annotations

import subprocess
import sys

from rtmatrix.runtimes.llama_cpp.records import BENCH_TOOL, legacy_reference_tool
from rtmatrix.runtimes.onnxruntime.placement import CPU
from rtmatrix.runtimes.onnxruntime.records import delegates, short_name


def test_delegates_are_the_requested_providers_but_the_cpu_one() -> None:
    ov, cuda = "OpenVINOExecutionProvider", "CUDAExecutionProvider"
    assert delegates([ov, CPU, cuda]) == [ov, cuda]
    assert delegates([CPU]) == [] and delegates([]) == []


def test_short_provider_names() -> None:
    assert short_name("OpenVINOExecutionProvider") == "OpenVINO"
    assert short_name("ExecutionProvider") == "ExecutionProvider"
    assert short_name(None) == "None" and short_name("NPU") == "NPU"


def test_legacy_reference_tool_by_row() -> None:
    assert legacy_reference_tool("llama_cpp") == BENCH_TOOL == "llama-bench"
    assert legacy_reference_tool("llama_server") == "llama-bench"
    assert legacy_reference_tool("openvino") is None


def test_the_record_readers_import_no_runtime() -> None:
    code = (
        "import sys\nimport rtmatrix.report.render\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('onnxruntime', 'llama_cpp', 'openvino', 'tvm', 'onnx')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout
