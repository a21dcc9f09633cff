"""Runs of one matrix over time: which run's figures a row shows, and how much they vary.

Runs are grouped by their matrix (the ``matrix.path`` they record) and ordered by
``created_utc``. Per group and runtime row there is one shown column: the newest run that has
cells for the row (a row without cells in any run is left out). Where that run's cell ran
``contended``, its figures are taken from the newest run of the same cell that was not, with the
same fixture content and params (``Column.picks``).

The history table is one pandas row per run × cell × metric (``frame``: median, min, max and
count of the counted repetitions, from ``rtmatrix.results.export.tidy``; version, contention,
fixture hash and verdict of the cell). From it come the spreads (``Column.spreads``): the
coefficient of variation of the shown cell's repetitions, and of its medians over the runs
where the cell was comparable (not contended, outcome ok, same fixture content). The report's
history view (:mod:`rtmatrix.report.history`) and ``rtmatrix select`` read them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from rtmatrix.metrics import registry
from rtmatrix.names import M
from rtmatrix.results.columns import Column, Pick, Spread, as_dict, fixture_label, row_key
from rtmatrix.results.export import tidy
from rtmatrix.results.records import CellRecord, RunRecord

#: the figures whose spread the selection matrix shows and the history plots follow
TRACKED = registry.ranked()


CELL_COLUMNS = (
    "run_id", "created", "order", "matrix", "runtime", "version", "key", "row", "label",
    "sha256", "contended", "busy_cores", "status", "verdict", "error_kind", "anchor",
)  # fmt: skip


STAT_COLUMNS = ("median", "min", "max", "n", "mean", "sd")


def matrix_of(run: RunRecord) -> str:
    """The matrix a run ran (its recorded path): runs of one matrix share a history."""
    return str(as_dict(run.get("matrix")).get("path") or "unknown matrix")


def by_time(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """Runs oldest first (stable for equal times)."""
    return sorted(runs, key=lambda r: str(r.get("created_utc") or ""))


# --- which column a row shows ----------------------------------------------------------------


def shown_columns(cols: Sequence[Column]) -> list[Column]:
    """One column per matrix, runtime row and target (``rtmatrix.fleet``; None for a run on one
    machine): the newest run with cells for it, its ``series``
    set to the row's columns in every run of that matrix that has cells (oldest first) when
    there are several. Rows without cells in any run are left out (``left_out``). A paired
    comparison's side run (``comparison_side``: only the cells it compared) is in the history
    but shown only when the row has no whole run."""
    groups: dict[tuple[str, str, str | None], list[Column]] = {}
    for col in cols:
        groups.setdefault((matrix_of(col.run), col.runtime, col.target), []).append(col)
    shown = []
    for series in groups.values():
        with_cells = [c for c in series if c.cells]
        if with_cells:
            whole = [c for c in with_cells if not c.run.get("comparison_side")]
            newest = (whole or with_cells)[-1]
            newest.series = with_cells if len(with_cells) > 1 else []
            shown.append(newest)
    return shown


def left_out(cols: Sequence[Column], shown: Sequence[Column]) -> list[str]:
    """Runtime rows listed by a run but without a cell in any run shown."""
    names = {c.runtime for c in shown}
    return list(dict.fromkeys(c.runtime for c in cols if c.runtime not in names))


def _comparable(cell: CellRecord, other: CellRecord) -> bool:
    fx, ofx = as_dict(cell.get("fixture")), as_dict(other.get("fixture"))
    return bool(fx.get("sha256") == ofx.get("sha256") and cell["params"] == other["params"])


def pick(col: Column, cell: CellRecord) -> Pick | None:
    """For a contended cell of the newest run: the newest uncontended run of the same cell."""
    if not cell.get("contended") or not col.series:
        return None
    for older in reversed(col.series[:-1]):
        for _, c in older.cells:
            if c["key"] == cell["key"] and not c.get("contended") and _comparable(c, cell):
                why = (
                    f"run {col.run['run_id']} ran this cell contended: the figures are from run "
                    f"{older.run['run_id']} ({older.label}), the newest run of it that was not"
                )
                return Pick(c, str(older.run["run_id"]), older.version, why)
    return None


def attach_picks(cols: Iterable[Column]) -> None:
    for col in cols:
        for _, cell in col.cells:
            found = pick(col, cell)
            if found:
                col.picks[str(cell["key"])] = found


# --- the history table -----------------------------------------------------------------------


def _cell_row(col: Column, order: int, anchor: str, cell: CellRecord) -> dict[str, Any]:
    busy = as_dict(as_dict(cell.get("metrics")).get(M.HOST_BUSY_CORES)).get("value")
    return {
        "run_id": col.run["run_id"],
        "created": col.run.get("created_utc"),
        "order": order,
        "matrix": matrix_of(col.run),
        "runtime": col.runtime,
        "version": col.version,
        "key": cell["key"],
        "row": row_key(cell),
        "label": fixture_label(cell),
        "sha256": as_dict(cell.get("fixture")).get("sha256"),
        "contended": bool(cell.get("contended")),
        "busy_cores": busy if isinstance(busy, int | float) else math.nan,
        "status": cell["outcome"]["status"],
        "verdict": cell["verdict"],
        "error_kind": cell["outcome"].get("error_kind"),
        "anchor": anchor,
    }


def cell_frame(series: Sequence[Column]) -> pd.DataFrame:
    """One row per run × cell of a row's series (``CELL_COLUMNS``), oldest run first."""
    rows = [
        _cell_row(col, order, anchor, cell)
        for order, col in enumerate(series)
        for anchor, cell in col.cells
    ]
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


def metric_frame(series: Sequence[Column], metrics: Sequence[str] = TRACKED) -> pd.DataFrame:
    """One row per run × cell × metric: median, min, max, n, mean and sd of its samples (a
    figure measured once has n = 1 and no sd), from the tidy export of each run."""
    parts = [tidy(col.run) for col in series]
    if not parts:
        return pd.DataFrame(columns=["run_id", "key", "metric", *STAT_COLUMNS, "unit", "source"])
    long = pd.concat(parts, ignore_index=True)
    runtimes = {col.runtime for col in series}
    long = long[long["metric"].isin(list(metrics)) & long["runtime"].isin(runtimes)]
    grouped = long.groupby(["run_id", "key", "metric"], sort=False)
    stats = grouped.agg(
        median=("value", "median"),
        min=("value", "min"),
        max=("value", "max"),
        n=("value", "count"),
        mean=("value", "mean"),
        sd=("value", "std"),
        unit=("unit", "first"),
        source=("source", "first"),
    )
    return stats.reset_index()


def frame(series: Sequence[Column], metrics: Sequence[str] = TRACKED) -> pd.DataFrame:
    """The history table of one row: cells joined with their figures' statistics."""
    cells = cell_frame(series)
    figures = metric_frame(series, metrics)
    out = cells.merge(figures, on=["run_id", "key"], how="left")
    cv = out["sd"] / out["mean"]
    out["cv"] = cv.where((out["n"] >= 2) & (out["mean"] > 0))  # an sd needs two values
    return out.sort_values(["order", "key", "metric"], kind="stable").reset_index(drop=True)


# --- spreads ---------------------------------------------------------------------------------


def _cv(values: Sequence[float]) -> float | None:
    """sd / mean (sd with n - 1), for two or more positive-mean values; else None."""
    if len(values) < 2:
        return None
    s = pd.Series(list(values), dtype="float64")
    mean = float(s.mean())
    return float(s.std(ddof=1)) / mean if mean > 0 else None


def _within(cell: CellRecord, metric: str) -> tuple[float | None, int]:
    samples = as_dict(as_dict(cell.get("metrics")).get(metric)).get("samples")
    values = [float(v) for v in samples] if isinstance(samples, list) else []
    return _cv(values), len(values)


def run_medians(table: pd.DataFrame, cell: CellRecord, metric: str) -> list[float]:
    """The medians of ``metric`` over the runs where ``cell`` was comparable: the same key and
    fixture content, outcome ok, not contended; oldest first."""
    sha = as_dict(cell.get("fixture")).get("sha256")
    rows = table[
        (table["key"] == cell["key"])
        & (table["metric"] == metric)
        & (table["sha256"] == sha)
        & (table["status"] == "ok")
        & ~table["contended"].astype(bool)
    ]
    return [float(v) for v in rows["median"].dropna()]


def spread(table: pd.DataFrame | None, cell: CellRecord, metric: str) -> Spread | None:
    """The spread of one shown figure; None where nothing is known about it."""
    within, n = _within(cell, metric)
    medians = run_medians(table, cell, metric) if table is not None else []
    between = _cv(medians)
    if within is None and between is None:
        return None
    return Spread(within, n, between, max(1, len(medians)), tuple(medians))


def attach_spreads(col: Column, table: pd.DataFrame | None) -> None:
    """``col.spreads`` for the figures of its shown (picked) cells."""
    for _, cell in col.cells:
        shown = col.picks[cell["key"]].cell if cell["key"] in col.picks else cell
        for metric in TRACKED:
            found = spread(table, shown, metric)
            if found is not None:
                col.spreads[(row_key(shown), metric)] = found


def attach(cols: Sequence[Column]) -> None:
    """Picks and spreads of the shown columns (``shown_columns``)."""
    for col in cols:
        attach_picks([col])
        attach_spreads(col, frame(col.series) if col.series else None)
