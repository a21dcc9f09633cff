"""Consistency over runs: the chapter's rule — a consistent second place beats a noisy one-time
winner — and a regression an upgrade explains."""

from __future__ import annotations

from rtmatrix.selection import Constraints, select
from rtmatrix.selection.consistency import RULE
from tests.helpers.selection_runs import labels, make_history, model_in


def test_a_consistent_second_place_beats_a_noisy_one_time_winner() -> None:
    runs = make_history([100, 101, 99], [95, 60, 130], ["1.0"] * 3)
    newest_alone = model_in(select([runs[-1]]))
    assert labels(newest_alone.ranked) == ["beta q8_0", "alpha q8_0"]  # the one-time winner
    sel = select(list(reversed(runs)))  # any order: the newest decides, the rest is history
    m = model_in(sel)
    assert m.runs == 3 and m.run_id == runs[-1]["run_id"]
    alpha, beta = m.ranked
    assert (alpha.label, beta.label) == ("alpha q8_0", "beta q8_0")
    assert alpha.consistency is not None and beta.consistency is not None
    assert alpha.consistency.consistent and alpha.consistency.places == (1, 1, 2)
    assert alpha.consistency.held == (1, 2)
    assert beta.consistency.consistent is False and beta.consistency.places == (2, 2, 1)
    assert beta.consistency.tg_cv is not None and beta.consistency.tg_cv > 0.3
    (reg,) = beta.consistency.regressions
    assert reg.run_id == runs[1]["run_id"] and not reg.explained and "tg_tps -" in reg.text
    why = "; ".join(beta.reasons)
    assert "ranked below the consistent candidates" in why and RULE in why
    assert "unexplained: nothing recorded changed" in why
    assert any(r.startswith("consistent over 3 runs: TG spread ±1.0%") for r in alpha.reasons)
    # without the rule, their TG run medians are within noise of each other: tied
    off = model_in(select(runs, Constraints().with_overrides(["consistency_rule=false"])))
    assert [c.place for c in off.ranked] == [1, 1] and off.ranked[0].tied_with == ("beta q8_0",)


def test_a_regression_an_upgrade_explains_keeps_a_candidate_consistent() -> None:
    runs = make_history([100, 100, 85], [100, 100, 85], ["1.0", "1.0", "2.0"])
    m = model_in(select(runs))
    alpha, beta = m.ranked
    assert alpha.label == "alpha q8_0" and alpha.consistency is not None
    (reg,) = alpha.consistency.regressions
    assert reg.explained and reg.because == "alpha 1.0 → 2.0"
    assert alpha.consistency.consistent
    assert beta.consistency is not None and beta.consistency.consistent is False
