"""Judging a paired comparison from synthetic per-round records (no process is run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pandas as pd

from rtmatrix.results.comparison import (
    EXIT_INCONCLUSIVE,
    EXIT_NEW_FAILURE,
    EXIT_PASS,
    EXIT_REGRESSION,
    ROUND_TABLE_COLUMNS,
    RoundRecord,
    round_value,
    rounds_table,
    samples_table,
)
from rtmatrix.results.diff import Mark
from rtmatrix.results.paired import PairedVerdict
from rtmatrix.results.records import MetricRecord
from tests.helpers.comparisons import KEY, comparison, record, rounds_of


def partial(**fields: Any) -> MetricRecord:
    """A metric record with only the keys ``round_value`` reads."""
    return cast(MetricRecord, fields)


def verdicts(c: object) -> dict[str, str]:
    return {ch.metric: str(ch.verdict) for ch in c.paired.checks}  # type: ignore[attr-defined]


def test_round_value_is_the_median_of_the_process_samples_or_its_single_value() -> None:
    assert round_value(partial(value=9.0, samples=[1.0, 5.0, 3.0])) == (3.0, 3)
    assert round_value(partial(value=7, unit="bytes")) == (7.0, 1)
    assert round_value(partial(value=None, reason="x")) == (None, 0)
    assert round_value(None) == (None, 0)


def test_rounds_table_is_tidy_one_row_per_cell_metric_round() -> None:
    recs = list(rounds_of(3))
    frame = rounds_table(recs)
    assert list(frame.columns) == list(ROUND_TABLE_COLUMNS)
    assert not frame.duplicated(["cell", "metric", "round"]).any()
    assert set(frame["round"]) == {1, 2, 3} and frame["used"].all()
    assert {"tg_tps", "peak_rss_os_bytes", "cold_start_load_s"} <= set(frame["metric"])
    assert "license" not in set(frame["metric"])  # no direction: not a figure
    assert set(frame["order"]) <= {"ab", "ba"}
    tg = frame[(frame["metric"] == "tg_tps") & (frame["round"] == 1)].iloc[0]
    assert tg["n_a"] == len(record()["metrics"]["tg_tps"]["samples"])


def test_a_vs_a_passes_and_a_slowdown_is_a_regression_with_an_explanation() -> None:
    same = comparison(list(rounds_of(24, seed=1)))
    assert same.code == EXIT_PASS, same.outcome.headline
    assert set(verdicts(same).values()) == {"equivalent"}
    slow = comparison(list(rounds_of(24, seed=2, b={"tg": 0.85})))
    assert slow.code == EXIT_REGRESSION
    assert verdicts(slow)["tg_tps"] == "regression" and verdicts(slow)["pp_tps"] != "regression"
    assert slow.flagged() == [KEY]
    why = slow.explanations[KEY]
    assert why.moved == ["decode"]  # prefill and load did not move
    assert [p.name for p in why.packages][:1] == ["llama-cpp-python"]  # changed first


def test_outcome_change_in_one_round_is_a_new_failure_with_the_counts() -> None:
    crash = {"status": "crash", "verdict": "FAIL", "stderr": "Segmentation fault at 0xdeadbeef"}
    c = comparison(list(rounds_of(6, b_round={4: crash})))
    assert c.code == EXIT_NEW_FAILURE
    (cell,) = c.cells
    assert cell.mark is Mark.NEW_FAILURE and cell.ok_rounds == 5
    assert any("B: crash 1, ok 5" in r for r in cell.reasons)
    why = c.explanations[KEY]
    assert why.ended["b"].startswith("crash")
    assert "B: Segmentation fault at <addr>" in why.sections()[-1][1]
    doc = c.to_dict()
    assert doc["flagged"] == [KEY] and doc["result"] == "new-failure"


def test_contended_rounds_are_skipped_and_counted_all_contended_is_inconclusive() -> None:
    some = comparison(list(rounds_of(8, b_round={2: {"contended": True}, 5: {"contended": True}})))
    (cell,) = some.cells
    assert cell.contended_rounds == 2 and cell.used_rounds == 6
    assert {ch.k for ch in some.paired.checks} == {6}
    assert any("2 contended round(s)" in n for n in some.notes)
    busy = {"contended": True}
    every = comparison(list(rounds_of(4, a=busy, b=busy)))
    assert every.code == EXIT_INCONCLUSIVE and every.cells[0].all_contended
    assert every.paired.checks == []


def test_a_cell_not_ok_on_both_sides_is_not_judged_and_does_not_fail() -> None:
    killed = {"status": "oom-killed", "verdict": "WARN", "rss": 1.2}
    c = comparison(list(rounds_of(1, a=killed, b=killed)) + list(rounds_of(24, key="x|y|z")))
    by = {cell.key: cell for cell in c.cells}
    assert by[KEY].mark is Mark.SAME and by[KEY].ok_rounds == 0
    assert {ch.cell for ch in c.paired.checks} == {"x|y|z"}
    assert c.code == EXIT_PASS


def test_unavailable_on_both_sides_is_left_out_on_one_side_inconclusive() -> None:
    gone = {"status": "unavailable", "verdict": "unavailable"}
    both = comparison(list(rounds_of(1, a=gone, b=gone)) + list(rounds_of(24, key="x|y|z")))
    assert both.cells[0].left_out and both.code == EXIT_PASS
    one = comparison(list(rounds_of(1, b=gone)))
    assert one.cells[0].mark is Mark.NOT_COMPARABLE and one.code == EXIT_INCONCLUSIVE


def test_small_k_is_inconclusive_with_the_k_it_would_need() -> None:
    c = comparison(list(rounds_of(3, sd=0.2)))
    assert c.code == EXIT_INCONCLUSIVE
    tg = next(ch for ch in c.paired.checks if ch.metric == "tg_tps")
    assert tg.verdict is PairedVerdict.INCONCLUSIVE and tg.k_needed and tg.k_needed > 3


def test_json_has_tidy_rounds_decisions_and_no_nan() -> None:
    c = comparison(list(rounds_of(5, b={"tg": 0.8})))
    doc = json.loads(c.to_json())
    assert doc["format"] == "rtmatrix-compare" and doc["exit_code"] == c.code
    frame = pd.DataFrame(doc["rounds"])
    assert len(frame) == len(c.rounds) and set(ROUND_TABLE_COLUMNS) <= set(frame.columns)
    assert doc["decisions"]["format"] == "rtmatrix-paired"
    assert {p["kind"] for p in doc["package_differences"]} == {"changed", "only in A", "only in B"}
    assert doc["explanations"][KEY]["sections"][0][0].startswith("stack")
    assert doc["explanations"][KEY]["sections"][1][0] == "phases"


def test_records_out_of_round_order_are_grouped() -> None:
    recs = list(rounds_of(4))
    shuffled = recs[::-1]
    assert [ch.ratio for ch in comparison(shuffled).paired.checks] == [
        ch.ratio for ch in comparison(recs).paired.checks
    ]
    assert isinstance(recs[0], RoundRecord)


def test_the_measured_noise_is_set_against_the_ledgers_typical(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rtmatrix.results.comparison import noise_notes, typical_noise

    ledger = tmp_path / "ledger.csv"
    ledger.write_text(
        "condition,metric,sd_log\nA/A,tg_tps,0.08\nA/A,tg_tps,0.06\n5%,tg_tps,0.5\n"
        "A/A,peak_rss_os_bytes,0.001\n",
        "utf-8",
    )
    typical = typical_noise(ledger)
    assert typical == {"tg_tps": (0.07, 2)}
    checks = [SimpleNamespace(cell="c", metric="tg_tps", sd_log=0.14),
              SimpleNamespace(cell="c", metric="pp_tps", sd_log=0.05),
              SimpleNamespace(cell="c", metric="peak_rss_os_bytes", sd_log=0.01)]  # fmt: skip
    notes = noise_notes(checks, typical)
    assert len(notes) == 2
    assert "14.0 %" in notes[0] and "7.0 % over 2 A/A" in notes[0] and "noisier" in notes[0]
    assert "no A/A ledger" in notes[1]
    assert typical_noise(tmp_path / "absent.csv") == {}
    moded = tmp_path / "moded.csv"
    moded.write_text(
        "condition,metric,sd_log,mode\nA/A,tg_tps,0.08,\nA/A,tg_tps,0.02,duet\n", "utf-8"
    )
    assert typical_noise(moded) == {"tg_tps": (0.08, 1)}  # no mode: sequential
    assert typical_noise(moded, "duet") == {"tg_tps": (0.02, 1)}


def test_a_duet_round_that_did_not_overlap_is_skipped_and_says_why() -> None:
    def duet(ok: bool) -> dict[str, Any]:
        return {"evidence": {"duet": {"overlap": 0.95 if ok else 0.3, "overlapped": ok}}}

    recs = list(rounds_of(8, b_round={3: duet(False)}, a=duet(True), b=duet(True)))
    c = comparison(recs)
    (cell,) = c.cells
    assert cell.used_rounds == 7 and cell.not_overlapped_rounds == 1
    assert cell.contended_rounds == 0
    assert any("1 duet or alternate round(s) skipped" in n for n in c.notes)
    table = rounds_table(recs)
    skipped = table[~table["used"]]
    assert set(skipped["round"]) == {3} and set(skipped["contended"]) == {"not-overlapped"}


def test_a_warn_in_one_round_of_b_is_intermittent_noise_not_a_new_failure() -> None:
    c = comparison(list(rounds_of(24, b_round={7: {"verdict": "WARN"}})))
    (cell,) = c.cells
    assert cell.mark is Mark.NOISE and c.code != EXIT_NEW_FAILURE
    assert any("intermittent: B's verdict was worse in 1 of 24 rounds" in r for r in cell.reasons)


def test_a_warn_in_every_round_or_most_rounds_of_b_is_a_new_failure() -> None:
    every = comparison(list(rounds_of(2, b={"verdict": "WARN"})))  # consistent, even at K = 2
    assert every.code == EXIT_NEW_FAILURE and every.cells[0].mark is Mark.NEW_FAILURE
    most = comparison(list(rounds_of(24, b_round={r: {"verdict": "WARN"} for r in range(1, 8)})))
    assert most.cells[0].mark is Mark.NEW_FAILURE
    assert any("in 7 of 24 rounds (the other side 0" in r for r in most.cells[0].reasons)


def test_the_intermittent_verdict_rule_is_calibrated_under_a_vs_a() -> None:
    """Both sides WARN in each round with the same probability: the sign test flags a new
    failure at most at its level (simulated, 400 comparisons of 24 rounds, flake rate 10 %: a
    new failure needs A never to warn and B to warn in 5 or more rounds)."""
    import numpy as np

    from rtmatrix.results.comparison import VERDICT_ALPHA, _intermittent

    rng = np.random.default_rng(5)
    flagged = 0
    for _ in range(400):
        warn = rng.random((2, 24)) < 0.10
        recs = {
            side: [record(verdict="WARN" if w else "PASS") for w in warn[i]]
            for i, side in enumerate("ab")
        }
        if warn[1].any() and not warn[0].any():  # B's worst is worse: a new failure
            mark, _ = _intermittent(Mark.NEW_FAILURE, [], recs)
            flagged += mark is Mark.NEW_FAILURE
    # P(A never warns) x P(B warns in >= 5 of 24) = 0.080 x 0.085 = 0.7 %
    assert flagged / 400 <= VERDICT_ALPHA


def test_samples_table_has_one_row_per_counted_repetition_with_side_and_position() -> None:
    recs = list(rounds_of(3))
    table = samples_table(recs, ("pp_tps",))
    n = len(recs[0].record["metrics"]["pp_tps"]["samples"])
    assert len(table) == 3 * 2 * n and set(table["side"]) == {"a", "b"}
    first = table[(table["round"] == 1) & (table["side"] == recs[0].side)]
    assert list(first["rep"]) == list(range(n)) and set(first["position"]) == {recs[0].position}
    assert first["value"].tolist() == recs[0].record["metrics"]["pp_tps"]["samples"]
