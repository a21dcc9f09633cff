"""The evidence section, differences not repetitions: a block several cells of a row record
identically is shown once and referred to; figures unavailable for one reason share a line."""

from __future__ import annotations

import re
from typing import Any

from rtmatrix.report import evidence
from rtmatrix.report.render import render_html
from rtmatrix.report.views import Notes
from rtmatrix.results.columns import Column, columns
from tests.browser.runs import sample_run


def _fakert() -> Column:
    return next(c for c in columns([sample_run()]) if c.runtime == "fakert")


def test_blocks_in_the_order_a_cell_shows_them() -> None:
    cell = _fakert().cells[1][1]
    blocks = evidence.blocks_of(cell)
    assert blocks[:2] == ["placement", "manifest"]
    assert "stderr_tail" not in blocks  # empty: nothing to show
    assert blocks[-1] == "other:stack"  # free-form entries last


def test_a_block_two_cells_record_identically_is_shared_once() -> None:
    col = _fakert()
    shared = evidence.shared([col])
    (block,) = shared.blocks(col)  # the manifest; placement differs, the rest is short
    assert block.block == "manifest" and block.title == "Artifact manifest"
    assert block.said == "all 2 cells" and block.labels == ("tiny/f32", "tiny/q8_0")
    assert [shared.ref(a, "manifest") for a, _ in col.cells] == [block, block]
    assert shared.ref(col.cells[0][0], "placement") is None


def test_figures_unavailable_for_one_reason_share_a_line() -> None:
    why = {"value": None, "reason": "no energy source"}
    metrics: dict[str, Any] = {
        "tg_tps": {"value": 12.5, "unit": "tokens/s", "source": "harness-clock",
                   "samples": [12.0, 13.0]},
        "energy_j": why, "power_w": why,
        "ttft_s": {"value": None, "reason": "no counted repetition finished"},
        "energy_decode_j": why,
    }  # fmt: skip
    rows = evidence.metric_rows(metrics, Notes())
    assert [r.names for r in rows] == [
        ("tg_tps",),
        ("energy_j", "power_w", "energy_decode_j"),
        ("ttft_s",),
    ]
    assert rows[0].samples == "12, 13" and rows[1].value.title == "no energy source"


def test_the_page_shows_a_shared_block_once_and_links_to_it() -> None:
    html = render_html([sample_run()])
    ev = html[html.index('<section id="evidence">') :]
    first = _fakert().cells[0][0]
    (shared_id,) = re.findall(rf'<details class="evidence-shared" id="({first}-shared-\d+)"', ev)
    assert ev.count(f'href="#{shared_id}"') == 2  # each of the two cells refers to it
    assert ev.count("compiler.name") == 1  # the manifest, flattened, once
    assert html.count('<details class="evidence"') == len(sample_run()["cells"])
