"""The evidence section, differences not repetitions.

A runtime row's cells often record the same evidence block cell after cell: the same artifact
manifest, stack, settings, debug facilities, system info. Per row (a column of ``every``), each
block that two or more of its cells record identically is shown once above the row's cells,
naming them; each of those cells says where instead of repeating it (:class:`Shared`). A cell's
metrics table lists the figures unavailable for one reason on one line (:func:`metric_rows`),
and the contention mark once, in its heading, not beside every figure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.report.views import (
    KNOWN_EVIDENCE,
    Notes,
    Value,
    distinct_labels,
    fmt_value,
    metric_value,
)
from rtmatrix.results.columns import Column, as_dict, as_list
from rtmatrix.results.records import CellRecord

#: evidence blocks in the order a cell shows them (``other:KEY``: a free-form entry)
BLOCKS = (
    "placement", "manifest", "debug_facilities", "leaked_processes", "process_tracking",
    "system_info", "traceback_tail", "stderr_tail", "stdout_tail", "control",
    "runtime_log_at_crash", "log_excerpt", "warnings", "log_tail",
)  # fmt: skip
#: the evidence keys each block shows (``control`` is the cell's own, not evidence)
KEYS = {"placement": ("layer_placement", "placement", "devices"),
        "log_excerpt": ("log_excerpt", "log_lines_total")}  # fmt: skip
#: never shared: each is the cell's own (its processes, its control run)
OWN = {"leaked_processes", "control"}
#: a block shorter than this (as JSON) is repeated: a link to it would be as long
MIN_SHARED_CHARS = 160


def _present(value: Any) -> bool:
    return value not in (None, "", [], {})


def blocks_of(cell: CellRecord) -> list[str]:
    """The evidence blocks a cell has, in the order it shows them."""
    e = as_dict(cell.get("evidence"))
    has = {b: any(_present(e.get(k)) for k in KEYS.get(b, (b,))) for b in BLOCKS}
    has["control"] = bool(cell.get("control"))
    other = [f"other:{k}" for k, v in e.items() if k not in KNOWN_EVIDENCE and _present(v)]
    return [b for b in BLOCKS if has[b]] + other


def _order(block: str) -> int:
    return BLOCKS.index(block) if block in BLOCKS else len(BLOCKS)


def _content(cell: CellRecord, block: str) -> str:
    """The block's data as canonical JSON (what two cells must share to share the block)."""
    e = as_dict(cell.get("evidence"))
    key = block.removeprefix("other:")
    data = {k: e.get(k) for k in KEYS.get(block, (key,))}
    return json.dumps(data, sort_keys=True, default=str)


@dataclass(frozen=True)
class SharedBlock:
    """One evidence block several cells of a row record identically, shown once."""

    id: str
    block: str  # a name of BLOCKS, or ``other:KEY``
    cell: CellRecord  # the first cell that has it: the block is rendered from its evidence
    labels: tuple[str, ...]  # the cells that share it
    others: tuple[str, ...]  # the row's other cells

    @property
    def title(self) -> str:
        return TITLES.get(self.block, self.block.removeprefix("other:"))

    @property
    def of(self) -> int:
        return len(self.labels) + len(self.others)

    @property
    def said(self) -> str:
        """Which cells share it: ``all 12 cells``, ``11 of 12 cells (all but small/q4_0)``."""
        if not self.others:
            return f"all {self.of} cells"
        but = f" (all but {', '.join(self.others)})" if len(self.others) <= 3 else ""
        return f"{len(self.labels)} of {self.of} cells{but}"


TITLES = {
    "placement": "Placement", "manifest": "Artifact manifest",
    "debug_facilities": "Debug facilities", "process_tracking": "Process tracking",
    "system_info": "System info", "traceback_tail": "Traceback", "stderr_tail": "stderr tail",
    "stdout_tail": "stdout tail", "runtime_log_at_crash": "Runtime log at the crash",
    "log_excerpt": "Load log excerpt", "warnings": "Runtime warnings", "log_tail": "log tail",
}  # fmt: skip


@dataclass
class Shared:
    """Per row, the blocks its cells share; per cell anchor and block, where it is shown."""

    by_col: dict[int, list[SharedBlock]] = field(default_factory=dict)
    by_cell: dict[tuple[str, str], SharedBlock] = field(default_factory=dict)

    def blocks(self, col: Column) -> list[SharedBlock]:
        return self.by_col.get(id(col), [])

    def ref(self, anchor: str, block: str) -> SharedBlock | None:
        return self.by_cell.get((anchor, block))


def _groups(col: Column) -> dict[tuple[str, str], list[tuple[str, CellRecord]]]:
    """(block, content) -> the cells of the column that record it so."""
    found: dict[tuple[str, str], list[tuple[str, CellRecord]]] = {}
    for anchor, cell in col.cells:
        for block in blocks_of(cell):
            if block not in OWN:
                found.setdefault((block, _content(cell, block)), []).append((anchor, cell))
    return found


def shared(cols: Iterable[Column]) -> Shared:
    """The blocks two or more cells of a row share, at least ``MIN_SHARED_CHARS`` long."""
    out = Shared()
    for col in cols:
        groups = _groups(col)
        mine = sorted(((b, c), cells) for (b, c), cells in groups.items()
                      if len(cells) > 1 and len(c) >= MIN_SHARED_CHARS)  # fmt: skip
        mine.sort(key=lambda g: (_order(g[0][0]), col.cells.index(g[1][0])))
        names = distinct_labels([c for _, c in col.cells], [""] * len(col.cells))
        label = {a: name for (a, _), name in zip(col.cells, names, strict=True)}
        for n, ((block, _), cells) in enumerate(mine):
            anchor = cells[0][0]
            mine_ = {a for a, _ in cells}
            labels = tuple(label[a] for a, _ in cells)
            others = tuple(label[a] for a, _ in col.cells if a not in mine_)
            sb = SharedBlock(f"{anchor}-shared-{n}", block, cells[0][1], labels, others)
            out.by_col.setdefault(id(col), []).append(sb)
            out.by_cell.update({(a, block): sb for a, _ in cells})
    return out


@dataclass(frozen=True)
class MetricRow:
    """One line of a cell's metrics table: one figure, or the figures unavailable for one
    reason."""

    names: tuple[str, ...]
    value: Value
    samples: str = ""


def _samples(metric: Any) -> str:
    m = as_dict(metric)
    return ", ".join(fmt_value({"value": s, "unit": m.get("unit")}) for s in as_list(
        m.get("samples")))  # fmt: skip


def metric_rows(metrics: Mapping[str, Any], notes: Notes) -> list[MetricRow]:
    """The cell's figures in their order; those unavailable for the same reason on one line,
    where the first of them is."""
    rows: list[MetricRow] = []
    where: dict[Value, int] = {}
    for name, metric in metrics.items():
        value = metric_value(metric if isinstance(metric, dict) else None, notes, name)
        if value.unavailable and value in where:
            i = where[value]
            rows[i] = MetricRow((*rows[i].names, name), value)
            continue
        if value.unavailable:
            where[value] = len(rows)
        rows.append(MetricRow((name,), value, _samples(metric)))
    return rows
