"""The report's stack view: differences, not repetitions — a layer value the row's cells share
is one line naming how many share it, and a cell with another value has its own line."""

from __future__ import annotations

import copy
from typing import Any

from rtmatrix.report import stack
from rtmatrix.report.views import Item, Notes
from rtmatrix.results.columns import columns
from rtmatrix.results.records import RunRecord
from tests.browser.runs import as_run, sample_run


def _rows(run: RunRecord, runtime: str = "fakert") -> dict[str, list[Item]]:
    cols = columns([run])
    i = [c.runtime for c in cols].index(runtime)
    return {r.label: r.entries[i] for r in stack.rows(cols, Notes())}


def test_a_layer_value_the_cells_share_is_one_line() -> None:
    rows = _rows(sample_run())
    (fmt,) = rows["format"]
    assert fmt.label == "all 2 cells" and fmt.parts[0].value.text == "GGUF; version 3; F32×75"
    assert fmt.title == "tiny/f32, tiny/q8_0"  # which cells, on hover
    (runtime,) = rows["runtime"]
    assert runtime.parts[0].value.text == "fakert 1.0.0"


def test_a_cell_with_another_value_keeps_its_own_line() -> None:
    ok, fb = rows = _rows(sample_run())["kernels"]
    assert (ok.label, fb.label) == ("tiny/f32", "tiny/q8_0")
    assert fb.parts[0].value.css == "v-FAIL" and "kernel-level fallback" in fb.parts[0].value.text
    assert len(rows) == 2


def test_details_that_differ_under_one_shown_value_are_named_on_hover() -> None:
    run: dict[str, Any] = copy.deepcopy(dict(sample_run()))
    fakert = [c for c in run["cells"] if c["runtime"] == "fakert"]
    fakert[1]["evidence"]["stack"]["format"] = fakert[0]["evidence"]["stack"]["format"] | {
        "file": "/elsewhere/model.gguf"
    }
    (fmt,) = _rows(as_run(run))["format"]
    assert fmt.label == "all 2 cells"
    assert fmt.parts[0].value.title.endswith("— tiny/f32; details differ for tiny/q8_0")
