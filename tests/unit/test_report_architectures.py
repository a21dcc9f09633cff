"""The architecture view: converted checkpoints × rows, each cell exact / differs / refused /
failed / not run, read from the records alone; nothing for a run without such a checkpoint."""

from __future__ import annotations

import copy
from typing import Any

from rtmatrix.report import architectures
from rtmatrix.report.render import render_html
from rtmatrix.results.columns import columns
from rtmatrix.results.records import CellRecord, RunRecord
from tests.browser.runs import sample_run

CONV = {"tool": "convert_hf_to_gguf.py", "distribution": "llama-cpp-python", "version": "0.3.36"}


def _cell(template: CellRecord, model: str, arch: str, **changes: Any) -> CellRecord:
    c = copy.deepcopy(template)
    c["key"] = f"{c['runtime']}|{model}/f32|t2"
    c["fixture"] = c["fixture"] | {"model": model, "name": model, "dtype": "f32",
                                   "architecture": arch, "conversion": CONV}  # fmt: skip
    c.update(changes)  # type: ignore[typeddict-item]
    return c


def _run() -> RunRecord:
    run = sample_run()
    llama = next(c for c in run["cells"] if c["runtime"] == "llama_cpp")
    agree = {"status": "measured", "conversion": {
        "changed_the_model": False, "top1_agree": 128, "top1_positions": 128,
        "max_abs_logit_diff": 3e-5, "judged_as": "f32", "logit_tolerance": 0.01}}  # fmt: skip
    differs = {"status": "measured", "conversion": {
        "changed_the_model": True, "top1_agree": 39, "top1_positions": 48,
        "max_abs_logit_diff": 2.2, "first_divergence_position": 17, "judged_as": "f32",
        "logit_tolerance": 0.01}}  # fmt: skip
    refused = {"status": "error", "phase": "convert", "charged_to": "converter",
               "message": "convert_hf_to_gguf.py refused: NotImplementedError"}  # fmt: skip
    run["cells"] = [
        _cell(llama, "qwen3-toy", "qwen3", parity=agree,
              outcome={"status": "ok", "message": "completed"}),
        _cell(llama, "gemma3-custom-toy", "gemma3_text", parity=differs,
              outcome={"status": "wrong-output", "message": "changed"}),
        _cell(llama, "qwen3-moe-toy", "qwen3_moe", parity={"status": "unavailable"},
              outcome=refused),
    ]  # fmt: skip
    run["skipped"] = [{"key": "onnxruntime|qwen3-toy/f32|t2", "reason": "names no converter"}]
    return run


def test_each_cell_says_what_the_rows_converter_and_runtime_made_of_the_checkpoint() -> None:
    view = architectures.view(columns([_run()]))
    assert view is not None
    rows = {r.model: r for r in view.rows}
    assert rows["qwen3-toy"].architecture == "qwen3"
    exact = rows["qwen3-toy"].cells["llama_cpp"]
    assert exact.state == "exact" and "top-1 128/128" in exact.text
    assert "llama-cpp-python 0.3.36" in exact.title
    differs = rows["gemma3-custom-toy"].cells["llama_cpp"]
    assert differs.state == "differs" and "39/48" in differs.text and "position 17" in differs.text
    refused = rows["qwen3-moe-toy"].cells["llama_cpp"]
    assert refused.state == "refused" and "NotImplementedError" in refused.title
    assert rows["qwen3-toy"].cells["onnxruntime"].state == "no-converter"


def test_the_report_shows_the_view_and_a_run_without_converted_models_has_none() -> None:
    html = render_html([_run()])
    assert 'id="architecture-matrix"' in html and "arch-differs" in html
    plain = sample_run()
    assert architectures.view(columns([plain])) is None
    assert 'id="architectures"' not in render_html([plain])


def test_the_selection_matrix_architecture_row_reads_the_view() -> None:
    from rtmatrix.report.views import Notes, selection

    rows = {r.label: r for r in selection(columns([_run()]), Notes())}
    texts = [p.value.text for it in rows["architecture"].entries[0] for p in it.parts]
    titles = " ".join(p.value.title for it in rows["architecture"].entries[0] for p in it.parts)
    assert any(t.startswith("gemma3_text (0/1 cells PASS)") for t in texts), texts
    assert "differs: f32: runs but differs" in titles and "refused" in titles


def test_an_engine_cell_shows_its_greedy_ids_against_transformers() -> None:
    llama = next(c for c in sample_run()["cells"] if c["runtime"] == "llama_cpp")
    ok = {"status": "measured", "tokens_agree": 16, "tokens_compared": 16,
          "all_tokens_agree": True, "judged_on": "greedy ids (an engine's own loop)"}  # fmt: skip
    part = ok | {"tokens_agree": 9, "all_tokens_agree": False}
    agree = architectures.cell_state(_cell(llama, "qwen3-toy", "qwen3", parity=ok,
                                           outcome={"status": "ok"}))  # fmt: skip
    assert agree.state == "exact" and "greedy ids 16/16 agree" in agree.text
    some = architectures.cell_state(_cell(llama, "qwen3-toy", "qwen3", parity=part,
                                          outcome={"status": "wrong-output"}))  # fmt: skip
    assert some.state == "not-judged" and "9/16" in some.text
