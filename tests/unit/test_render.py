from __future__ import annotations

import copy
import json
from pathlib import Path

from rtmatrix.report import render_report
from rtmatrix.report.render import fmt_value

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"


def test_report_shows_cells_sources_and_escapes(tmp_path: Path) -> None:
    run = json.loads(GOLDEN.read_text())
    bad = copy.deepcopy(run["cells"][0])
    bad["key"] = "x"
    bad["outcome"] = {"status": "error", "message": "<script>alert(1)</script>"}
    bad["parity"] = {"status": "unavailable", "reason": "cell outcome is error"}
    run["cells"].append(bad)
    html = render_report([run], tmp_path).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "llama_cpp" in html and "tiny · f32" in html and "24/24 tok" in html
    assert 'title="no energy source' in html  # unavailable power with its reason
    assert html.count("<tr class=") == 2


def test_format_values() -> None:
    assert fmt_value({"value": None, "unit": "W"}) == "unavailable"
    assert fmt_value({"value": 2 * 2**20, "unit": "bytes"}) == "2.0 MiB"
    assert fmt_value({"value": 0.0012, "unit": "s"}) == "1.20 ms"
    assert fmt_value({"value": 1234.4, "unit": "tokens/s"}) == "1,234"
