"""Two-sample tests for repeated measurements of one process per side: Mann–Whitney U and a
bootstrap CI on the ratio of medians, both from ``scipy.stats`` (``mannwhitneyu`` two-sided,
method "auto": the exact distribution when a sample has at most 8 values and there are no ties,
else the normal approximation with tie and continuity corrections; ``bootstrap`` with the
percentile method, seeded).

``compare_samples`` picks the test the way asv's ``is_different`` does: Mann–Whitney U when the
sample sizes let it reach ``alpha`` at all (4 + 4 values need p = 0.029, 5 + 5 reach 0.0079),
else a percentile bootstrap CI of the ratio of medians, else (fewer than 3 values on a side) it
says the samples are too few to tell a change from noise.

These tests treat every repetition as an independent sample. Repetitions inside one worker
process do not see process-to-process variation, so on two run files they answer "do these two
processes differ?", not "do the two versions differ?"; ``paired.py`` judges K paired rounds of
processes instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

# scipy.stats is imported where it is used: importing it takes ~2.4 s here, and every CLI start
# (``rtmatrix --help`` included) imports this module through ``results.diff``.

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


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann–Whitney U test (``scipy.stats.mannwhitneyu``): (U of ``x``, p-value)."""
    if not len(x) or not len(y):
        msg = "Mann–Whitney U needs at least one value in each sample"
        raise ValueError(msg)
    from scipy import stats

    res = stats.mannwhitneyu(
        np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), method="auto"
    )
    return float(res.statistic), float(res.pvalue)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p Mann–Whitney U can give for these sizes (complete separation)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _ratio_of_medians(base: np.ndarray, candidate: np.ndarray, axis: int = -1) -> np.ndarray:
    ratio: np.ndarray = np.median(candidate, axis=axis) / np.median(base, axis=axis)
    return ratio


def bootstrap_ratio_ci(
    base: Sequence[float],
    candidate: Sequence[float],
    level: float = 0.99,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(candidate) / median(base) (``scipy.stats.bootstrap``,
    each sample resampled on its own); seeded, so reproducible. (nan, nan) when a base value is
    not positive: a resampled base median could be 0 and the ratio undefined."""
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if not len(b) or not len(c) or (b <= 0).any():
        return (math.nan, math.nan)
    from scipy import stats

    res = stats.bootstrap(
        (b, c),
        _ratio_of_medians,
        n_resamples=rounds,
        confidence_level=level,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


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
