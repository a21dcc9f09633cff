"""The candidates of each model: a runtime row × dtype × the settings it needed, read from its
headline cell (the model's most common params).

A candidate's settings are the row's options, plus the control options a crashed or imprecise
cell needed to run (its figures are then the control's). Its figures are read as the report
reads them: where the newest run ran the cell contended, from the newest run that did not
(``rtmatrix.results.series.pick``). A cell that ends badly and that no control run rescued is a
``runs`` failure of its candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.names import M
from rtmatrix.options import options_text
from rtmatrix.results.columns import Column, Spread, as_dict, common_params, normal_cells, picked
from rtmatrix.results.records import CellRecord, MetricRecord
from rtmatrix.selection.models import KINDS, model_of
from rtmatrix.selection.verdict import FIGURES, Candidate, Consistency, Failure, Figure

#: model -> (kind, its plain generation cells expected to run, per shown column)
Groups = dict[str, tuple[str, list[tuple[Column, CellRecord]]]]


@dataclass
class Draft:
    """A candidate while it is being judged: its column and cells with the figures."""

    col: Column
    model: str
    dtype: str
    cell: CellRecord  # the headline cell of the newest run with the row
    metrics: Mapping[str, MetricRecord]  # where its figures come from
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    spreads: dict[str, Spread] = field(default_factory=dict)
    consistency: Consistency | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        opts = options_text(self.settings)
        return f"{self.col.runtime} {self.dtype}" + (f" ({opts})" if opts else "")

    def figure(self, metric: str) -> Figure:
        m = as_dict(self.metrics.get(metric))
        samples = tuple(float(s) for s in m.get("samples") or [])
        value = m.get("value")
        reason = str(m.get("reason") or ("not recorded" if not m else ""))
        return Figure(metric, value, str(m.get("unit") or ""), samples, reason)

    def number(self, metric: str) -> float | None:
        return self.figure(metric).number

    def freeze(self) -> Candidate:
        return Candidate(
            self.model, self.col.runtime, self.dtype, dict(self.settings), str(self.cell["key"]),
            str(self.col.run.get("run_id")), {m: self.figure(m) for m in FIGURES},
            tuple(self.failures), tuple(self.notes), self.consistency,
        )  # fmt: skip


def _headline(cells: Sequence[CellRecord], model: str, params: Any) -> CellRecord:
    """The cell at the model's headline params (the model's own fixture first), else the
    first at the candidate's own most common params."""
    at = [c for c in cells if c["params"] == params] or [
        c for c in cells if c["params"] == common_params(cells)
    ]
    own = [c for c in at if as_dict(c.get("fixture")).get("name") == model]
    return (own or at)[0]


def _rescue(cell: CellRecord) -> tuple[dict[str, Any], Mapping[str, MetricRecord], str] | None:
    """A failed cell a control run rescued: (control options, the control's figures, note)."""
    for key in ("control", "numerics_control"):
        ctl = as_dict(cell.get(key))
        ran = as_dict(ctl.get("outcome")).get("status") == "ok"
        if ctl and ran and ctl.get("verdict") != "FAIL":
            opts = dict(as_dict(ctl.get("options")))
            note = (f"fails with the row's settings ({cell['outcome']['status']}); runs with "
                    f"{options_text(opts)}: figures from that one control run")  # fmt: skip
            return opts, as_dict(ctl.get("metrics")), note
    return None


def _notes(d: Draft, col: Column, cell: CellRecord) -> None:
    """Why its figures may read differently: imprecise numerics, an older run's, contention."""
    pick = col.picks.get(str(cell["key"]))
    if cell.get("numerics_mark"):
        d.notes.append(f"computed below the requested precision: {cell.get('numerics_mark')}")
    if pick is not None:
        d.notes.append(pick.why)
    elif cell.get("contended"):
        busy = as_dict(cell["metrics"].get(M.HOST_BUSY_CORES)).get("value")
        cores = f"{busy:.2f} cores" if isinstance(busy, int | float) else "the CPU"
        d.notes.append(f"measured while the host was busy ({cores} outside the cell): "
                       "speed figures may understate it")  # fmt: skip


def draft(col: Column, model: str, dtype: str, cell: CellRecord) -> Draft:
    """The candidate of one row and dtype, from its headline cell."""
    settings = dict(as_dict(col.info.get("options")))
    d = Draft(col, model, dtype, cell, picked(col, cell)["metrics"], settings)
    _notes(d, col, cell)
    ok = cell["outcome"]["status"] == "ok" and cell["verdict"] != "FAIL"
    rescued = None if ok else _rescue(cell)
    if rescued is not None:
        d.settings |= rescued[0]
        d.metrics = rescued[1]
        d.notes.append(rescued[2])
    elif not ok:
        out = cell["outcome"]
        why = cell.get("verdict_reason") or out.get("message") or ""
        d.failures.append(Failure("runs", f"ends {out['status']} (verdict {cell['verdict']}): "
                                  f"{why}".rstrip(": "), out["status"]))  # fmt: skip
    return d


def groups(shown: Sequence[Column]) -> Groups:
    """model -> (kind, its plain generation cells expected to run, per shown column), real
    checkpoints first, then architecture toys, then synthetic models."""
    out: Groups = {}
    for col in shown:
        for cell in normal_cells(c for _, c in col.cells):
            model, kind = model_of(cell)
            out.setdefault(model, (kind, []))[1].append((col, cell))
    order = {k: i for i, k in enumerate(KINDS)}
    return dict(sorted(out.items(), key=lambda kv: order[kv[1][0]]))


def drafts(model: str, found: list[tuple[Column, CellRecord]], params: Any) -> list[Draft]:
    """One draft per row and dtype of the model, at the model's headline ``params``."""
    by: dict[tuple[int, str], list[CellRecord]] = {}
    cols: dict[int, Column] = {}
    for col, cell in found:
        dtype = str(as_dict(cell.get("fixture")).get("dtype") or "as stored")
        by.setdefault((id(col), dtype), []).append(cell)
        cols[id(col)] = col
    return [draft(cols[c], model, dt, _headline(cells, model, params))
            for (c, dt), cells in by.items()]  # fmt: skip


def series_of(d: Draft) -> list[tuple[Column, CellRecord]]:
    """The candidate's headline cell in every run of its row that has it, oldest first."""
    key = d.cell["key"]
    return [(col, c) for col in (d.col.series or [d.col]) for _, c in col.cells if c["key"] == key]
