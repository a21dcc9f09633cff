"""``rtmatrix run --processes N``: each cell in N worker processes, one per round across the
whole matrix (round 1 runs every cell, then round 2 …), pooled into one record per cell.

A run record's repetitions all come from one worker process, and on a shared machine one
process's figures differ from the next one's by more than the repetitions inside it spread; a
gate between two runs needs between-process evidence. The pooled record keeps, per measured
metric, each process's own value (``process_values``: the median of its repetitions, or its one
value) and the repetitions of all of them (``samples``); its ``value`` is the median of the
process values; ``processes`` says how many processes the record pools. The outcome is the worst
one any process had (a cell that crashed once is not ok), with the other processes' outcomes
named. Pure functions, no runtime.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from typing import Any, cast

from rtmatrix.results.diff import outcome_rank
from rtmatrix.results.records import CellRecord


def pool(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One record from the same cell's records of several worker processes."""
    if not records:
        msg = "pool() needs at least one record"
        raise ValueError(msg)
    worst = max(records, key=lambda r: outcome_rank(cast(CellRecord, r)))
    out = copy.deepcopy(worst)
    out["processes"] = len(records)
    statuses = [str(r["outcome"]["status"]) for r in records]
    out["process_outcomes"] = statuses
    if worst is not records[0] or len(set(statuses)) > 1:
        out["outcome"]["message"] = (
            f"{out['outcome'].get('message') or ''} [processes: {', '.join(statuses)}]".strip()
        )
    ok = [r for r in records if r["outcome"]["status"] == "ok"]
    if ok and worst["outcome"]["status"] == "ok":
        out["metrics"] = _pooled_metrics(ok)
        out["contended"] = any(bool(r.get("contended")) for r in ok)
    return out


def _pooled_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    merged = copy.deepcopy(records[0]["metrics"])
    for name, metric in merged.items():
        values = [r["metrics"].get(name, {}).get("value") for r in records]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            continue  # text, unavailable on a side, absent: the first process's stays
        metric["process_values"] = [float(v) for v in values]
        metric["value"] = statistics.median(metric["process_values"])
        samples = [r["metrics"][name].get("samples") for r in records]
        if all(isinstance(s, list) for s in samples):
            metric["samples"] = [float(x) for s in samples for x in s]
    out: dict[str, Any] = merged
    return out
