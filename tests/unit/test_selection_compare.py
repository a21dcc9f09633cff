"""Two candidates on one criterion: negligible KLDs tie, single values are judged by rtmatrix
diff's threshold, a missing figure loses, and dominance needs a strict win."""

from __future__ import annotations

from rtmatrix.results.columns import columns
from rtmatrix.selection.candidates import Draft, draft
from rtmatrix.selection.compare import compare, dominates, lexical
from rtmatrix.selection.constraints import Constraints
from tests.helpers.selection_runs import REAL, make_cell, make_run


def _drafts(*cells: dict[str, object]) -> list[Draft]:
    cols = columns([make_run(0, list(cells))])
    return [draft(col, REAL, "q8_0", col.cells[0][1]) for col in cols]


def test_kld_both_below_negligible_tie_else_the_lower_wins() -> None:
    a, b = _drafts(make_cell("alpha", "q8_0", tg=1, kld=0.001), make_cell("beta", "q8_0", tg=1))
    c = Constraints()
    assert compare(a, b, "quality", c).sign == 0
    (worse,) = _drafts(make_cell("gamma", "q8_0", tg=1, kld=0.2))
    j = compare(a, worse, "quality", c)
    assert j.sign == -1 and j.text == "KLD 0.001 nats vs 0.2 nats"


def test_single_values_within_diffs_threshold_tie() -> None:
    a, b = _drafts(make_cell("alpha", "q8_0", tg=100, samples=[100.0]),
                   make_cell("beta", "q8_0", tg=99, samples=[99.0]))  # fmt: skip
    j = compare(a, b, "tg", Constraints())
    assert j.sign == 0 and "single values within rtmatrix diff's" in j.text


def test_a_missing_figure_loses_and_dominance_needs_a_strict_win() -> None:
    a, b = _drafts(make_cell("alpha", "q8_0", tg=200, kld=0.001),
                   make_cell("beta", "q8_0", tg=100, kld=None))  # fmt: skip
    c = Constraints()
    assert compare(a, b, "quality", c).sign == -1 and compare(b, a, "quality", c).sign == 1
    assert dominates(a, b, c, ["quality", "tg"]) and not dominates(b, a, c, ["quality", "tg"])
    assert not dominates(a, a, c, ["quality", "tg"])
    j, criterion = lexical(a, b, c)
    assert j.sign == -1 and criterion == c.priorities[0]
