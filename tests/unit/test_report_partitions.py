"""The partitions panel's reading of the records: roles, per-partition details, pairing."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from rtmatrix.report import partitions
from rtmatrix.report.views import Notes
from rtmatrix.results.columns import columns
from rtmatrix.results.records import CellRecord, RunRecord
from tests.browser.runs import partition_run

OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"


def _cell(**evidence: Any) -> CellRecord:
    return cast(CellRecord, {"evidence": evidence})


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        ({"partitions": {"role": "delegate", "delegate": OV}}, ("delegate", OV)),
        ({"partitions": {"role": "control", "delegate": None}}, ("control", None)),
        # the neutral marker on placement-only records
        (
            {"placement": {"role": "delegate", "delegate": "NPU", "requested": [CPU]}},
            ("delegate", "NPU"),
        ),
        ({"placement": {"role": "control", "requested": [OV]}}, ("control", None)),
        # older records: ONNX Runtime's provider names
        ({"placement": {"requested": [OV, CPU]}}, ("delegate", OV)),
        ({"placement": {"requested": [[CPU, {}], [OV, {"precision": "FP32"}]]}}, ("delegate", OV)),
        ({"placement": {"requested": [CPU]}}, ("control", None)),
        ({"placement": {"requested": []}}, (None, None)),
        ({"partitions": {"role": "odd"}, "placement": "not a dict"}, (None, None)),
    ],
)
def test_role_of_reads_the_record_then_the_requested_providers(
    evidence: dict[str, Any], expected: tuple[str | None, str | None]
) -> None:
    assert partitions.role_of(_cell(**evidence)) == expected


def test_partitions_role_wins_over_placement_role() -> None:
    cell = _cell(partitions={"role": "control"}, placement={"role": "delegate", "delegate": OV})
    assert partitions.role_of(cell) == ("control", None)


def _every_layer_entry(run: RunRecord) -> partitions.Entry:
    col = next(c for c in columns([run]) if c.runtime == "ort_ov")
    anchor, cell = next((a, c) for a, c in col.cells if c["fixture"]["variant"])
    entry = partitions._entry(col, anchor, cell)
    assert entry is not None
    return entry


def test_detail_lists_partitions_and_tensors_and_says_what_it_left_out() -> None:
    run = partition_run()
    part = run["cells"][1]["evidence"]["partitions"]
    per = part["per_partition"]
    part["per_partition"] = [dict(per[i % len(per)], id=f"P{i}") for i in range(45)]
    part["tensors"] = [dict(part["tensors"][0], tensor=f"t{i}") for i in range(41)]
    part["tensors_left_out"] = 3
    detail = partitions._detail(_every_layer_entry(run), "title")
    assert detail is not None and detail.partitions and detail.tensors
    assert len(detail.partitions.rows) == partitions.MAX_ROWS
    assert (
        detail.partitions.head[1] == "EP" and detail.partitions.rows[0].cells[0].text == "OpenVINO"
    )
    assert any(r.css == "role-delegate" for r in detail.partitions.rows)
    assert len(detail.tensors.rows) == partitions.MAX_ROWS
    assert detail.left_out == "5 more partitions; 4 more boundary tensors in the cell's evidence"


def test_detail_without_partitions_or_tensors_is_none() -> None:
    run = partition_run()
    part = run["cells"][1]["evidence"]["partitions"]
    part["per_partition"], part["tensors"] = [], None
    assert partitions._detail(_every_layer_entry(run), "title") is None
    part["tensors"] = [{"tensor": "x", "shape": {"prefill": [1, 8]}, "bytes_per_token": {}}]
    detail = partitions._detail(_every_layer_entry(run), "title")
    assert detail is not None and detail.partitions is None and detail.left_out == ""
    assert detail.tensors is not None
    shapes_and_bytes = [c.text for c in detail.tensors.rows[0].cells[2:]]
    assert shapes_and_bytes == ["1×8", "?", "?", "?"]


def test_a_failed_control_is_named_as_the_reason() -> None:
    run = partition_run()
    for cell in run["cells"]:
        if cell["runtime"] == "ort_cpu":
            cell["outcome"] = {"status": "crash", "message": "SIGSEGV"}
    panel = partitions.panel(columns([run]), Notes())
    assert panel.versus is not None
    verdicts = {r.label: r.cells[-1] for r in panel.versus.rows}
    assert verdicts["tiny/f32"].text == "no control"
    assert (
        verdicts["tiny/f32"].title == "the control cell (ort_cpu 1.24.1) ended with outcome crash"
    )
    lonely = verdicts["tiny-partition-end/f32"].title
    assert (
        lonely
        == "no control cell (delegate off: CPU EP only) with this fixture and params in this run"
    )


def test_no_delegate_cell_is_a_note() -> None:
    run = partition_run()
    run["cells"] = [copy.deepcopy(c) for c in run["cells"] if c["runtime"] == "ort_cpu"]
    panel = partitions.panel(columns([run]), Notes())
    assert panel.coverage is None and panel.note is not None
    assert "no cell asked for a delegate" in panel.note
