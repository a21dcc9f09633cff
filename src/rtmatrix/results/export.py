"""A run record as one tidy table: one row per cell × metric × sample (``rtmatrix export``).

Columns (``columns`` gives them in order): ``run_id``; the cell's key fields ``key``,
``runtime``, ``fixture``, ``dtype``, ``variant``, ``scenario``, then one column per parameter
(``threads``, ``n_ctx``, …; ``param_<name>`` if a name is taken); how the cell ended
(``status``, ``verdict``); then ``metric``, ``sample`` (0-based index of the counted repetition,
empty for a metric measured once), ``value`` (a number), ``text`` (a metric whose value is text,
such as ``license``), ``unit``, ``source`` and ``reason`` (why a value is ``unavailable``; its
``value`` stays empty, never 0). A metric without samples gives one row with its value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd

from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord

FORMATS = ("csv", "json")
CELL_COLUMNS = ("run_id", "key", "runtime", "fixture", "dtype", "variant", "scenario")
OUTCOME_COLUMNS = ("status", "verdict")
METRIC_COLUMNS = ("metric", "sample", "value", "text", "unit", "source", "reason")
_FIXED = {*CELL_COLUMNS, *OUTCOME_COLUMNS, *METRIC_COLUMNS}


def param_columns(run: RunRecord) -> dict[str, str]:
    """Parameter name -> its column, in order of first appearance across the cells."""
    names = dict.fromkeys(name for cell in run["cells"] for name in cell["params"])
    return {name: f"param_{name}" if name in _FIXED else name for name in names}


def columns(run: RunRecord) -> list[str]:
    return [*CELL_COLUMNS, *param_columns(run).values(), *OUTCOME_COLUMNS, *METRIC_COLUMNS]


def _cell_fields(run: RunRecord, cell: CellRecord, params: dict[str, str]) -> dict[str, Any]:
    fx = cell["fixture"]
    fields: dict[str, Any] = {
        "run_id": run["run_id"],
        "key": cell["key"],
        "runtime": cell["runtime"],
        "fixture": fx.get("name"),
        "dtype": fx.get("dtype"),
        "variant": fx.get("variant"),
        "scenario": fx.get("scenario"),
        "status": cell["outcome"]["status"],
        "verdict": cell["verdict"],
    }
    return fields | {col: cell["params"].get(name) for name, col in params.items()}


def _metric_rows(name: str, metric: MetricRecord) -> Iterator[dict[str, Any]]:
    common = {
        "metric": name,
        "unit": metric.get("unit"),
        "source": metric.get("source"),
        "reason": metric.get("reason"),
    }
    value = metric.get("value")
    samples = metric.get("samples")
    if isinstance(samples, list) and samples and not isinstance(value, str):
        for i, v in enumerate(samples):
            yield common | {"sample": i, "value": float(v), "text": None}
        return
    number = float(value) if isinstance(value, int | float) else None
    text = value if isinstance(value, str) else None
    yield common | {"sample": None, "value": number, "text": text}


def tidy(run: RunRecord) -> pd.DataFrame:
    """The table of a (loaded, validated) run record."""
    params = param_columns(run)
    rows = [
        _cell_fields(run, cell, params) | row
        for cell in run["cells"]
        for name, metric in cell["metrics"].items()
        for row in _metric_rows(name, metric)
    ]
    frame = pd.DataFrame(rows, columns=columns(run))
    return frame.astype(
        {"sample": "Int64", "value": "float64"} | {col: "Int64" for col in params.values()}
    )


def _plain(value: Any) -> Any:
    """A JSON value: missing -> null, numpy scalars -> Python numbers (every digit kept)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def render(frame: pd.DataFrame, fmt: str) -> str:
    """CSV (a header, empty fields for missing values) or JSON (a list of records, null)."""
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        records = [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]
        return json.dumps(records, indent=1, allow_nan=False) + "\n"
    msg = f"unknown export format {fmt!r}; valid: {', '.join(FORMATS)}"
    raise ValueError(msg)
