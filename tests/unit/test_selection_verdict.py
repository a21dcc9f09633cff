"""What is said of one candidate: figures in their limit's unit, and consistency over runs in
words (its most held place, noisy or unexplained runs)."""

from __future__ import annotations

from rtmatrix.selection.constraints import LIMITS
from rtmatrix.selection.verdict import BY_METRIC, Consistency, Figure, Regression, num_text, show


def test_a_figure_is_shown_in_its_limits_unit_with_the_digits_that_matter() -> None:
    assert [num_text(v) for v in (0, 508.4, 0.08123, 3.6e-11)] == ["0", "508", "0.0812", "3.6e-11"]
    rss = BY_METRIC["peak_rss_os_bytes"]
    assert show(rss, 508 * 2**20) == "508 MiB"
    assert {s.metric for s in LIMITS} == set(BY_METRIC)


def test_a_figure_is_a_number_only_when_it_was_measured_as_one() -> None:
    assert Figure("tg_tps", 12, "tokens/s").number == 12.0
    assert Figure("license", "MIT", "text").number is None
    assert Figure("flag", True, "").number is None
    assert Figure("tg_tps", None, "tokens/s", reason="crashed").to_dict()["reason"] == "crashed"


def test_consistency_holds_a_place_and_judges_spread_and_explanations() -> None:
    unexplained = Regression("r2", "-", "tg_tps - 20%", "")
    steady = Consistency(3, 0.01, (1, 1, 2), (), 0.05)
    assert steady.held == (1, 2) and steady.consistent
    assert steady.text().startswith("over 3 runs: TG spread ±1.0% run to run (≤ 5%)")
    noisy = Consistency(3, 0.3, (2, None, 1), (unexplained,), 0.05)
    assert noisy.consistent is False and noisy.held == (1, 1)
    assert "unexplained: nothing recorded changed" in noisy.text()
    alone = Consistency(1, None, (1,), (), 0.05)
    assert alone.consistent is None and alone.text().startswith("one run")
    assert Consistency(2, None, (None, None), (), 0.05).held == (None, 0)
