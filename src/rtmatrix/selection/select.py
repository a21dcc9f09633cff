"""The selection verdict: per model, which candidate to pick under a team's constraints, why,
and why the others are out.

Models come real checkpoints first (a cell's ``fixture.source``, or a model rtmatrix ships as
a real one), then the architecture-family toys (``fixture.architecture``), then the seeded
synthetic models (:mod:`rtmatrix.selection.models`). A candidate is a runtime row × dtype × the
settings it needed (:mod:`~rtmatrix.selection.candidates`); it is excluded by every hard limit
it misses, each with its figure (:mod:`~rtmatrix.selection.limits`). The eligible ones are
ordered by consistency over runs (:mod:`~rtmatrix.selection.consistency`), then the Pareto layer
over quality × speed × memory, then the priorities; two figures within noise of each other (the
report's ranking test, :func:`rtmatrix.results.ranking.judge`) do not decide
(:mod:`~rtmatrix.selection.compare`, :mod:`~rtmatrix.selection.ordering`). The answer and its
renderings are :mod:`~rtmatrix.selection.answer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rtmatrix.results import series
from rtmatrix.results.columns import as_dict, columns, common_params
from rtmatrix.results.records import RunRecord
from rtmatrix.selection.answer import ModelSelection, Selection
from rtmatrix.selection.candidates import drafts, groups, series_of
from rtmatrix.selection.consistency import Places, attach_history
from rtmatrix.selection.constraints import Constraints
from rtmatrix.selection.limits import check_at, judge_limits
from rtmatrix.selection.models import host_of
from rtmatrix.selection.ordering import rank


def _select(runs: Sequence[RunRecord], c: Constraints, places: Places | None) -> Selection:
    ordered = series.by_time(runs)
    shown = series.shown_columns(columns(list(ordered)))
    series.attach_picks(shown)
    found_by_model = groups(shown)
    headlines = {
        m: common_params(cell for _, cell in found) for m, (_, found) in found_by_model.items()
    }
    models = []
    for model, (kind, found) in found_by_model.items():
        ds = drafts(model, found, headlines[model])
        notes = judge_limits(ds, c, headlines)
        if places is not None:
            attach_history(ds, c, places)
        eligible = [d for d in ds if not d.failures]
        ranked = tuple(rank(eligible, c)) if eligible else ()
        excluded = tuple(d.freeze() for d in sorted(ds, key=lambda d: d.label) if d.failures)
        newest = max((d.col for d in ds), key=lambda col: col.run_index)
        n = max((len(series_of(d)) for d in ds), default=1)
        models.append(ModelSelection(model, kind, host_of(newest), str(newest.run["run_id"]),
                                     dict(headlines[model] or {}), ranked, excluded,
                                     tuple(notes), n))  # fmt: skip
    return Selection(c, tuple(models), tuple(str(r["run_id"]) for r in ordered))


def _alone(run: RunRecord, c: Constraints) -> Selection:
    """One run's own selection, without history (where a candidate stood in that run)."""
    return _select([run], c, None)


def select(runs: Sequence[RunRecord], constraints: Constraints | None = None) -> Selection:
    """The selection verdict over one run or a history of runs (any order; the newest decides
    each candidate's figures, the others its consistency). SelectionError for a limit whose
    ``at`` names no cell."""
    c = constraints or Constraints()
    check_at(runs, c)
    return _select(runs, c, Places(c, _alone))


def constraints_for(runs: Iterable[RunRecord], overrides: Sequence[str] = ()) -> Constraints:
    """The newest run's matrix ``[selection]`` table (when its record keeps one) over the
    defaults, then ``KEY=VALUE`` overrides."""
    newest = series.by_time(list(runs))
    table = as_dict(as_dict(newest[-1].get("matrix")).get("selection")) if newest else {}
    return Constraints.from_table(table).with_overrides(overrides)
