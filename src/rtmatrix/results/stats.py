"""Two-sample tests for repeated measurements: Mann–Whitney U and a bootstrap CI on the ratio of
medians. numpy only (no scipy); ``mann_whitney_u`` agrees with ``scipy.stats.mannwhitneyu``
(two-sided, continuity-corrected normal approximation with the tie correction; the exact
distribution when there are no ties and one sample has at most 8 values, as scipy's "auto").

``compare_samples`` picks the test the way asv's ``is_different`` does: Mann–Whitney U when the
sample sizes let it reach ``alpha`` at all (4 + 4 values need p = 0.029, 5 + 5 reach 0.0079),
else a percentile bootstrap CI of the ratio of medians, else (fewer than 3 values on a side) it
says the samples are too few to tell a change from noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

MIN_BOOTSTRAP_SAMPLES = 3  # below this a resampled median is one of the values themselves
BOOTSTRAP_ROUNDS = 4000


class Method(StrEnum):
    """How a metric's two sides were compared."""

    MANN_WHITNEY = "mann-whitney"
    BOOTSTRAP = "bootstrap"
    THRESHOLD_ONLY = "threshold-only"  # single values (no repeated samples)
    TOO_FEW = "too-few-samples"  # repeated, but too few on a side to separate change from noise


@dataclass(frozen=True)
class SampleTest:
    method: Method
    different: bool
    p_value: float | None = None
    ci: tuple[float, float] | None = None  # CI of median(candidate) / median(base)


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mid-ranks (1-based) and the sizes of the groups of tied values."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    _, first, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    mid = first + (counts + 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(mid, counts)
    return ranks, counts


def _u_counts(n1: int, n2: int) -> np.ndarray:
    """Number of arrangements giving each U in 0..n1*n2 (no ties): f(m, n) = f(m-1, n) shifted by
    n, plus f(m, n-1); built up one value of the first sample at a time."""
    # table[n] = counts for (m, n); start at m = 0: exactly one arrangement with U = 0
    table = [np.ones(1, dtype=np.float64) for _ in range(n2 + 1)]
    for m in range(1, n1 + 1):
        row = [np.ones(1, dtype=np.float64)]  # n = 0: U = 0 only
        for n in range(1, n2 + 1):
            out = np.zeros(m * n + 1)
            prev_m = table[n]  # (m-1, n): U shifted by n
            out[n : n + len(prev_m)] += prev_m
            prev_n = row[n - 1]  # (m, n-1)
            out[: len(prev_n)] += prev_n
            row.append(out)
        table = row
    return table[n2]


def _exact_p(u: float, n1: int, n2: int) -> float:
    counts = _u_counts(n1, n2)
    total = counts.sum()
    k = round(u)
    cdf = counts[: k + 1].sum() / total
    sf = counts[k:].sum() / total
    return float(min(1.0, 2.0 * min(cdf, sf)))


def _asymptotic_p(u: float, n1: int, n2: int, tie_counts: np.ndarray) -> float:
    n = n1 + n2
    tie_term = float((tie_counts**3 - tie_counts).sum()) / (n * (n - 1))
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0))))


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann–Whitney U test: (U of ``x``, p-value)."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        msg = "Mann–Whitney U needs at least one value in each sample"
        raise ValueError(msg)
    ranks, tie_counts = _ranks(np.asarray([*x, *y], dtype=np.float64))
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    ties = bool((tie_counts > 1).any())
    if (n1 <= 8 or n2 <= 8) and not ties:
        return u, _exact_p(u, n1, n2)
    return u, _asymptotic_p(u, n1, n2, tie_counts)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p Mann–Whitney U can give for these sizes (complete separation)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _resampled_medians(x: np.ndarray, rng: np.random.Generator, rounds: int) -> np.ndarray:
    n = len(x)
    draws = np.sort(x[rng.integers(0, n, (rounds, n))], axis=1)
    mid = n // 2
    medians: np.ndarray = draws[:, mid] if n % 2 else (draws[:, mid - 1] + draws[:, mid]) / 2.0
    return medians


def bootstrap_ratio_ci(
    base: Sequence[float],
    candidate: Sequence[float],
    level: float = 0.99,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(candidate) / median(base); seeded, so reproducible."""
    rng = np.random.default_rng(seed)
    mb = _resampled_medians(np.asarray(base, dtype=np.float64), rng, rounds)
    mc = _resampled_medians(np.asarray(candidate, dtype=np.float64), rng, rounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = mc / mb
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        return (math.nan, math.nan)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail])
    return float(lo), float(hi)


def compare_samples(
    base: Sequence[float] | None, candidate: Sequence[float] | None, alpha: float = 0.01
) -> SampleTest:
    """Do the repeated samples of two runs differ? See the module docstring for the choice."""
    if not base or not candidate or (len(base) == 1 and len(candidate) == 1):
        return SampleTest(Method.THRESHOLD_ONLY, different=True)
    n1, n2 = len(base), len(candidate)
    if min_p_value(n1, n2) < alpha:
        _, p = mann_whitney_u(base, candidate)
        return SampleTest(Method.MANN_WHITNEY, p < alpha, p_value=p)
    if min(n1, n2) >= MIN_BOOTSTRAP_SAMPLES:
        lo, hi = bootstrap_ratio_ci(base, candidate, level=1.0 - alpha)
        different = not math.isnan(lo) and not (lo <= 1.0 <= hi)
        return SampleTest(Method.BOOTSTRAP, different, ci=(lo, hi))
    return SampleTest(Method.TOO_FEW, different=False)
