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


def test_a_utilization_reads_as_a_share_of_the_host_limit() -> None:
    from rtmatrix.report.views import Notes, share_value

    util = {"value": 0.4123, "unit": "ratio", "source": "derived",
            "versus": "this host's measured bandwidth", "limit_tps": 390.6,
            "method": "TG tok/s × bytes read per decode token ÷ bandwidth"}  # fmt: skip
    cell = cast(CellRecord, {"metrics": {"tg_bandwidth_util": util}})
    value = share_value(cell, "tg_bandwidth_util", Notes())
    assert value.text == "41 % of this host's measured bandwidth"
    assert "391 tok/s" in value.title and "bytes read per decode token" in value.title
    busy = util | {"host_limits_contended": True, "host_limits_busy_cores": 1.2}
    marked = share_value(cast(CellRecord, {"metrics": {"tg_bandwidth_util": busy}}),
                         "tg_bandwidth_util", Notes())  # fmt: skip
    assert marked.text.endswith("(limit measured on a busy host)") and "1.20 cores" in marked.title
    missing = {"value": None, "unit": "ratio", "source": "unavailable", "reason": "no limits"}
    gone = share_value(cast(CellRecord, {"metrics": {"tg_bandwidth_util": missing}}),
                       "tg_bandwidth_util", Notes())  # fmt: skip
    assert gone.unavailable and gone.title == "no limits"


def test_collapse_shows_a_shared_value_once_naming_how_many_cells_share_it() -> None:
    from rtmatrix.report.views import Item, Part, Value, collapse

    def item(label: str, text: str) -> Item:
        return Item(label, (Part("", Value(text, "harness-clock")),))

    items = [item("a/f32", "12"), item("a/q8_0", "12"), item("b/f32", "7"), item("c/f32", "12")]
    shared, alone = collapse(items, 4)
    assert (shared.label, shared.title, shared.parts) == ("3 of 4 cells", "a/f32, a/q8_0, c/f32",
                                                          items[0].parts)  # fmt: skip
    assert alone == items[2]
    (every,) = collapse(items[:2], 2)
    assert every.label == "all 2 cells"
