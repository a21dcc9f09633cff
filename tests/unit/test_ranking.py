"""Best per criterion and ties within noise, with the statistics rtmatrix diff uses."""

from __future__ import annotations

from typing import Any, cast

from rtmatrix.results import ranking, series
from rtmatrix.results.columns import Column, Spread, columns, row_key
from rtmatrix.results.diff import Direction
from rtmatrix.results.records import RunRecord
from tests.browser.runs import history_runs, sample_run

KEY = "tiny/f32|t2-c256-p16-g24"


def _col(name: str) -> Column:
    run = cast(RunRecord, {"run_id": "r"})  # ranking reads only the column's own fields
    return Column(0, run, name, {"version": "1"}, [])


def _entry(
    name: str, samples: list[float], medians: tuple[float, ...] = (), swing: float | None = None
) -> ranking.Entry:
    s = sorted(samples)
    median = s[len(s) // 2] if s else 0.0
    spread = Spread(swing, len(samples), swing if medians else None, len(medians), medians)
    return ranking.Entry(_col(name), median, tuple(samples), spread)


def _ranked(*entries: ranking.Entry, direction: Direction = Direction.HIGHER) -> dict[str, Any]:
    return {e.col.runtime: r for e, r in ranking.rank(list(entries), direction)}


def test_best_and_a_row_separated_by_mann_whitney() -> None:
    fast = _entry("fast", [100, 101, 102, 103, 104])
    slow = _entry("slow", [90, 91, 92, 93, 94])
    r = _ranked(fast, slow)
    assert r["fast"].best and r["fast"].place == 1 and r["fast"].of == 2
    assert not r["slow"].best and not r["slow"].tie and r["slow"].place == 2
    assert "Mann–Whitney U p=0.00794" in r["slow"].test and "differs" in r["slow"].test


def test_overlapping_samples_are_a_tie() -> None:
    a = _entry("a", [100, 103, 98, 101, 99])
    b = _entry("b", [98, 101, 96, 99, 100])
    r = _ranked(a, b)
    assert r["a"].best and r["b"].tie and "within noise" in r["b"].test


def test_lower_is_better_for_time() -> None:
    quick = _entry("quick", [1.0, 1.01, 1.02, 1.03, 1.04])
    slow = _entry("slow", [2.0, 2.01, 2.02, 2.03, 2.04])
    r = _ranked(slow, quick, direction=Direction.LOWER)
    assert r["quick"].best and r["slow"].place == 2 and not r["slow"].tie


def test_too_few_samples_are_untested_and_single_values_tie_only_when_equal() -> None:
    r = _ranked(_entry("a", [100, 101]), _entry("b", [80, 81]))
    assert not r["b"].tie and r["b"].untested and "too few samples" in r["b"].test
    r = _ranked(_entry("a", [100.0]), _entry("b", [99.0]), _entry("c", [100.0]))
    assert not r["b"].tie and "single values" in r["b"].test
    assert r["c"].tie


def test_run_medians_are_compared_when_both_rows_have_enough_runs() -> None:
    a = _entry("a", [100, 101, 102, 103, 104], medians=(100.0, 110.0, 95.0), swing=0.07)
    b = _entry("b", [90, 91, 92, 93, 94], medians=(92.0, 104.0, 88.0), swing=0.08)
    r = _ranked(a, b)
    assert "run medians" in r["b"].test and r["b"].tie  # runs overlap: no separation
    few = _entry("b", [90, 91, 92, 93, 94], medians=(92.0, 104.0), swing=0.08)
    assert "repetitions" in _ranked(a, few)["b"].test


def test_a_row_that_swings_more_than_its_lead_says_so() -> None:
    a = _entry("a", [100, 101, 102, 103, 104], swing=0.05)
    b = _entry("b", [97, 98, 99, 100, 101], swing=0.001)
    c = _entry("c", [50, 51, 52, 53, 54], swing=0.001)
    r = _ranked(a, b, c)
    assert "more than its 3.0% lead over b 1" in r["a"].swings
    assert r["b"].swings == ""  # its lead over c is far larger than its spread
    assert r["c"].swings == ""  # the last has no lead


def test_attach_ranks_shown_rows_and_never_a_contended_figure() -> None:
    shown = series.shown_columns(columns(series.by_time(history_runs())))
    series.attach(shown)
    ranking.attach(shown)
    by = {c.runtime: c for c in shown}
    assert by["llama_cpp"].ranks[(KEY, "pp_tps")].best
    ort = by["onnxruntime"]
    # its newest cell ran contended; the rank is of the figure picked from an older run
    picked = next(iter(ort.picks.values())).cell
    assert not picked["contended"]
    assert (row_key(picked), "pp_tps") in ort.ranks
    assert by["tvm_aot"].ranks[(KEY, "pp_tps")].swings
    genai = by["onnxruntime_genai"].ranks[(KEY, "ttft_s")]
    assert genai.tie and "run medians" in genai.test


def test_a_contended_figure_without_an_older_run_is_not_ranked() -> None:
    run = history_runs()[-1]  # alone: nothing to pick from
    shown = series.shown_columns(columns([run]))
    series.attach(shown)
    ranking.attach(shown)
    ort = next(c for c in shown if c.runtime == "onnxruntime")
    assert not ort.picks and (KEY, "pp_tps") not in ort.ranks
    of = next(c for c in shown if c.runtime == "llama_cpp").ranks[(KEY, "pp_tps")].of
    assert of == 4  # five rows, one contended


def test_one_row_is_not_ranked() -> None:
    cols = [c for c in columns([sample_run()]) if c.runtime == "llama_cpp"]
    ranking.attach(cols)
    assert cols[0].ranks == {}
