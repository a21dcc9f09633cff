from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from rtmatrix.results.diff import Direction
from rtmatrix.results.paired import (
    DEFAULT_ALPHA,
    DEFAULT_ROUNDS,
    ROUND_COLUMNS,
    Criterion,
    PairedComparison,
    PairedVerdict,
    decide,
    holm,
    minimum_detectable_effect,
    rounds_frame,
    rounds_needed,
)

V = PairedVerdict


def frame_of(
    pairs: Sequence[tuple[float | None, float | None]], metric: str = "tg_tps", cell: str = "c"
) -> pd.DataFrame:
    rows = [
        {"cell": cell, "metric": metric, "round": k, "a": a, "b": b}
        for k, (a, b) in enumerate(pairs)
    ]
    return rounds_frame(rows)


def lognormal_pairs(
    rng: np.random.Generator, k: int, ratio: float, sd: float = 0.03
) -> list[tuple[float | None, float | None]]:
    a = 100.0 * np.exp(rng.normal(0.0, sd, k))
    b = 100.0 * ratio * np.exp(rng.normal(0.0, sd, k))
    return list(zip(a.tolist(), b.tolist(), strict=True))


def only(comparison: PairedComparison) -> PairedVerdict:
    (check,) = comparison.checks
    return check.verdict


# ----------------------------------------------------------------------------- Holm


def test_holm_adjusted_p_values() -> None:
    # sorted 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> kept at 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert len(holm([])) == 0


def test_holm_family_is_every_check_of_the_comparison() -> None:
    spread = 0.07 * np.array([1.0, -1.0, 0.5, -0.5, 0.8, -0.8, 0.2, -0.2])
    pairs = [(100.0, float(b)) for b in 94.0 * np.exp(spread)]
    alone = decide(frame_of(pairs))
    assert alone.tested == 1 and only(alone) is V.REGRESSION
    p = alone.checks[0].p_worse
    assert p is not None and 0.01 / 40 < p < 0.01  # significant alone, not among 40 checks
    rng = np.random.default_rng(3)
    others = [frame_of(lognormal_pairs(rng, 8, 1.0), cell=f"o{i}") for i in range(39)]
    crowd = decide(pd.concat([frame_of(pairs), *others], ignore_index=True))
    assert crowd.tested == 40
    first = crowd.checks[0]
    assert first.p_worse == pytest.approx(p)
    assert first.p_worse_holm is not None and first.p_worse_holm > 0.01
    assert first.verdict is not V.REGRESSION


# ----------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    ("metric", "ratio", "verdict"),
    [
        ("tg_tps", 0.85, V.REGRESSION),  # higher is better: slower
        ("tg_tps", 1.15, V.IMPROVED),
        ("peak_rss_os_bytes", 1.15, V.REGRESSION),  # lower is better: more memory
        ("peak_rss_os_bytes", 0.85, V.IMPROVED),
        ("tg_tps", 1.0, V.EQUIVALENT),
        ("ttft_s", 1.0, V.EQUIVALENT),
    ],
)
def test_clear_cases(metric: str, ratio: float, verdict: PairedVerdict) -> None:
    pairs = lognormal_pairs(np.random.default_rng(1), 16, ratio, sd=0.02)
    check = decide(frame_of(pairs, metric)).checks[0]
    assert check.verdict is verdict, check.reason
    assert check.ratio is not None and check.ratio == pytest.approx(ratio, rel=0.03)
    assert check.ci is not None and check.ci[0] <= check.ratio <= check.ci[1]


def test_significant_change_below_the_min_effect_is_not_a_regression() -> None:
    pairs = lognormal_pairs(np.random.default_rng(2), 16, 0.99, sd=0.002)
    check = decide(frame_of(pairs)).checks[0]
    assert check.p_worse_holm is not None and check.p_worse_holm < 1e-6
    assert check.verdict is V.EQUIVALENT  # -1 %: significant, but under the 2 % min effect
    strict = decide(frame_of(pairs), {"tg_tps": Criterion.for_metric("tg_tps", min_effect=0.005)})
    assert only(strict) is V.REGRESSION


def test_wide_interval_is_inconclusive_with_a_plan() -> None:
    pairs = lognormal_pairs(np.random.default_rng(4), 4, 1.0, sd=0.05)
    check = decide(frame_of(pairs)).checks[0]
    assert check.verdict is V.INCONCLUSIVE
    assert check.mde is not None and check.mde > check.margin
    assert check.k_needed is not None and check.k_needed > 4
    assert f"would need K={check.k_needed}" in check.reason
    assert "not inside ±5%" in check.reason


def test_constant_rounds_are_exact() -> None:
    same = decide(frame_of([(5e7, 5e7)] * 3, "package_size_bytes")).checks[0]
    assert same.verdict is V.EQUIVALENT and same.ci == (1.0, 1.0) and same.sd_log == 0.0
    grown = decide(frame_of([(5e7, 6.5e7)] * 3, "package_size_bytes")).checks[0]
    assert grown.verdict is V.REGRESSION and grown.p_worse == 0.0
    assert grown.ratio == pytest.approx(1.3)


def test_too_few_rounds_are_inconclusive_and_not_tested() -> None:
    result = decide(frame_of([(100.0, 50.0)]))
    check = result.checks[0]
    assert check.verdict is V.INCONCLUSIVE and check.k == 1 and check.ratio is None
    assert "needs at least 2" in check.reason
    assert result.tested == 0


def test_missing_and_non_positive_values_are_dropped() -> None:
    pairs = [(100.0, 99.0), (None, 98.0), (100.0, float("nan")), (0.0, 99.0), (101.0, -1.0)]
    check = decide(frame_of(pairs + [(100.0, 99.5)] * 3)).checks[0]
    assert (check.k, check.dropped) == (4, 4)


def test_checks_in_input_order_with_their_criteria() -> None:
    rng = np.random.default_rng(5)
    frames = [
        frame_of(lognormal_pairs(rng, 6, 1.0), metric, cell)
        for cell in ("x", "y")
        for metric in ("tg_tps", "cold_start_total_s")
    ]
    checks = decide(pd.concat(frames, ignore_index=True)).checks
    assert [(c.cell, c.metric) for c in checks] == [
        ("x", "tg_tps"), ("x", "cold_start_total_s"), ("y", "tg_tps"), ("y", "cold_start_total_s"),
    ]  # fmt: skip
    cold = checks[1]
    assert cold.direction is Direction.LOWER
    assert (cold.min_effect, cold.margin) == pytest.approx((0.10, 0.25))  # 50 % diff threshold


# ----------------------------------------------------------------------------- input errors


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"lack column\(s\) \['b'\]"):
        decide(pd.DataFrame({"cell": ["c"], "metric": ["tg_tps"], "round": [0], "a": [1.0]}))
    with pytest.raises(ValueError, match="round 0: one row per cell, metric and round"):
        decide(frame_of([(1.0, 1.0)]).pipe(lambda f: pd.concat([f, f])))
    with pytest.raises(ValueError, match="'widgets' has no known direction"):
        decide(frame_of([(1.0, 1.0)] * 3, "widgets"))
    with pytest.raises(ValueError, match="alpha 0: expected a significance level"):
        decide(frame_of([(1.0, 1.0)] * 3), alpha=0)
    assert ROUND_COLUMNS == ("cell", "metric", "round", "a", "b")


# ----------------------------------------------------------------------------- output


def test_json_round_trip_and_frame() -> None:
    rng = np.random.default_rng(6)
    frames = [
        frame_of(lognormal_pairs(rng, 5, 0.8), "tg_tps"),
        frame_of(lognormal_pairs(rng, 3, 1.0, sd=0.1), "pp_tps"),
        frame_of([(1.0, 1.0)], "ttft_s"),
    ]
    result = decide(pd.concat(frames, ignore_index=True))
    text = result.to_json()
    json.loads(text)  # no NaN: allow_nan=False would have raised
    assert PairedComparison.from_json(text) == result
    frame = result.to_frame()
    assert list(frame["verdict"]) == ["regression", "inconclusive", "inconclusive"]
    assert {"ci_low", "ci_high", "p_worse_holm", "mde", "k_needed"} <= set(frame.columns)
    assert result.counts() == {"regression": 1, "improved": 0, "equivalent": 0, "inconclusive": 2}
    with pytest.raises(ValueError, match="not an rtmatrix-paired"):
        PairedComparison.from_dict({"format": "rtmatrix-diff"})


def test_planning_is_consistent() -> None:
    sd, level = 0.045, DEFAULT_ALPHA / 12
    need = rounds_needed(sd, 0.05, level)
    assert need is not None
    assert minimum_detectable_effect(sd, need, level) <= 0.05
    assert minimum_detectable_effect(sd, need - 1, level) > 0.05 or need == 2
    assert minimum_detectable_effect(sd, 10, level) > minimum_detectable_effect(sd, 40, level)
    assert rounds_needed(5.0, 0.01, level) is None  # beyond any K worth planning


# ----------------------------------------------------------------------------- simulation
# Synthetic comparisons shaped like `rtmatrix compare` on the default matrix: 4 cells × 3 checks
# (pp_tps, tg_tps, peak_rss_os_bytes) = 12 checks in one Holm family. Each worker process has its
# own lognormal factor (between-process sd); the machine drifts (a random walk between processes,
# half a round apart, plus a linear trend) and each round runs A and B in a random order; a
# process's value is the median of 5 repetitions with 2 % noise inside the process.

METRICS = ("pp_tps", "tg_tps", "peak_rss_os_bytes")
CELLS = 4


@dataclass(frozen=True)
class Sim:
    rounds: int = DEFAULT_ROUNDS
    process_sd: tuple[float, float] = (0.03, 0.03)  # drawn uniformly per check
    slowdown: float = 0.0  # of tg_tps on side B (a decode slowdown)
    drift_sd: float = 0.03  # per round
    trend: float = -0.004  # per round
    within_sd: float = 0.02
    repetitions: int = 5


def simulate(rng: np.random.Generator, sim: Sim) -> tuple[pd.DataFrame, np.ndarray]:
    """One comparison's rounds, and which checks have the slowdown."""
    n, k = CELLS * len(METRICS), sim.rounds
    metric = np.tile(METRICS, CELLS)
    sd = rng.uniform(*sim.process_sd, n)[:, None]
    b_second = rng.random((n, k)) < 0.5  # order BA or AB
    t_a = np.arange(k) + np.where(b_second, 0.0, 0.5)
    t_b = np.arange(k) + np.where(b_second, 0.5, 0.0)
    walk = np.cumsum(rng.normal(0.0, sim.drift_sd / math.sqrt(2), (n, 2 * k)), axis=1)

    def log_value(t: np.ndarray) -> np.ndarray:
        drift = np.take_along_axis(walk, (2 * t).astype(int), axis=1) + sim.trend * t
        process = rng.normal(0.0, 1.0, (n, k)) * sd
        inside = rng.normal(0.0, sim.within_sd / math.sqrt(sim.repetitions), (n, k))
        return drift + process + inside

    slowed = metric == "tg_tps"
    la = log_value(t_a)
    lb = log_value(t_b) + np.where(slowed, math.log1p(-sim.slowdown), 0.0)[:, None]
    frame = pd.DataFrame(
        {
            "cell": np.repeat([f"cell{i // len(METRICS)}" for i in range(n)], k),
            "metric": np.repeat(metric, k),
            "round": np.tile(np.arange(k), n),
            "a": 100.0 * np.exp(la.ravel()),
            "b": 100.0 * np.exp(lb.ravel()),
        }
    )
    return frame, slowed


def verdicts(seed: int, comparisons: int, sim: Sim) -> tuple[np.ndarray, np.ndarray]:
    """(comparisons × 12) verdicts and the slowed-check mask."""
    rng = np.random.default_rng(seed)
    rows, slowed = [], np.zeros(0, dtype=bool)
    for _ in range(comparisons):
        frame, slowed = simulate(rng, sim)
        rows.append([c.verdict for c in decide(frame).checks])
    return np.array(rows), slowed


def test_aa_false_alarms_with_between_process_variance_and_drift() -> None:
    v, _ = verdicts(11, 300, Sim(process_sd=(0.03, 0.10)))
    regression = v == V.REGRESSION
    per_cell = regression.reshape(len(v), CELLS, len(METRICS)).any(axis=2)
    assert per_cell.mean() <= 0.01, f"{per_cell.sum()} of {per_cell.size} cell comparisons"
    # Holm bounds the family-wise rate at alpha = 1 %; 300 comparisons measure it to about ±0.6 %
    assert regression.any(axis=1).mean() <= 0.02
    assert (v == V.EQUIVALENT).mean() > 0.3  # most equivalence is shown even at 10 % sd


@pytest.mark.parametrize(("slowdown", "power"), [(0.10, 0.95), (0.05, 0.80)])
def test_power_at_the_default_rounds(slowdown: float, power: float) -> None:
    v, slowed = verdicts(12, 150, Sim(slowdown=slowdown))
    detected = (v[:, slowed] == V.REGRESSION).mean()
    assert detected >= power, f"detected {detected:.3f} of {slowed.sum() * len(v)} slowed checks"
    assert (v[:, slowed] == V.EQUIVALENT).mean() <= 0.05  # TOST: a change of the margin or more
    assert (v[:, ~slowed] == V.REGRESSION).mean() <= 0.01


def test_too_few_rounds_are_inconclusive_rather_than_equivalent() -> None:
    v, _ = verdicts(13, 50, Sim(rounds=3))
    assert (v == V.INCONCLUSIVE).mean() >= 0.75
    v, slowed = verdicts(14, 50, Sim(rounds=3, slowdown=0.10))
    assert (v[:, slowed] == V.EQUIVALENT).mean() <= 0.01
