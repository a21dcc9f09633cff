"""The report's history view: run-to-run steps, paired comparisons' regressions, the history
plot, verdicts and table. Synthetic run records; no runtime."""

from __future__ import annotations

from rtmatrix.report import history
from rtmatrix.results import series
from rtmatrix.results.columns import Column, columns
from rtmatrix.results.records import CellRecord, RunRecord
from tests.browser.runs import FIVE_ROWS, history_runs


def _shown(runs: list[RunRecord] | None = None) -> list[Column]:
    shown = series.shown_columns(columns(series.by_time(runs or history_runs())))
    series.attach(shown)
    return shown


def _col(cols: list[Column], runtime: str) -> Column:
    return next(c for c in cols if c.runtime == runtime)


def _cell(col: Column, dtype: str = "f32", variant: str | None = None) -> CellRecord:
    return next(
        c
        for _, c in col.cells
        if c["fixture"]["dtype"] == dtype and c["fixture"].get("variant") == variant
    )


def test_steps_mark_regressions_verdict_changes_and_contention() -> None:
    shown = _shown()
    llama = history.steps(_col(shown, "llama_cpp").series)
    by = {(s.label, s.mark): s for s in llama}
    slower = by[("tiny/q8_0", "-")]
    assert slower.order == 2 and slower.metrics == {"tg_tps": "-"} and slower.comparable
    warned = by[("tiny/f32 +truncated", "!")]
    assert warned.verdicts == "PASS (error) → WARN (error)"
    (busy,) = history.steps(_col(shown, "onnxruntime").series)
    assert busy.mark == "x" and busy.comparable and "contended" in busy.text
    (leak,) = history.steps(_col(shown, "tvm_jit").series)
    assert leak.mark == "!" and "WARN" in leak.verdicts
    assert history.steps(_col(shown, "onnxruntime_genai").series) == []


def test_a_changed_fixture_breaks_the_line() -> None:
    runs = history_runs()
    for cell in runs[1]["cells"]:
        if cell["runtime"] == "tvm_aot":
            cell["fixture"]["sha256"] = "f" * 64
    col = _col(_shown(runs), "tvm_aot")
    marks = [(s.order, s.mark, s.comparable) for s in history.steps(col.series)]
    assert marks == [(1, "x", False), (2, "x", False)]
    view = history.view(col, 0)
    assert view.plot.svg is not None


def test_history_view_plot_verdicts_and_table() -> None:
    runs = history_runs()
    shown = _shown(runs)
    views = history.views(shown)
    assert [v.runtime for v in views] == list(FIVE_ROWS)
    llama = views[0]
    assert [r.version for r in llama.runs] == ["0.3.36", "0.3.36", "0.3.40"]
    svg = llama.plot.svg or ""
    assert "0.3.36" in svg and "0.3.40" in svg  # versions on the axis, as text
    assert "contended (not comparable)" in svg
    rows = {r.label: r for r in llama.verdicts}
    trunc = rows["tiny/f32 +truncated"].cells
    assert [c.verdict for c in trunc if c] == ["PASS", "PASS", "WARN"]
    assert trunc[-1] is not None and trunc[-1].mark == "!"
    assert "not for the expected reason" in trunc[-1].title
    n_figures = sum(1 for r in llama.table.rows)
    # 3 runs × (2 measured cells × 6 figures + the failed cell's peak RSS); no unavailable one
    assert n_figures == 3 * (2 * 6 + 1)
    assert views[1].runs[-1].contended == 1


def test_history_points_carry_contention_and_marks() -> None:
    col = _col(_shown(), "llama_cpp")
    table = series.frame(col.series)
    found = history.steps(col.series)
    lines = {(ln.label, ln.metric): ln for ln in history._lines(col.series, table, found)}
    q8_tg = lines[("tiny/q8_0", "tg_tps")].points
    assert [p.mark for p in q8_tg] == ["", "", "-"]
    assert q8_tg[-1].lo <= q8_tg[-1].median <= q8_tg[-1].hi
    ort = _col(_shown(), "onnxruntime")
    ort_lines = history._lines(ort.series, series.frame(ort.series), history.steps(ort.series))
    pp = next(ln for ln in ort_lines if ln.metric == "pp_tps").points
    assert [p.contended for p in pp] == [False, False, True]
    assert all(p.comparable for p in pp)  # contention is not a broken line


def test_a_paired_comparisons_regression_is_a_step_at_its_candidate_run() -> None:
    runs = history_runs()
    col = _col(_shown(runs), "onnxruntime_genai")
    cell = _cell(col)
    doc = {
        "format": "rtmatrix-compare",
        "settings": {"runs": {"b": f"/nowhere/{runs[1]['run_id']}-b.json"}},
        "decisions": {"checks": [
            {"cell": cell["key"], "metric": "tg_tps", "verdict": "regression", "ratio": 0.9,
             "ci": [0.85, 0.95], "k": 12},
            {"cell": cell["key"], "metric": "pp_tps", "verdict": "inconclusive", "k": 12},
        ]},
    }  # fmt: skip
    marks = history.paired_marks(doc, "upgrade/index.html")
    assert [(m.run_id, m.metric) for m in marks] == [(runs[1]["run_id"], "tg_tps")]
    assert history.steps(col.series) == []  # nothing moved run to run
    (step,) = history.steps(col.series, marks)
    assert (step.order, step.mark, step.source, step.link) == (1, "-", "paired", marks[0].link)
    assert step.metrics == {"tg_tps": "-"} and "ratio 0.900 [0.850, 0.950]" in step.text
    lines = history._lines(col.series, series.frame(col.series), [step])
    tg = next(ln for ln in lines if ln.metric == "tg_tps" and ln.label == "tiny/f32").points
    assert [p.mark for p in tg] == ["", "-", ""]
    view = history.view(col, 0, marks)
    assert view.steps == (step,)
    rows = {r.label: r for r in view.verdicts}
    assert all(c is None or c.mark == "" for c in rows["tiny/f32"].cells)  # not a verdict step
