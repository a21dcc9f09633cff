"""Consistency over runs: a candidate's TG spread from run to run, the place it held in each
run's own selection, and whether each regression it had is explained by a recorded change
(version, row options, stack, machine).

With several runs and ``consistency_rule``, consistent candidates rank before those without
history, before inconsistent ones — the chapter's rule (:data:`RULE`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd

from rtmatrix.names import M
from rtmatrix.options import options_text
from rtmatrix.results import series
from rtmatrix.results.columns import Column, as_dict, picked
from rtmatrix.results.diff import Mark, compare_cells, default_checks, machine_differences
from rtmatrix.results.records import CellRecord, RunRecord
from rtmatrix.selection.answer import Selection
from rtmatrix.selection.candidates import Draft, series_of
from rtmatrix.selection.constraints import Constraints
from rtmatrix.selection.verdict import Consistency, Regression

RULE = (
    "a consistent second place whose regressions remain explainable beats a one-time winner "
    "that cannot be diagnosed"
)
#: one run's own selection under the given constraints (no history)
SelectOne = Callable[[RunRecord, Constraints], Selection]


def _explanation(
    prev: tuple[Column, CellRecord], cur: tuple[Column, CellRecord], stack: Sequence[str]
) -> str:
    """What recorded change explains a step: version, row options, stack, machine."""
    (pc, pcell), (cc, ccell) = prev, cur
    out = []
    pv = pcell["outcome"].get("runtime_version") or pc.version
    cv = ccell["outcome"].get("runtime_version") or cc.version
    if pv != cv:
        out.append(f"{cc.runtime} {pv} → {cv}")
    po, co = as_dict(pc.info.get("options")), as_dict(cc.info.get("options"))
    if po != co:
        out.append(f"row options {options_text(po) or 'none'} → {options_text(co) or 'none'}")
    out += [f"stack {s}" for s in stack[:3]]
    out += [f"machine {m}" for m in machine_differences(pc.run, cc.run)]
    return "; ".join(out)


def regressions(steps: Sequence[tuple[Column, CellRecord]]) -> list[Regression]:
    """Each step of one cell from the run before that ``rtmatrix diff`` marks ``-`` or ``!``
    (``compare_cells`` with the default checks, as the history view marks its steps)."""
    out, checks = [], default_checks()
    for prev, cur in itertools.pairwise(steps):
        machine = machine_differences(prev[0].run, cur[0].run)
        diff = compare_cells(prev[1], cur[1], checks, machine=machine)
        if diff.mark not in (Mark.WORSE, Mark.NEW_FAILURE):
            continue
        moved = [f"{m.name} {m.mark} {m.note}".strip() for m in diff.metrics
                 if m.mark is Mark.WORSE and m.gate]  # fmt: skip
        text = "; ".join([*diff.reasons, *moved]) or str(diff.mark)
        because = _explanation(prev, cur, diff.stack)
        out.append(Regression(str(cur[0].run.get("run_id")), str(diff.mark), text, because))
    return out


class Places:
    """Each run's own selection (no history), cached: where a candidate stood in each run."""

    def __init__(self, constraints: Constraints, select_one: SelectOne) -> None:
        self.constraints = replace(constraints, consistency_rule=False)
        self.select_one = select_one
        self.done: dict[str, Selection] = {}

    def place(self, run: RunRecord, d: Draft) -> int | None:
        run_id = str(run.get("run_id"))
        if run_id not in self.done:
            self.done[run_id] = self.select_one(run, self.constraints)
        for m in self.done[run_id].models:
            if m.model == d.model:
                return next((x.place for x in m.ranked if x.label == d.label), None)
        return None


def attach_history(drafts: Sequence[Draft], c: Constraints, places: Places) -> None:
    """Spreads (for the noise test) and consistency of every candidate."""
    tables: dict[int, pd.DataFrame] = {}
    for d in drafts:
        steps = series_of(d)
        if id(d.col) not in tables:
            tables[id(d.col)] = series.frame(d.col.series or [d.col])
        table = tables[id(d.col)]
        shown = picked(d.col, d.cell)
        for metric in series.TRACKED:
            s = series.spread(table, shown, metric)
            if s is not None:
                d.spreads[str(metric)] = s
        tg = d.spreads.get(M.TG_TPS)
        cv = tg.between_cv if tg is not None else None
        where = tuple(places.place(col.run, d) for col, _ in steps)
        max_cv = c.max_tg_cv_pct / 100.0
        d.consistency = Consistency(len(steps), cv, where, tuple(regressions(steps)), max_cv)


def tier(d: Draft, rule: bool) -> int:
    """0: consistent (or the rule is off), 1: no history to judge, 2: inconsistent."""
    if not rule or d.consistency is None:
        return 0
    return {True: 0, None: 1, False: 2}[d.consistency.consistent]


def consistency_reason(d: Draft, tier: int) -> list[str]:
    """The candidate's consistency in words, and how it moved the candidate's place."""
    cons = d.consistency
    if cons is None or (cons.runs < 2 and tier == 0):
        return []
    text = cons.text()
    if tier == 2:
        return [f"ranked below the consistent candidates, {text} — the rule: {RULE}"]
    if tier == 1:
        return [f"ranked below the candidates with a consistent history: {text}"]
    return [f"consistent {text}"]
