"""The real-model table that leads the report: the figures a team chooses a runtime by, read
from the cells of a real checkpoint only (fixtures with a ``source``: e.g. ``smollm2-135m``).

The same criteria as the selection matrix (package size, cold start, peak memory, PP, TG,
TTFT/TPOT, parity) plus the quality figures and the generated text, over each runtime row's
real-model cells at their own headline params; the synthetic fixture family stays in the
selection matrix and the grid below it. A run without a real model has no such table.
"""

from __future__ import annotations

from dataclasses import replace

from rtmatrix.report.views import ROWS, Item, Notes, Part, Row, Value, pick_item, unavailable
from rtmatrix.results.columns import (
    Column,
    as_dict,
    cell_label,
    common_params,
    headline_cells,
    normal_cells,
    varying_params,
)
from rtmatrix.results.records import CellRecord

#: the selection matrix's criteria that the real-model table repeats, in its order
CRITERIA = (
    "quality (real model)",
    "PP tok/s",
    "TG tok/s",
    "TTFT / TPOT",
    "peak memory",
    "cold start",
    "package size",
    "parity",
)
TEXT_CHARS = 160  # generated text shown; the whole text is on hover


def is_real(cell: CellRecord) -> bool:
    """A cell of a real checkpoint's text-prompted generation (its record names the source)."""
    return bool(as_dict(cell.get("fixture")).get("source"))


def real_columns(cols: list[Column]) -> list[Column]:
    """Each column restricted to its real-model cells, read at their own common params."""
    out = []
    for col in cols:
        cells = [(ev, c) for ev, c in col.cells if is_real(c)]
        headline = common_params(normal_cells(c for _, c in cells))
        out.append(replace(col, cells=cells, headline=headline))
    return out


def _generated(col: Column, notes: Notes) -> list[Item]:
    cells = headline_cells(col)
    if not cells:
        return [Item("", (Part("", unavailable(f"{col.runtime} ran no real-model cell", notes)),))]
    vary = varying_params(cells)
    items = []
    for c in cells:
        gen = as_dict(c.get("generated_text"))
        if gen.get("text") is None:
            why = str(gen.get("unavailable") or f"cell outcome is {c['outcome']['status']}")
            value = unavailable(why, notes)
        else:
            text = str(gen["text"])
            short = text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"
            title = f"{gen.get('prompt', '')}; {gen.get('how', '')}\n{text}"
            value = Value(f"“{short}”", "evidence", title, None, "generated")
        items.append(pick_item(col, c, cell_label(c, vary), (Part("", value),)))
    return items


def sources(cols: list[Column]) -> list[str]:
    """The checkpoints the real-model cells were imported from."""
    found = (as_dict(c.get("fixture")).get("source") for col in cols for _, c in col.cells)
    return sorted({str(s) for s in found if s})


def rows(cols: list[Column], notes: Notes) -> list[Row]:
    """The real-model table's rows (empty when no column ran a real model)."""
    real = real_columns(cols)
    if not any(col.cells for col in real):
        return []
    builders = {label: (help_, build) for label, help_, build in ROWS}
    out = [
        Row(label, builders[label][0], [builders[label][1](col, notes) for col in real])
        for label in CRITERIA
    ]
    help_ = "the first counted repetition's greedy continuation of the text prompt (escaped)"
    out.append(Row("generated text", help_, [_generated(col, notes) for col in real]))
    return out
