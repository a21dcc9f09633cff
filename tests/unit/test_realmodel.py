"""The real-model table that leads the report: only a real checkpoint's cells, the selection
criteria a team chooses by plus quality and the generated text, and nothing for a run without
a real model."""

from __future__ import annotations

from typing import Any

from rtmatrix.report import realmodel
from rtmatrix.report.render import render_html
from rtmatrix.report.views import Notes
from rtmatrix.results.columns import columns
from rtmatrix.results.records import RunRecord
from tests.browser.runs import sample_run


def _real_run() -> RunRecord:
    run = sample_run()
    c = next(c for c in run["cells"] if c["runtime"] == "llama_cpp" and "q8_0" in c["key"])
    c["fixture"] = c["fixture"] | {"source": "/models/SmolLM2-135M-Instruct.Q4_1.gguf"}
    detail = {"text": "quality.txt", "positions": 511}
    quality: dict[str, Any] = {  # metric records with the quality pass's detail
        "kld_mean": {"value": 0.0039, "unit": "nats", "source": "harness-comparison", **detail},
        "same_top_pct": {"value": 94.9, "unit": "%", "source": "harness-comparison", **detail},
        "ppl": {"value": 38.9, "unit": "ppl", "source": "harness-comparison", **detail},
    }
    c["metrics"] |= quality
    c["generated_text"] = {"text": "The keeper <i>wrote</i>", "tokens": 6, "how": "decoded",
                           "prompt": "the first 128 tokens of quality.txt"}  # fmt: skip
    return run


def test_the_table_reads_only_real_model_cells_with_quality_first_and_the_text_last() -> None:
    run = _real_run()
    rows = realmodel.rows(columns([run]), Notes())
    labels = [r.label for r in rows]
    assert labels == [*realmodel.CRITERIA, "generated text"]
    by = {r.label: r.entries for r in rows}
    llama_quality = " ".join(p.value.text for it in by["quality (real model)"][0] for p in it.parts)
    assert "0.0039" in llama_quality and "94.9" in llama_quality
    # the llama_cpp column's PP is its real cell's only (one entry: the q8_0 cell's)
    real = next(c for c in run["cells"] if c["fixture"].get("source"))
    assert len(by["PP tok/s"][0]) == 1
    assert by["PP tok/s"][0][0].parts[0].value.text == f"{real['metrics']['pp_tps']['value']:,.0f}"
    text = by["generated text"][0][0].parts[0].value
    assert text.text == "“The keeper <i>wrote</i>”" and "quality.txt" in text.title
    other = by["generated text"][1][0].parts[0].value  # a row with no real-model cell
    assert other.unavailable and "ran no real-model cell" in other.title


def test_the_report_leads_with_it_escaped_and_a_synthetic_run_has_none() -> None:
    html = render_html([_real_run()])
    assert html.index('id="real-model"') < html.index('id="selection"')
    assert 'id="real-model-matrix"' in html and "SmolLM2-135M-Instruct.Q4_1.gguf" in html
    assert "“The keeper &lt;i&gt;wrote&lt;/i&gt;”" in html and "<i>wrote</i>" not in html
    plain = sample_run()
    assert realmodel.rows(columns([plain]), Notes()) == []
    assert 'id="real-model"' not in render_html([plain])
