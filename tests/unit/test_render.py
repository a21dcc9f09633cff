from __future__ import annotations

import base64
import copy
import hashlib
import html as html_lib
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.names import Scenario
from rtmatrix.report import lifecycle, partitions, render_report
from rtmatrix.report.render import fmt_value, render_html
from rtmatrix.report.views import ROWS, SOURCES, Notes, Table, grid, selection
from rtmatrix.results import ranking, series
from rtmatrix.results.columns import Column, columns, scenario_of
from rtmatrix.results.records import CellRecord, RunRecord
from tests.browser.runs import (
    UNAVAILABLE_POWER,
    XSS,
    as_run,
    golden,
    history_run,
    history_runs,
    lifecycle_run,
    partition_run,
    sample_run,
    upgraded_run,
)


def _shown_cols(runs: list[RunRecord]) -> list[Column]:
    shown = series.shown_columns(columns(series.by_time(runs)))
    series.attach(shown)
    ranking.attach(shown)
    return shown


def _ids(html: str) -> Counter[str]:
    return Counter(re.findall(r'\sid="([^"]+)"', html))


def test_report_escapes_runtime_text(tmp_path: Path) -> None:
    html = render_report([sample_run()], tmp_path).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert html.count("<script") == 1  # the report's own, and nothing from the run


def test_csp_allows_only_the_reports_own_script() -> None:
    html = render_html([sample_run()])
    script = html.split("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    policy = html_lib.unescape(csp.group(1)) if csp else ""
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy


def test_report_is_self_contained() -> None:
    html = render_html([upgraded_run()], baseline=sample_run())
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', html)
    assert '<link rel="stylesheet"' not in html and "@import" not in html
    dupes = [i for i, n in _ids(html).items() if n > 1]
    assert not dupes  # inline SVGs from several figures must not share ids


def test_selection_matrix_rows_and_columns() -> None:
    run = upgraded_run()  # q4_0 fails there
    cols = columns([run])
    assert [c.runtime for c in cols] == ["llama_cpp", "fakert", "onnxruntime"]
    notes = Notes()
    rows = selection(cols, notes)
    assert [r.label for r in rows] == [label for label, _, _ in ROWS]
    by = {r.label: r.entries for r in rows}
    text = {
        k: [" ".join(p.value.text for it in e for p in it.parts) for e in v] for k, v in by.items()
    }
    assert text["max context"][0] == "1024 tokens"
    assert text["quantization"][0] == "PASS PASS FAIL"
    assert text["license"][1] == "Apache-2.0 MIT"  # differing values are all shown
    assert (
        "verbose_log" in text["debugging"][1] and "profiler: chrome-trace" in text["debugging"][1]
    )
    assert text["placement / fallback"][0] == "CPU ×5"
    assert text["placement / fallback"][1] == "in 1 of 2 cells"
    power = by["power"][1][0].parts[0].value
    assert power.text == "3.5 W" and power.mark == "≈"  # modelled, marked as such
    assert any(UNAVAILABLE_POWER in r for r in notes.reasons)
    assert any("onnxruntime is not installed" in r for r in notes.reasons)


def test_unavailable_values_have_reason_on_hover_and_in_notes() -> None:
    html = render_html([as_run(golden())])
    assert f'title="{UNAVAILABLE_POWER}' in html
    notes = re.findall(r'<li id="fn-(\d+)">([^<]*)</li>', html)
    assert any(UNAVAILABLE_POWER in text for _, text in notes)
    for number, _ in notes:
        assert f'href="#fn-{number}"' in html


def test_fixture_grid_cells_by_key_and_verdict() -> None:
    run = sample_run()
    rows = grid(columns([run]))
    assert len(rows) == 7  # fakert and onnxruntime share rows with llama_cpp
    row = next(r for r in rows if r.key == "tiny/q8_0|t2-c256-p16-g24")
    verdicts = [c[1]["verdict"] if c else None for c in row.cells]
    assert verdicts == ["PASS", "FAIL", None]
    html = render_html([run])
    assert html.count('<td class="cell v-') == len(run["cells"])
    assert (
        'data-status="fallback"' in html and "pip install &#39;rtmatrix[onnxruntime]&#39;" in html
    )


def test_plots_inline_svg_and_no_data_notes() -> None:
    html = render_html([sample_run()])
    assert {"pp-tg", "context", "cold-start"} <= set(re.findall(r'data-plot="([^"]+)"', html))
    single = render_html([as_run(golden())])  # one context depth only
    assert 'data-plot="context"' not in single and "ran at one context depth" in single


def test_plots_survive_runs_without_measurements() -> None:
    run = sample_run()
    run["cells"] = [c for c in run["cells"] if c["runtime"] == "onnxruntime"]
    html = render_html([run])
    assert "<svg" not in html
    assert html.count('class="nodata"') >= 3
    empty = copy.deepcopy(run)
    empty["cells"] = []
    assert "has no cells" in render_html([empty])


def test_plots_missing_matplotlib_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    html = render_html([sample_run()])
    assert "<svg" not in html and "plots need matplotlib" in html


def test_upgrade_view_regressions_first_and_versions() -> None:
    html = render_html([upgraded_run()], baseline=sample_run())
    assert 'id="upgrade"' in html and "0.3.36 → 0.3.40" in html
    classes = re.findall(r'<tr class="change" data-class="([^"]*)"', html)
    assert classes[0] == "!" and "x" in classes
    assert 'data-plot="upgrade"' in html
    assert 'id="upgrade"' not in render_html([upgraded_run()])


def test_evidence_panels_show_manifest_placement_provenance() -> None:
    html = render_html([sample_run()])
    assert "compiler.name" in html and "fakec" in html  # manifest, flattened
    assert "placement.detail" in html and "MatMulNBits" in html
    assert "layers on CPU" in html
    assert "8c0b3a20e8e0" in html  # commit in provenance
    assert "Segfault" in html  # stderr tail
    assert html.count('<details class="evidence"') == len(sample_run()["cells"])


def test_two_runs_of_one_matrix_show_each_row_once_with_its_history() -> None:
    a, b = sample_run(), upgraded_run()
    html = render_html([b, a])  # ordered by time, whatever the order given
    matrix = _section(html, "selection")
    assert matrix.count('<th scope="col" data-runtime="llama_cpp"') == 1
    assert f"run {b['run_id']}" in matrix and "0.3.36 → 0.3.40" in matrix
    assert len(columns([a, b])) == 6  # every run's columns still have evidence panels
    assert html.count('<details class="evidence"') == len(a["cells"]) + len(b["cells"])
    hist = _section(html, "history")
    assert hist.count('<article class="history"') == 3  # every row has cells in both runs
    assert 'data-mark="!"' in hist  # q4_0 fails in the newer run


def test_runs_of_different_matrices_stay_side_by_side() -> None:
    a, b = sample_run(), history_run(2)
    html = render_html([a, b])
    matrix = _section(html, "selection")
    assert matrix.count('<th scope="col" data-runtime="llama_cpp"') == 2
    assert 'id="history"' not in html  # one run of each matrix: no history


def test_contended_figures_are_marked_and_picked_from_an_older_run() -> None:
    runs = history_runs()
    html = render_html(runs)
    grid_ = _section(html, "fixtures")
    assert grid_.count('data-contended="true"') == 1
    assert "contended · 1.40 cores busy" in grid_
    cols = _shown_cols(runs)
    rows = {r.label: r.entries for r in selection(cols, Notes())}
    ort = [c.runtime for c in cols].index("onnxruntime")
    (item,) = rows["PP tok/s"][ort]
    assert item.label == "tiny/f32 · older run (1.22.0)" and "ran this cell contended" in item.title
    assert not any(b.css == "contended" for p in item.parts for b in p.value.badges)
    alone = _shown_cols([runs[-1]])  # no older run: the figure is shown, marked, not ranked
    rows = {r.label: r.entries for r in selection(alone, Notes())}
    (item,) = rows["PP tok/s"][ort]
    badges = [b.css for b in item.parts[0].value.badges]
    assert badges[0] == "contended" and "best" not in badges and "behind" not in badges
    ev = _section(render_html([runs[-1]]), "evidence")
    marked = re.findall(r'class="mark contended"[^>]*>contended · 1.40', ev)
    assert len(marked) == 2  # the cell's summary and its metrics' heading, not every figure
    assert re.search(r'<h4>Metrics <span class="mark contended" title="the host kept 1.40', ev)


def test_selection_shows_ranks_spreads_and_reference_ratios() -> None:
    cols = _shown_cols(history_runs())
    rows = {r.label: r.entries for r in selection(cols, Notes())}
    llama = rows["PP tok/s"][0]
    names = [p.name for p in llama[0].parts]
    assert names == ["PP", "PP ÷ llama-bench", "PP ctr", "PP ref"]
    assert [p.detail for p in llama[0].parts] == [False, False, True, True]
    pp = llama[0].parts[0].value
    assert [b.css for b in pp.badges] == ["best", "cv"]
    assert pp.badges[1].text.startswith("±") and "runs ±" in pp.badges[1].text
    assert llama[0].parts[1].value.text == "0.86×"
    genai = rows["TTFT / TPOT"][2][0].parts[0].value
    assert "tie" in [b.css for b in genai.badges]
    tvm = rows["PP tok/s"][3][0].parts[0].value
    assert "swing" in [b.css for b in tvm.badges]
    no_ref = [p.name for p in rows["PP tok/s"][4][0].parts]
    assert no_ref == ["PP", "PP ctr"]  # no reference tool: nothing made up


def test_fixture_grid_kinds_reasons_and_leaks() -> None:
    grid_ = _section(render_html(history_runs()), "fixtures")
    assert 'data-kind-ok="false"' in grid_
    assert "kind: expected bad-file · observed unclassified" in grid_
    assert "failed, but not for the expected reason" in grid_
    assert 'data-leaked="1"' in grid_ and "⚠ 1 leaked process" in grid_
    assert "PP ÷ llama-bench" in grid_ and "0.80×" in grid_


def test_evidence_lists_leaked_processes_and_tracking_escaped() -> None:
    ev = _section(render_html([history_run(2)]), "evidence")
    assert '<table class="leaked">' in ev and "&lt;script&gt;alert(1)&lt;/script&gt;" in ev
    assert XSS not in ev
    assert "nets[0]" in ev or "nets" in ev
    assert "verdict reason" in ev and "expected kind" in ev


def test_rows_without_cells_are_left_out() -> None:
    run = sample_run()
    run["cells"] = [c for c in run["cells"] if c["runtime"] != "fakert"]
    html = render_html([run])
    assert 'data-runtime="fakert"' not in _section(html, "selection")
    assert "Left out of the matrix: fakert" in html


def test_format_values() -> None:
    assert fmt_value({"value": None, "unit": "W"}) == "unavailable"
    assert fmt_value({"value": 2 * 2**20, "unit": "bytes"}) == "2.0 MiB"
    assert fmt_value({"value": 0.0012, "unit": "s"}) == "1.20 ms"
    assert fmt_value({"value": 1234.4, "unit": "tokens/s"}) == "1,234"
    assert fmt_value({"value": float("nan"), "unit": "s"}) == "nan"
    assert fmt_value({"value": 49152, "unit": "bytes"}) == "48.0 KiB"
    assert fmt_value({"value": 17, "unit": "bytes"}) == "17 B"
    assert fmt_value({"value": 8.6e-6, "unit": "s"}) == "8.6 µs"
    assert fmt_value({"value": 404, "unit": "http-status"}) == "HTTP 404"
    assert fmt_value({"value": 1.0, "unit": "tokens"}) == "1 token"
    assert fmt_value({"value": {"odd": 1}, "unit": "s"}) == "{'odd': 1}"


def test_free_form_evidence_of_unexpected_types_renders() -> None:
    run = sample_run()
    run["cells"][0]["evidence"] = {
        "layer_placement": ["CPU"],
        "devices": "CPU",
        "placement": "GPU",
        "log_excerpt": "one line",
        "warnings": {"w": 1},
        "manifest": [1, 2],
        "debug_facilities": "gdb",
        "custom": {"nested": [1, 2]},
    }
    html = render_html([run])
    assert "one line" in html and "gdb" in html and "custom" in html


# --- lifecycle panel ------------------------------------------------------------------------


def _section(html: str, name: str) -> str:
    return html.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


def _numbers_marked(table: Table) -> list[str]:
    """Cells showing a number without a source marker (plain labels carry no digits)."""
    return [
        f"{table.name}/{row.label}: {v.text}"
        for row in table.rows
        for v in row.cells
        if any(ch.isdigit() for ch in v.text) and not v.mark
    ]


def test_scenario_of_reads_the_record_then_the_metric_families() -> None:
    run = lifecycle_run()
    assert [scenario_of(c) for c in run["cells"]] == [None, "stream", "cancel", "serve", "serve"]
    assert all(isinstance(scenario_of(c), Scenario) for c in run["cells"][1:])
    plain = copy.deepcopy(run["cells"][0])
    plain["fixture"]["scenario"] = "generate"  # a record that names it wins
    assert scenario_of(plain) is None
    # the cell's own field wins over the fixture's and over its metrics
    named = copy.deepcopy(run["cells"][1]) | {"scenario": "cancel"}
    assert scenario_of(named) is Scenario.CANCEL
    assert scenario_of(named | {"scenario": "generate"}) is None
    # an older record without either: the metric families say which scenario ran
    older = copy.deepcopy(run["cells"][3])
    older.pop("scenario", None)
    older["fixture"].pop("scenario", None)
    older["metrics"]["lifecycle_checks"].pop("scenario")
    assert scenario_of(older) is Scenario.SERVE
    # no fixture-name guessing: a failed cell named "tiny-serve" with nothing recorded is plain
    gone = copy.deepcopy(run["cells"][4])
    del gone["scenario"]
    assert gone["fixture"]["name"] == "tiny-serve" and scenario_of(gone) is None


def test_lifecycle_panel_cards_tables_and_plots() -> None:
    notes = Notes()
    panel = lifecycle.panel(columns([lifecycle_run()]), notes)
    assert [c.scenario for c in panel.cards] == ["stream", "cancel", "serve", "serve"]
    stream, cancel, serve, gone = panel.cards
    assert {p.id for p in panel.plots if p.svg} == {"serve-ttft", "cancel-leak"}
    modes = cancel.tables[0]
    assert [r.data for r in modes.rows] == ["stop", "close"]
    leak = {r.data: r.cells[4] for r in modes.rows}
    assert leak["stop"].css == "v-PASS" and leak["stop"].mark == "os"
    assert leak["close"].css == "v-FAIL" and "tolerance 1.0 MiB" in leak["close"].text
    assert panel.failed_checks == 1 and cancel.verdict == "FAIL"
    levels = serve.tables[0]
    assert [r.data for r in levels.rows] == ["1", "2", "4"]
    assert levels.rows[2].cells[-1].text == "1 of 12" and levels.rows[2].cells[-1].css == "v-FAIL"
    gaps = stream.tables[0]
    assert [r.label for r in gaps.rows] == ["token gap", "chunk gap"]
    for card in (stream, cancel, serve):
        for t in card.tables:
            assert not _numbers_marked(t)
        assert all(p.value.mark for p in card.facts), card.scenario
    trace_terms = [r.cells[3].text for r in cancel.traces.rows] if cancel.traces else []
    assert "none" in trace_terms  # a trace without a terminal state is shown, flagged
    assert gone.note and "unavailable" in gone.note and not gone.tables


def test_lifecycle_section_html() -> None:
    html = render_html([lifecycle_run()])
    lc = _section(html, "lifecycle")
    assert lc.count('<article class="lifecycle"') == 4
    assert 'data-plot="serve-ttft"' in lc and 'data-plot="cancel-leak"' in lc
    assert 'data-check="cancel_close_rss_leak"' in lc and 'class="bad"' in lc
    assert "+3.6 MiB (tolerance 1.0 MiB)" in lc
    assert "HTTP 500" in lc and "no /health endpoint" in lc
    assert "request state traces" in lc
    # the selection matrix has a lifecycle row, and scenario cells leave the PP/TG row alone
    cols = columns([lifecycle_run()])
    by = {r.label: r.entries for r in selection(cols, Notes())}
    lc_items = [it.label for it in by["lifecycle"][0]]
    assert lc_items == ["stream", "cancel", "serve"]
    pp = " ".join(it.label for it in by["PP tok/s"][0])
    assert "stream" not in pp and "cancel" not in pp
    assert " ".join(p.value.text for it in by["lifecycle"][1] for p in it.parts)


def test_lifecycle_panel_survives_missing_and_odd_data() -> None:
    run = lifecycle_run()
    # made invalid on purpose: as untyped dicts
    stream, cancel, serve = cast(list[dict[str, Any]], run["cells"][1:4])
    del stream["metrics"]["stream_token_gap_p90_s"]
    stream["metrics"]["stream_ttft_s"] = 0.03  # not a metric record
    cancel["metrics"]["lifecycle_checks"]["checks"] = ["not a dict", {"ok": "maybe"}]
    cancel["metrics"]["lifecycle_checks"]["traces"] = {"not": "a list"}
    cancel["metrics"]["cancel_close_rss_growth_bytes"]["rss_after_each"] = "garbage"
    cancel["metrics"]["cancel_stop_rss_growth_bytes"].pop("tolerance_bytes")
    serve["metrics"]["serve_c2_ttft_p50_s"] = {"value": "fast", "unit": "s", "source": "?"}
    serve["metrics"]["serve_c4_errors"] = {
        "value": None,
        "unit": "requests",
        "source": "unavailable",
        "reason": "lost",
    }
    serve["metrics"].pop("lifecycle_checks")
    bare = copy.deepcopy(stream)
    bare["key"] = "llama_cpp|tiny-cancel-bare/f32|x"
    bare["fixture"]["name"] = "tiny-cancel-bare"
    bare["metrics"] = {}
    bare["scenario"] = "cancel"  # the record says what it ran: nothing else would tell
    run["cells"].append(cast(CellRecord, bare))
    html = render_html([run])
    assert "no data: the cell ended with outcome ok before the cancel scenario measured" in html
    assert "the cell recorded no stream_token_gap_p90_s" in html
    none = copy.deepcopy(run)
    none["cells"] = [none["cells"][0]]
    assert "no cell ran a lifecycle scenario" in render_html([none])


# --- partitions panel -----------------------------------------------------------------------


def test_partitions_panel_coverage_and_delegate_vs_control() -> None:
    notes = Notes()
    panel = partitions.panel(columns([partition_run()]), notes)
    assert panel.note is None and panel.coverage and panel.versus
    rows = {(r.label, r.help.split(" ")[0]): r for r in panel.coverage.rows}
    every = rows[("tiny-partition-every-layer/f32", "ort_ov")]
    assert every.cells[0].text == "5 (3 on the delegate)" and every.cells[0].mark == "an"
    assert every.cells[1].text.startswith("98.4 %")
    assert every.cells[3].text == "4.0 KiB"  # boundary bytes per prefill token
    assert rows[("tiny/f32", "ort_cpu")].cells[1].text.startswith("none")
    lonely = rows[("tiny-partition-end/f32", "ort_ov")]
    assert lonely.cells[0].mark == "ev" and lonely.cells[3].unavailable  # placement only
    versus = {r.label: r for r in panel.versus.rows}
    assert versus["tiny-partition-every-layer/f32"].css == "slower"
    assert versus["tiny-partition-every-layer/f32"].cells[-1].text == "delegate slower: PP, TG"
    assert versus["tiny/f32"].cells[-1].text == "delegate not slower"
    assert versus["tiny-partition-end/f32"].cells[-1].text == "no control"
    assert panel.slower == ["tiny-partition-every-layer/f32 (ort_ov 1.24.1): PP, TG"]
    assert not _numbers_marked(panel.coverage) and not _numbers_marked(panel.versus)
    assert [d.anchor for d in panel.details] == [every.data]
    assert any("no partition analysis" in r for r in notes.reasons)
    assert "analysis" in SOURCES


def test_partitions_section_html_and_selection() -> None:
    html = render_html([partition_run()])
    part = _section(html, "partitions")
    assert 'data-table="coverage vs boundaries"' in part
    assert 'data-table="delegate on vs off"' in part and 'class="slower"' in part
    assert "Delegate slower than its control" in part
    assert "blk.0.k.matmul" in part and "OpenVINO-EP-subgraph_1" in part
    cols = columns([partition_run()])
    by = {r.label: r.entries for r in selection(cols, Notes())}
    assert any(it.label == "partitions" for it in by["placement / fallback"][0])
    # partition variants expect ok: they count as ordinary cells in the PP/TG row
    assert "tiny-partition-every-layer" in " ".join(it.label for it in by["PP tok/s"][0])


def test_partitions_panel_survives_missing_and_odd_data() -> None:
    run = partition_run()
    ev = [c["evidence"] for c in run["cells"]]
    ev[0]["partitions"] = {"error": "RuntimeError: boom"}
    ev[1]["partitions"]["per_partition"] = ["odd", {"ep": None, "ops": "x", "time_us": 3}]
    ev[1]["partitions"]["coverage"] = None
    ev[1]["partitions"]["time_us"] = {"prefill": "soon"}
    ev[1]["partitions"]["tensors"] = [{"shape": None}]
    ev[2]["placement"] = {
        "requested": [["OpenVINOExecutionProvider", {"precision": "FP32"}]],
        "nodes_by_provider": None,
        "partitions": None,
    }
    ev[3]["partitions"] = "not a dict"
    run["cells"][4]["metrics"].pop("pp_tps")
    html = render_html([run])
    assert "partition analysis unavailable: RuntimeError: boom" in html
    assert 'id="partitions"' in html
    assert "no cell carries placement evidence" in render_html([sample_run()])
    cpu_only = partition_run()
    cpu_only["cells"] = [c for c in cpu_only["cells"] if c["runtime"] == "ort_cpu"]
    for c in cpu_only["cells"]:
        del c["evidence"]["partitions"]
    assert "no cell asked for a delegate" in render_html([cpu_only])


def test_panels_keep_ids_unique_with_two_runs() -> None:
    html = render_html([lifecycle_run(), partition_run()])
    assert not [i for i, n in _ids(html).items() if n > 1]


def test_plots_mark_contended_cells() -> None:
    from rtmatrix.report import plots

    run = history_run(2)
    cols = columns([run])
    bars = plots.throughput_by_quant(cols).svg or ""
    assert "<pattern" in bars and "contended" in plots.throughput_by_quant(cols).caption
    quiet = copy.deepcopy(run)
    for cell in quiet["cells"]:
        cell["contended"] = False
    assert "<pattern" not in (plots.throughput_by_quant(columns([quiet])).svg or "")
    assert "onnxruntime 1.22.0 (contended) · tiny/f32" in (plots.cold_start_split(cols).svg or "")


def test_a_merged_fleet_run_has_a_column_per_runtime_and_target(tmp_path: Path) -> None:
    from rtmatrix.fleet.merge import merge_runs
    from rtmatrix.results import save_run

    parts = []
    for name, arch, cpu in (("laptop", "x86_64", "Ryzen 7"), ("board", "aarch64", "Cortex-A76")):
        run = copy.deepcopy(golden())
        run["machine"] |= {"hostname": name, "arch": arch, "cpu_model": cpu}
        save_run(run, tmp_path / f"{name}.json")
        parts.append((tmp_path / f"{name}.json", None))
    cols = columns([as_run(merge_runs(parts))])
    assert [c.label.split()[0] for c in cols] == ["llama_cpp@laptop", "llama_cpp@board"]
    (row,) = [r for r in selection(cols, Notes()) if r.label == "OS / chip"]
    chips = [" ".join(p.value.text for it in e for p in it.parts) for e in row.entries]
    assert "x86_64 · Ryzen 7" in chips[0] and "aarch64 · Cortex-A76" in chips[1]
    assert "aarch64 · Cortex-A76" in render_html([as_run(merge_runs(parts))])


def test_a_comparisons_two_sides_stay_side_by_side(tmp_path: Path) -> None:
    from rtmatrix.report.render import render_comparison
    from tests.unit.test_upgrade import regression_doc, side_runs

    html = render_comparison(regression_doc(), side_runs(), tmp_path).read_text("utf-8")
    heads = re.findall(r'<th scope="col" data-runtime="([^"]+)"', _section(html, "selection"))
    assert len(heads) == 2 * len(set(heads))  # each row once per side
    assert 'id="history"' not in html  # the comparison section judges the two sides
    plain = render_html(side_runs())
    assert 'id="history"' in plain  # the same two runs, reported alone: a history


def _diagnosed_run() -> RunRecord:
    """sample_run with llama.cpp's q4_0 cell crashed and diagnosed by its control run."""
    run = sample_run()
    c = next(c for c in run["cells"] if c["runtime"] == "llama_cpp" and c["key"].count("q4_0"))
    c["outcome"] = {"status": "crash", "phase": "generate", "exit_code": -11,
                    "signal": "SIGSEGV", "message": "worker killed by SIGSEGV"}  # fmt: skip
    c["verdict"] = "FAIL"
    c["evidence"]["runtime_log_at_crash"] = {
        "lines_total": 441,
        "tail": ["[info] llama_context: n_ctx = 256", "[info] graph_reserve: last line"],
        "matching": ["[info] load_tensors: AMX model buffer size = 13.50 MiB"],
        "source": "appended as they arrived",
    }
    c["diagnosed"] = True
    c["control"] = {
        "options": {"extra_buffer_types": False},
        "explains": "llama.cpp's extra buffer types",
        "outcome": {"status": "ok", "message": "completed"},
        "verdict": "PASS",
        "parity": c["parity"],
        "metrics": {"tg_tps": {"value": 654.0, "unit": "tokens/s", "source": "harness-clock"}},
        "wall_s": 2.5,
        "note": "the control's figures, not the row's",
    }
    c["verdict_reason"] = "crashes (SIGSEGV in phase 'generate') ...; runs with ..."
    return run


def test_a_diagnosed_crash_shows_its_control_log_and_the_settings_it_needed() -> None:
    run = _diagnosed_run()
    html = render_html([run])
    assert 'data-control="diagnosed"' in html
    assert "diagnosed: runs with extra_buffer_types=false" in html
    assert "Control run (diagnosed)" in html and "654" in html
    assert "AMX model buffer size = 13.50 MiB" in html and "graph_reserve: last line" in html
    notes = Notes()
    rows = {r.label: r.entries for r in selection(columns([run]), notes)}
    llama = {it.label: it.parts[0].value.text for it in rows["settings needed"][0]}
    assert llama["q4_0"] == "needs extra_buffer_types=false (crashes by default)"
    assert llama["f32"] == "defaults"


def test_a_real_model_cell_shows_its_quality_and_its_generated_text_escaped() -> None:
    run = sample_run()
    c = next(c for c in run["cells"] if c["runtime"] == "llama_cpp" and "q8_0" in c["key"])
    detail = {"text": "quality.txt", "positions": 511, "reference": "f32"}
    quality: dict[str, Any] = {  # metric records with the quality pass's detail
        "kld_mean": {"value": 0.0039, "unit": "nats", "source": "harness-comparison", **detail},
        "same_top_pct": {"value": 94.9, "unit": "%", "source": "harness-comparison", **detail},
        "ppl": {"value": 38.9, "unit": "ppl", "source": "harness-comparison", **detail},
    }
    c["metrics"] |= quality
    c["generated_text"] = {"text": "The keeper <b>wrote</b>", "tokens": 6, "how": "decoded"}
    html = render_html([run])
    assert "“The keeper &lt;b&gt;wrote&lt;/b&gt;”" in html and "<b>wrote</b>" not in html
    rows = {r.label: r.entries for r in selection(columns([run]), Notes())}
    llama = " ".join(p.value.text for it in rows["quality (real model)"][0] for p in it.parts)
    assert "0.0039" in llama and "94.9" in llama and "38.9" in llama
    fake = rows["quality (real model)"][1][0].parts[0].value
    assert fake.text == "not run" and "no real-model cell" in fake.title


def test_the_page_opens_with_the_selection_verdict() -> None:
    from tests.browser.runs import sample_run

    html = render_html([sample_run()])
    assert 'id="answer"' in html and html.index('id="answer"') < html.index('id="selection"')
    assert "Which runtime fits" in html and "<ol class=\"answer-ranked\">" in html
    assert "Constraints: peak memory" in html
