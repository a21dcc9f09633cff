from __future__ import annotations

import math

import pytest

from rtmatrix.results.stats import (
    Method,
    bootstrap_ratio_ci,
    compare_samples,
    mann_whitney_u,
    min_p_value,
)

# (x, y, U of x, two-sided p) recorded from scipy.stats.mannwhitneyu 1.17.1 (method "auto"); the
# wrapper must keep giving them (a scipy that changed "auto" or the corrections would show here)
KNOWN = [
    # exact distribution (no ties, a sample of at most 8)
    ([1, 2, 3], [4, 5, 6], 0.0, 0.1),
    ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 0.0, 0.007936507936507936),
    ([19.1, 20.3, 18.7, 21.0, 19.9, 20.5], [17.2, 18.1, 16.9, 17.7, 18.4, 17.0], 36.0,
     0.0021645021645021645),
    ([4.1, 4.3, 4.2, 4.6], [3.2, 3.3, 3.1, 3.6], 16.0, 0.02857142857142857),
    ([2.5, 7.5, 11.5], list(range(1, 13)), 20.0, 0.8395604395604395),
    # ties: normal approximation with tie and continuity corrections
    ([1, 2, 2, 3, 4], [2, 3, 3, 5, 6, 7], 6.0, 0.11390314458853068),
    # both larger than 8: normal approximation
    (
        [0.8, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46],
        [1.15, 0.88, 0.9, 0.74, 1.21, 1.3, 1.05, 0.95, 1.02, 0.99],
        68.0,
        0.18587673236587576,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("x", "y", "u", "p"), KNOWN)
def test_mann_whitney_matches_scipy(x: list[float], y: list[float], u: float, p: float) -> None:
    got_u, got_p = mann_whitney_u(x, y)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-12)


def test_mann_whitney_is_symmetric() -> None:
    x, y = [3.0, 1.0, 4.0, 1.5, 5.0], [9.0, 2.0, 6.0, 5.5, 3.5, 8.0]
    u_xy, p_xy = mann_whitney_u(x, y)
    u_yx, p_yx = mann_whitney_u(y, x)
    assert u_xy + u_yx == len(x) * len(y)
    assert p_xy == pytest.approx(p_yx)


def test_all_values_equal_gives_p_1() -> None:
    assert mann_whitney_u([5.0] * 4, [5.0] * 4) == (8.0, 1.0)


def test_empty_sample_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney_u([], [1.0])


@pytest.mark.parametrize(
    ("n1", "n2", "p"), [(2, 2, 1 / 3), (3, 3, 0.1), (4, 4, 2 / 70), (5, 5, 2 / 252), (1, 1, 1.0)]
)
def test_min_p_value_is_complete_separation(n1: int, n2: int, p: float) -> None:
    assert min_p_value(n1, n2) == pytest.approx(p)
    if n1 > 1:
        assert mann_whitney_u(range(n1), range(100, 100 + n2))[1] == pytest.approx(p)


def test_bootstrap_ci_brackets_the_ratio_and_is_reproducible() -> None:
    base = [100.0, 102.0, 98.0, 101.0]
    cand = [80.0, 81.0, 79.5, 80.5]
    lo, hi = bootstrap_ratio_ci(base, cand)
    assert lo <= 0.8 <= hi < 1.0
    assert (lo, hi) == bootstrap_ratio_ci(base, cand)
    lo, hi = bootstrap_ratio_ci(base, base)
    assert lo <= 1.0 <= hi


def test_bootstrap_of_a_zero_median_base_is_nan() -> None:
    assert all(math.isnan(v) for v in bootstrap_ratio_ci([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]))
    assert not compare_samples([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]).different


@pytest.mark.parametrize(
    ("n1", "n2", "method"),
    [
        (8, 8, Method.MANN_WHITNEY),
        (5, 5, Method.MANN_WHITNEY),  # p can reach 0.0079 < 0.01
        (4, 4, Method.BOOTSTRAP),  # p cannot go below 0.029
        (3, 3, Method.BOOTSTRAP),
        (2, 2, Method.TOO_FEW),
        (2, 8, Method.TOO_FEW),
        (1, 1, Method.THRESHOLD_ONLY),
        (0, 5, Method.THRESHOLD_ONLY),
    ],
)
def test_compare_samples_picks_the_test(n1: int, n2: int, method: Method) -> None:
    base = [100.0 + i for i in range(n1)]
    cand = [50.0 + i for i in range(n2)]
    result = compare_samples(base, cand, alpha=0.01)
    assert result.method is method
    assert result.different is (method is not Method.TOO_FEW)


def test_compare_samples_overlapping_samples_are_not_different() -> None:
    base = [100.0, 130.0, 90.0, 120.0, 95.0, 125.0]
    cand = [85.0, 125.0, 80.0, 115.0, 90.0, 110.0]
    result = compare_samples(base, cand)
    assert result.method is Method.MANN_WHITNEY
    assert not result.different
    assert result.p_value is not None and result.p_value > 0.1
