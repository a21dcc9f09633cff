"""The upgrade report of a paired comparison: Markdown summary and HTML, the verdict first."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest

from rtmatrix.report.render import render_comparison, render_html
from rtmatrix.report.upgrade import comparison_view, markdown, view
from rtmatrix.results.records import RunRecord
from tests.browser.runs import XSS, sample_run, upgraded_run
from tests.helpers.comparisons import KEY, comparison, record, rounds_of


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plots are tested in test_render/test_plots; here they only cost time."""
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)


def regression_doc() -> dict[str, object]:
    crash = {"status": "crash", "verdict": "FAIL", "stderr": XSS}
    recs = list(rounds_of(12, b={"tg": 0.8})) + list(rounds_of(2, key="llama_cpp|b|c", b=crash))
    return comparison(recs).to_dict()


def side_runs() -> list[RunRecord]:
    a, b = sample_run(), upgraded_run()
    for run in (a, b):
        run["runtimes"]["never_ran"] = {"adapter": "x:Y", "distribution": None, "version": None}
    return [a, b]


def test_view_puts_new_failures_then_regressions_first_each_explained() -> None:
    v = comparison_view(regression_doc())
    assert v.result == "new-failure" and v.code == 2 and v.title == "NEW FAILURE"
    assert [f.cls for f in v.flagged] == ["!", "-"]
    assert v.flagged[1].key == KEY and "tg_tps" in v.flagged[1].what[0]
    assert v.flagged[1].sections[0][0].startswith("stack")  # the four layers explain first
    assert v.flagged[1].sections[1][0] == "phases"
    assert v.checks[0].verdict == "regression"
    with pytest.raises(ValueError, match="rtmatrix-compare"):
        comparison_view({"format": "rtmatrix-diff"})


def test_markdown_leads_with_the_verdict_and_escapes_table_pipes() -> None:
    md = markdown(regression_doc())
    lines = md.splitlines()
    assert lines[0] == "## rtmatrix compare: NEW FAILURE (exit 2)"
    assert md.index("### Regressions and new failures") < md.index("### Checks")
    assert "moved: decode" in md
    assert "llama-cpp-python 0.3.35 → 0.3.36" in md  # the changed package
    assert f"`{KEY.replace('|', chr(92) + '|')}`" in md  # pipes escaped inside the table
    assert "<script>" not in md and "&lt;script&gt;" in md  # runtime text is not raw HTML


def test_html_opens_with_the_comparison_and_leaves_out_rows_that_did_not_run(
    tmp_path: Path,
) -> None:
    doc = regression_doc()
    path = render_comparison(doc, side_runs(), tmp_path)
    html = path.read_text("utf-8")
    sections = re.findall(r'<section id="([a-z]+)"', html)
    assert sections[:2] == ["comparison", "selection"]
    assert 'data-result="new-failure"' in html
    assert html.index('data-class="!"') < html.index('data-class="-"')
    assert 'data-runtime="never_ran"' not in html  # no cells: the row did not run
    assert XSS not in html and "&lt;script&gt;" in html  # runtime text is escaped


def test_existing_upgrade_view_first_and_without_rows_that_did_not_run() -> None:
    base, cand = side_runs()
    html = render_html([cand], baseline=base)
    assert re.findall(r'<section id="([a-z]+)"', html)[:2] == ["upgrade", "selection"]
    assert "never_ran" not in html.split('<section id="runs">')[0]
    assert "never_ran" not in [name for name, _, _ in view(base, cand).versions]
    plain = render_html([copy.deepcopy(cand)])  # the plain report names the row it leaves out
    assert 'data-runtime="never_ran"' not in plain  # issue 19: rows not in the runs shown
    assert "Left out of the matrix: never_ran" in plain


def test_a_passing_comparison_says_so() -> None:
    doc = comparison([r for r in rounds_of(24, seed=3) if r.key == KEY]).to_dict()
    v = comparison_view(doc)
    assert v.result == "pass" and not v.flagged
    assert markdown(doc).startswith("## rtmatrix compare: PASS (exit 0)")
    assert record()["key"] == KEY
