"""History across runs of one matrix: which figures a row shows, how much they vary, and what
changed from run to run.

Runs are grouped by their matrix (the ``matrix.path`` they record) and ordered by
``created_utc``. Per group and runtime row, the report shows one column: the newest run that has
cells for the row (a row without cells in any run shown is left out). Where that run's cell ran
``contended``, its figures are taken from the newest run of the same cell that was not, with the
same fixture content and params (``Column.picks``).

The history table is one pandas row per run × cell × metric (``frame``: median, min, max and
count of the counted repetitions, from ``rtmatrix.results.export.tidy``; version, contention,
fixture hash and verdict of the cell). From it come the spreads (``Column.spreads``): the
coefficient of variation of the shown cell's repetitions, and of its medians over the runs
where the cell was comparable (not contended, outcome ok, same fixture content). Run-to-run
steps are marked by ``rtmatrix.results.diff.compare_cells`` between consecutive runs, the same
test ``rtmatrix diff`` applies. A regression a paired comparison (``rtmatrix compare``, its
``comparison.json``) found is marked at its candidate side's run, with a link to the
comparison's page, where its explanation is (``PairedMark``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rtmatrix.metrics import registry
from rtmatrix.names import M
from rtmatrix.report.plots import HIST_PANELS, PALETTE, HistLine, HistPoint, Plot, history_plot
from rtmatrix.report.views import (
    Column,
    Pick,
    Spread,
    Table,
    TableRow,
    as_dict,
    cell_label,
    fixture_label,
    fmt_value,
    normal_cells,
    row_key,
    text,
    varying_params,
)
from rtmatrix.results.diff import (
    CellDiff,
    Mark,
    compare_cells,
    contended_reasons,
    default_checks,
    machine_differences,
)
from rtmatrix.results.export import tidy
from rtmatrix.results.records import CellRecord, RunRecord

#: the figures whose spread the selection matrix shows and the history plots follow
TRACKED = registry.ranked()
CELL_COLUMNS = (
    "run_id", "created", "order", "matrix", "runtime", "version", "key", "row", "label",
    "sha256", "contended", "busy_cores", "status", "verdict", "error_kind", "anchor",
)  # fmt: skip
STAT_COLUMNS = ("median", "min", "max", "n", "mean", "sd")
MOVED = (Mark.WORSE, Mark.BETTER)


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


# --- run-to-run steps ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What changed for one cell from the previous run that had it to this one."""

    order: int  # index of the later run in the series
    key: str
    label: str
    anchor: str  # the later cell's evidence
    mark: str
    text: str
    verdicts: str  # "PASS (ok) → FAIL (wrong-output)"
    comparable: bool  # False when fixture content, params or machine differ (not contention)
    metrics: dict[str, str]  # metric -> its own mark where it moved (- or +)
    link: str = ""  # a paired comparison's page (its explanation), for a step it found
    source: str = "diff"  # "diff": against the run before; "paired": a paired comparison


@dataclass(frozen=True)
class PairedMark:
    """A regression a paired comparison found: the candidate side's run, the cell, the metric,
    what the comparison said, and a link to its page."""

    run_id: str
    key: str
    metric: str
    text: str
    link: str


def _candidate_run_id(settings: Mapping[str, Any]) -> str | None:
    """Side ``b``'s run id: recorded in ``settings.run_ids``; a comparison written before that
    names it only in its run file's name (``<run_id>-b.json``)."""
    run_id = (settings.get("run_ids") or {}).get("b")
    if run_id:
        return str(run_id)
    name = Path(str((settings.get("runs") or {}).get("b") or "")).name
    return name.removesuffix("-b.json") if name.endswith("-b.json") else None


def paired_marks(doc: Mapping[str, Any], link: str) -> list[PairedMark]:
    """The regressions of one ``comparison.json`` (format ``rtmatrix-compare``), to be marked at
    its candidate side's run (side ``b``)."""
    run_id = _candidate_run_id(doc.get("settings") or {})
    if run_id is None:
        return []
    out = []
    for ch in (doc.get("decisions") or {}).get("checks", []):
        if ch.get("verdict") != "regression":
            continue
        ratio, ci = ch.get("ratio"), ch.get("ci")
        said = f"paired comparison: {ch['metric']} regression"
        if isinstance(ratio, int | float):
            said += f", ratio {ratio:.3f}"
        if isinstance(ci, list | tuple) and len(ci) == 2:
            said += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
        said += f" over K = {ch.get('k')} paired rounds"
        out.append(PairedMark(run_id, str(ch["cell"]), str(ch["metric"]), said, link))
    return out


def _step_text(diff: CellDiff) -> str:
    moved = [m for m in diff.metrics if m.mark in MOVED]
    said = [f"{m.name} {m.mark} {m.note}".strip() for m in moved]
    return "; ".join([*diff.reasons, *said]) or f"verdict {diff.candidate.verdict}"


def steps(series: Sequence[Column], paired: Sequence[PairedMark] = ()) -> list[Step]:
    """Each cell against the previous run that had it (``compare_cells``, default checks):
    every mark but ``=`` and ``~`` is a step; then each paired comparison's regression at its
    candidate run (a ``-`` on its metric, linked to the comparison)."""
    out = _diff_steps(series)
    vary = varying_params(c for col in series for _, c in col.cells)
    for order, col in enumerate(series):
        here = [m for m in paired if m.run_id == col.run.get("run_id")]
        for anchor, cell in col.cells:
            for m in (m for m in here if m.key == cell["key"]):
                verdict = f"{cell['verdict']} ({cell['outcome']['status']})"
                out.append(
                    Step(order, m.key, cell_label(cell, vary), anchor, "-", m.text, verdict,
                         True, {m.metric: "-"}, link=m.link, source="paired")
                )  # fmt: skip
    return out


def _diff_steps(series: Sequence[Column]) -> list[Step]:
    out: list[Step] = []
    last: dict[str, tuple[Column, CellRecord]] = {}
    checks = default_checks()
    vary = varying_params(c for col in series for _, c in col.cells)
    for order, col in enumerate(series):
        for anchor, cell in col.cells:
            if cell["key"] in last:
                prev_col, prev = last[cell["key"]]
                machine = machine_differences(prev_col.run, col.run)
                diff = compare_cells(prev, cell, checks, machine=machine)
                if diff.mark not in (Mark.SAME, Mark.NOISE):
                    busy = set(contended_reasons(prev, cell))
                    comparable = diff.mark is not Mark.NOT_COMPARABLE or set(diff.reasons) <= busy
                    step = _step(order, anchor, cell_label(cell, vary), diff, comparable)
                    out.append(step)
            last[cell["key"]] = (col, cell)
    return out


def _step(order: int, anchor: str, label: str, diff: CellDiff, comparable: bool) -> Step:
    b, c = diff.base, diff.candidate
    verdicts = f"{b.verdict} ({b.status}) → {c.verdict} ({c.status})"
    moved = {m.name: str(m.mark) for m in diff.metrics if m.mark in MOVED}
    mark, said = str(diff.mark), _step_text(diff)
    return Step(order, diff.key, label, anchor, mark, said, verdicts, comparable, moved)


def plain_cells(series: Sequence[Column]) -> list[CellRecord]:
    """The series' plain generation cells (no expected failure, no lifecycle scenario)."""
    return normal_cells(c for col in series for _, c in col.cells)


# --- the history section ---------------------------------------------------------------------

MAX_LINES = len(PALETTE)
VERDICT_MARKS = (Mark.NEW_FAILURE, Mark.FIXED)


@dataclass(frozen=True)
class RunHead:
    run_id: str
    version: str
    created: str
    contended: int  # cells of this row that ran contended

    @property
    def tick(self) -> str:
        return f"{self.version}\n{self.created[5:16].replace('T', ' ')}"


@dataclass(frozen=True)
class VerdictCell:
    anchor: str
    verdict: str
    status: str
    mark: str  # the step from the run before ("" for none)
    title: str
    contended: bool


@dataclass(frozen=True)
class VerdictRow:
    label: str
    cells: tuple[VerdictCell | None, ...]  # one per run


@dataclass(frozen=True)
class HistoryView:
    """One row's history: the runs, the plot, verdicts per fixture and run, the steps."""

    id: str
    runtime: str
    matrix: str
    runs: tuple[RunHead, ...]
    plot: Plot
    verdicts: tuple[VerdictRow, ...]
    steps: tuple[Step, ...]
    table: Table


def _run_heads(series: Sequence[Column]) -> tuple[RunHead, ...]:
    return tuple(
        RunHead(
            str(col.run["run_id"]),
            col.version,
            str(col.run.get("created_utc") or ""),
            sum(1 for _, c in col.cells if c.get("contended")),
        )
        for col in series
    )


def _points(
    table: pd.DataFrame, key: str, metric: str, marks: Mapping[tuple[int, str], Sequence[Step]]
) -> tuple[HistPoint, ...]:
    rows = table[(table["key"] == key) & (table["metric"] == metric)].dropna(subset=["median"])
    out = []
    for r in rows.to_dict("records"):
        found = marks.get((int(r["order"]), key), ())
        mark = next((m for s in found if (m := s.metrics.get(metric, ""))), "")
        verdict = next((s.mark for s in found if s.mark in VERDICT_MARKS), "")
        mark = verdict or mark
        comparable = all(s.comparable for s in found)
        hp = HistPoint(int(r["order"]), float(r["median"]), float(r["min"]), float(r["max"]))
        out.append(replace(hp, contended=bool(r["contended"]), comparable=comparable, mark=mark))
    return tuple(out)


def _marks(found: Sequence[Step]) -> dict[tuple[int, str], list[Step]]:
    marks: dict[tuple[int, str], list[Step]] = {}
    for s in found:
        marks.setdefault((s.order, s.key), []).append(s)
    return marks


def _lines(series: Sequence[Column], table: pd.DataFrame, found: Sequence[Step]) -> list[HistLine]:
    marks = _marks(found)
    cells = list({c["key"]: c for c in plain_cells(series)}.values())[:MAX_LINES]
    vary = varying_params(cells)
    lines = []
    for cell in cells:
        for panel in HIST_PANELS:
            points = _points(table, cell["key"], panel.metric, marks)
            if points:
                lines.append(HistLine(cell_label(cell, vary), panel.metric, points))
    return lines


def _verdict_rows(series: Sequence[Column], found: Sequence[Step]) -> tuple[VerdictRow, ...]:
    marks = {(s.order, s.key): s for s in found if s.source == "diff"}
    keys = list(dict.fromkeys(c["key"] for col in series for _, c in col.cells))
    samples = {c["key"]: c for col in series for _, c in col.cells}
    vary = varying_params(samples.values())
    rows = []
    for key in keys:
        cells: list[VerdictCell | None] = []
        for order, col in enumerate(series):
            hit = next(((a, c) for a, c in col.cells if c["key"] == key), None)
            cells.append(None if hit is None else _verdict_cell(hit, marks.get((order, key))))
        rows.append(VerdictRow(cell_label(samples[key], vary), tuple(cells)))
    return tuple(rows)


def _verdict_cell(hit: tuple[str, CellRecord], step: Step | None) -> VerdictCell:
    anchor, cell = hit
    said = [f"{cell['verdict']} ({cell['outcome']['status']})"]
    if cell.get("verdict_reason"):
        said.append(str(cell["verdict_reason"]))
    if step is not None:
        said.append(f"{step.mark} since the run before: {step.text}")
    return VerdictCell(
        anchor,
        str(cell["verdict"]),
        str(cell["outcome"]["status"]),
        step.mark if step is not None else "",
        "; ".join(said),
        bool(cell.get("contended")),
    )


TABLE_HEAD = (
    "run", "version", "fixture", "metric", "median", "min … max", "n", "cv", "source", "host",
    "verdict",
)  # fmt: skip


def _fmt(value: Any, unit: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return fmt_value({"value": float(value), "unit": str(unit or "")})


def _table_row(r: Any) -> TableRow:
    busy = f"contended · {r.busy_cores:.2f} cores" if r.contended else "quiet"
    cv = f"{r.cv * 100:.1f}%" if isinstance(r.cv, float) and not math.isnan(r.cv) else ""
    cells = (
        text(str(r.version)),
        text(str(r.label)),
        text(str(r.metric)),
        text(_fmt(r.median, r.unit)),
        text(f"{_fmt(r.min, r.unit)} … {_fmt(r.max, r.unit)}"),
        text(str(int(r.n))),
        text(cv),
        text(str(r.source)),
        text(busy, css="contended" if r.contended else ""),
        text(str(r.verdict), css=f"v-{r.verdict}"),
    )
    return TableRow(str(r.run_id), cells, data=f"{r.run_id}|{r.key}|{r.metric}")


def data_table(table: pd.DataFrame) -> Table:
    """Every tracked figure of the row in every run, from the pandas history table."""
    shown = table.dropna(subset=["median"])
    rows = tuple(_table_row(r) for r in shown.itertuples(index=False))
    caption = "cv: sd / mean of the run's repetitions; host: contention during the cell"
    return Table("history", TABLE_HEAD, rows, caption)


def view(col: Column, index: int, paired: Sequence[PairedMark] = ()) -> HistoryView:
    """The history section for one shown column with a series of runs."""
    series = col.series
    table = frame(series)
    found = steps(series, paired)
    runs = _run_heads(series)
    events = [(s.order, f"{s.mark} {s.label}") for s in found if s.mark in VERDICT_MARKS]
    pid = f"history-{index}"
    title = f"{col.runtime} across {len(series)} runs of {matrix_of(col.run)}"
    plot = history_plot(pid, title, [r.tick for r in runs], _lines(series, table, found), events)
    return HistoryView(
        pid,
        col.runtime,
        matrix_of(col.run),
        runs,
        plot,
        _verdict_rows(series, found),
        tuple(found),
        data_table(table),
    )


def attach(cols: Sequence[Column]) -> None:
    """Picks and spreads of the shown columns (``shown_columns``)."""
    for col in cols:
        attach_picks([col])
        attach_spreads(col, frame(col.series) if col.series else None)


def views(cols: Sequence[Column], paired: Sequence[PairedMark] = ()) -> list[HistoryView]:
    return [view(col, i, paired) for i, col in enumerate(cols) if col.series]
