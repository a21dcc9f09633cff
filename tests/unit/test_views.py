"""Small readers of report/views.py."""

from __future__ import annotations

from typing import Any, cast

import pytest

from rtmatrix.report.views import SOURCES, reference_tool
from rtmatrix.results.records import CellRecord


def _ref(tool: str | None) -> dict[str, Any]:
    if tool is None:
        return {"value": None, "unit": "tokens/s", "source": "unavailable", "reason": "no cmake"}
    return {"value": 100.0, "unit": "tokens/s", "source": "reference-tool", "tool": tool}


@pytest.mark.parametrize(
    ("runtime", "pp", "tg", "expected"),
    [
        ("openvino", "benchmark_app", "benchmark_app", "benchmark_app"),
        ("llama_cpp", None, "llama-bench", "llama-bench"),  # the TG figure names it
        ("llama_cpp", None, None, "llama-bench"),  # the tool never ran: the row's home knows it
        ("llama_server", None, None, "llama-bench"),
        ("openvino", None, None, "reference tool"),
        ("mnn", "", None, "reference tool"),
    ],
)
def test_reference_tool_comes_from_the_record(
    runtime: str, pp: str | None, tg: str | None, expected: str
) -> None:
    cell = {
        "runtime": runtime,
        "metrics": {"pp_tps_reference": _ref(pp), "tg_tps_reference": _ref(tg)},
    }
    assert reference_tool(cast(CellRecord, cell)) == expected


def test_reference_tool_of_an_odd_record() -> None:
    odd = {"metrics": "odd"}
    assert reference_tool(cast(CellRecord, odd)) == "reference tool"
    no_record = {"runtime": "llama_cpp", "metrics": {"pp_tps_reference": 3}}
    assert reference_tool(cast(CellRecord, no_record)) == "llama-bench"


def test_source_legend_names_no_runtime_tool() -> None:
    assert "llama" not in SOURCES["reference-tool"][1]
