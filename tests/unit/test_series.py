"""Runs of one matrix over time: the shown columns, picks for contended cells, the pandas
history table and the spreads. Synthetic run records; no runtime."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from rtmatrix.results import series
from rtmatrix.results.columns import Column, columns, row_key
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from tests.browser.runs import (
    CONTENDED_CORES,
    FIVE_ROWS,
    HISTORY_MATRIX,
    history_runs,
    sample_run,
)


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


def _number(metric: MetricRecord) -> float:
    value = metric["value"]
    assert isinstance(value, int | float)
    return value


def test_runs_are_ordered_by_time() -> None:
    runs = history_runs()
    assert [r["run_id"] for r in series.by_time(runs[::-1])] == [r["run_id"] for r in runs]


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
    cols = columns(series.by_time([*history_runs(), other]))
    shown = series.shown_columns(cols)
    assert len(shown) == len(FIVE_ROWS) + 2  # llama_cpp and onnxruntime of the sample matrix
    assert series.left_out(cols, shown) == ["fakert"]
    alone = [c for c in shown if series.matrix_of(c.run) != HISTORY_MATRIX]
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
    table = series.frame(col.series)
    assert set(series.CELL_COLUMNS) <= set(table.columns)
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
    ort = series.frame(_col(_shown(runs), "onnxruntime").series)
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
    only = series.shown_columns(columns([runs[0]]))
    series.attach(only)
    one = _col(only, "llama_cpp").spreads[(row_key(cell), "pp_tps")]
    assert one.between_cv is None and one.within_cv is not None and one.swing == one.within_cv


def test_cv_needs_two_values_and_a_positive_mean() -> None:
    assert series._cv([1.0]) is None
    assert series._cv([0.0, 0.0]) is None
    cv = series._cv([9.0, 11.0])
    assert cv is not None and math.isclose(cv, statistics.stdev([9, 11]) / 10)


def test_a_comparison_side_run_is_history_but_not_the_shown_column() -> None:
    runs = history_runs()
    runs[-1]["comparison_side"] = "b"  # the newest run: a paired comparison's side (few cells)
    col = _col(_shown(runs), "llama_cpp")
    assert col.run["run_id"] == runs[-2]["run_id"]
    assert [s.run["run_id"] for s in col.series] == [r["run_id"] for r in runs]
