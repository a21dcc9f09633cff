"""History across runs: shown columns, picks for contended cells, the pandas table, spreads,
run-to-run steps and the history plot. Synthetic run records; no runtime."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from rtmatrix.report import history
from rtmatrix.report.views import Column, columns, row_key
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from tests.browser.runs import (
    CONTENDED_CORES,
    FIVE_ROWS,
    HISTORY_MATRIX,
    history_runs,
    sample_run,
)


def _shown(runs: list[RunRecord] | None = None) -> list[Column]:
    shown = history.shown_columns(columns(history.by_time(runs or history_runs())))
    history.attach(shown)
    return shown


def _col(cols: list[Column], runtime: str) -> Column:
    return next(c for c in cols if c.runtime == runtime)


def _cell(col: Column, dtype: str = "f32", variant: str | None = None) -> CellRecord:
    return next(
        c
        for _, c in col.cells
        if c["fixture"]["dtype"] == dtype and c["fixture"].get("variant") == variant
    )


def _number(metric: MetricRecord) -> float:
    value = metric["value"]
    assert isinstance(value, int | float)
    return value


def test_runs_are_ordered_by_time() -> None:
    runs = history_runs()
    assert [r["run_id"] for r in history.by_time(runs[::-1])] == [r["run_id"] for r in runs]


def test_one_column_per_row_from_the_newest_run_with_its_series() -> None:
    runs = history_runs()
    shown = _shown(runs)
    assert [c.runtime for c in shown] == list(FIVE_ROWS)
    assert {c.run["run_id"] for c in shown} == {runs[-1]["run_id"]}
    assert all([s.run["run_id"] for s in c.series] == [r["run_id"] for r in runs] for c in shown)
    assert _col(shown, "llama_cpp").series[0].version == "0.3.36"


def test_different_matrices_stay_side_by_side_and_a_row_without_cells_is_left_out() -> None:
    other = sample_run()
    other["cells"] = [c for c in other["cells"] if c["runtime"] != "fakert"]
    cols = columns(history.by_time([*history_runs(), other]))
    shown = history.shown_columns(cols)
    assert len(shown) == len(FIVE_ROWS) + 2  # llama_cpp and onnxruntime of the sample matrix
    assert history.left_out(cols, shown) == ["fakert"]
    alone = [c for c in shown if history.matrix_of(c.run) != HISTORY_MATRIX]
    assert all(c.series == [] for c in alone)


def test_a_contended_cell_shows_the_newest_uncontended_run() -> None:
    runs = history_runs()
    ort = _col(_shown(runs), "onnxruntime")
    newest = _cell(ort)
    assert newest["contended"]
    pick = ort.picks[newest["key"]]
    assert pick.run_id == runs[1]["run_id"] and not pick.cell.get("contended")
    assert "contended" in pick.why and runs[1]["run_id"] in pick.why
    assert newest["key"] not in _col(_shown(runs), "llama_cpp").picks  # quiet: its own cell
    for cell in runs[1]["cells"]:
        cell["contended"] = cell["contended"] or cell["runtime"] == "onnxruntime"
    assert _col(_shown(runs), "onnxruntime").picks[newest["key"]].run_id == runs[0]["run_id"]


def test_no_pick_without_an_uncontended_comparable_run() -> None:
    runs = history_runs()
    for run in runs[:2]:  # the older runs ran another fixture file
        for cell in run["cells"]:
            if cell["runtime"] == "onnxruntime":
                cell["fixture"]["sha256"] = "e" * 64
    ort = _col(_shown(runs), "onnxruntime")
    assert ort.picks == {}


def test_frame_is_one_row_per_run_cell_and_metric_with_the_samples_statistics() -> None:
    runs = history_runs()
    col = _col(_shown(runs), "llama_cpp")
    table = history.frame(col.series)
    assert set(history.CELL_COLUMNS) <= set(table.columns)
    pp = table[(table["metric"] == "pp_tps") & (table["label"] == "tiny/f32")]
    assert list(pp["version"]) == ["0.3.36", "0.3.36", "0.3.40"]
    metric = _cell(col)["metrics"]["pp_tps"]
    last = pp.iloc[-1]
    assert last["median"] == pytest.approx(metric["value"])
    assert last["n"] == len(metric["samples"]) == 5
    s = np.asarray(metric["samples"])
    assert last["cv"] == pytest.approx(s.std(ddof=1) / s.mean())
    rss = table[(table["metric"] == "peak_rss_os_bytes")]
    assert rss["n"].eq(1).all() and rss["cv"].isna().all()  # one value: no spread, never 0
    ort = history.frame(_col(_shown(runs), "onnxruntime").series)
    busy = ort[ort["contended"]]
    assert set(busy["run_id"]) == {runs[-1]["run_id"]}
    assert busy["busy_cores"].eq(CONTENDED_CORES).all()


def test_spreads_within_the_run_and_from_run_to_run() -> None:
    runs = history_runs()
    shown = _shown(runs)
    llama = _col(shown, "llama_cpp")
    cell = _cell(llama)
    sp = llama.spreads[(row_key(cell), "pp_tps")]
    samples = cell["metrics"]["pp_tps"]["samples"]
    assert sp.within_cv == pytest.approx(statistics.stdev(samples) / statistics.mean(samples))
    medians = [_number(_cell(c)["metrics"]["pp_tps"]) for c in llama.series]
    assert sp.n_runs == 3 and sp.run_medians == pytest.approx(medians)
    assert sp.between_cv == pytest.approx(statistics.stdev(medians) / statistics.mean(medians))
    assert sp.swing == sp.between_cv
    ort = _col(shown, "onnxruntime")
    ort_sp = ort.spreads[(row_key(cell), "pp_tps")]
    assert ort_sp.n_runs == 2  # the contended run is not part of its run-to-run spread
    only = history.shown_columns(columns([runs[0]]))
    history.attach(only)
    one = _col(only, "llama_cpp").spreads[(row_key(cell), "pp_tps")]
    assert one.between_cv is None and one.within_cv is not None and one.swing == one.within_cv


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
    table = history.frame(col.series)
    found = history.steps(col.series)
    lines = {(ln.label, ln.metric): ln for ln in history._lines(col.series, table, found)}
    q8_tg = lines[("tiny/q8_0", "tg_tps")].points
    assert [p.mark for p in q8_tg] == ["", "", "-"]
    assert q8_tg[-1].lo <= q8_tg[-1].median <= q8_tg[-1].hi
    ort = _col(_shown(), "onnxruntime")
    ort_lines = history._lines(ort.series, history.frame(ort.series), history.steps(ort.series))
    pp = next(ln for ln in ort_lines if ln.metric == "pp_tps").points
    assert [p.contended for p in pp] == [False, False, True]
    assert all(p.comparable for p in pp)  # contention is not a broken line


def test_cv_needs_two_values_and_a_positive_mean() -> None:
    assert history._cv([1.0]) is None
    assert history._cv([0.0, 0.0]) is None
    cv = history._cv([9.0, 11.0])
    assert cv is not None and math.isclose(cv, statistics.stdev([9, 11]) / 10)


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
    lines = history._lines(col.series, history.frame(col.series), [step])
    tg = next(ln for ln in lines if ln.metric == "tg_tps" and ln.label == "tiny/f32").points
    assert [p.mark for p in tg] == ["", "-", ""]
    view = history.view(col, 0, marks)
    assert view.steps == (step,)
    rows = {r.label: r for r in view.verdicts}
    assert all(c is None or c.mark == "" for c in rows["tiny/f32"].cells)  # not a verdict step


def test_a_comparison_side_run_is_history_but_not_the_shown_column() -> None:
    runs = history_runs()
    runs[-1]["comparison_side"] = "b"  # the newest run: a paired comparison's side (few cells)
    col = _col(_shown(runs), "llama_cpp")
    assert col.run["run_id"] == runs[-2]["run_id"]
    assert [s.run["run_id"] for s in col.series] == [r["run_id"] for r in runs]
