from __future__ import annotations

import base64
import copy
import hashlib
import html as html_lib
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from rtmatrix.report import render_report
from rtmatrix.report.render import fmt_value, render_html
from rtmatrix.report.views import ROWS, Notes, columns, grid, selection
from tests.browser.runs import UNAVAILABLE_POWER, golden, sample_run, upgraded_run


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
    html = render_html([golden()])
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
    single = render_html([golden()])  # one context depth only
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


def test_two_runs_side_by_side() -> None:
    a, b = sample_run(), upgraded_run()
    html = render_html([a, b])
    assert html.count('data-runtime="llama_cpp"') == 2
    assert f"run {b['run_id']}" in html
    assert len(columns([a, b])) == 6


def test_format_values() -> None:
    assert fmt_value({"value": None, "unit": "W"}) == "unavailable"
    assert fmt_value({"value": 2 * 2**20, "unit": "bytes"}) == "2.0 MiB"
    assert fmt_value({"value": 0.0012, "unit": "s"}) == "1.20 ms"
    assert fmt_value({"value": 1234.4, "unit": "tokens/s"}) == "1,234"
    assert fmt_value({"value": float("nan"), "unit": "s"}) == "nan"


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
