"""The report's history view of one matrix's runs: per shown row, the runs, a plot of its tracked
figures, its verdicts per fixture and run, and what changed from run to run.

Which column a row shows, its picks and spreads and the history table come from
:mod:`rtmatrix.results.series`. Run-to-run steps are marked by
``rtmatrix.results.diff.compare_cells`` between consecutive runs, the same test ``rtmatrix diff``
applies. A regression a paired comparison (``rtmatrix compare``, its ``comparison.json``) found
is marked at its candidate side's run, with a link to the comparison's page, where its
explanation is (``PairedMark``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rtmatrix.report.plots import HIST_PANELS, PALETTE, HistLine, HistPoint, Plot, history_plot
from rtmatrix.report.views import Table, TableRow, fmt_value, text
from rtmatrix.results.columns import Column, cell_label, normal_cells, varying_params
from rtmatrix.results.diff import (
    CellDiff,
    Mark,
    compare_cells,
    contended_reasons,
    default_checks,
    machine_differences,
)
from rtmatrix.results.records import CellRecord
from rtmatrix.results.series import frame, matrix_of

MOVED = (Mark.WORSE, Mark.BETTER)


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


def views(cols: Sequence[Column], paired: Sequence[PairedMark] = ()) -> list[HistoryView]:
    return [view(col, i, paired) for i, col in enumerate(cols) if col.series]
