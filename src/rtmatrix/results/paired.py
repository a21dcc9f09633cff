"""Paired rounds -> one verdict per cell × metric: regression, improved, equivalent, inconclusive.

The design (issue 15): a comparison runs K rounds; each round starts one worker process per side
(A = base, B = candidate) in a random order, and a side's value for the round is the median of
that process's counted repetitions. Rounds see the process-to-process variation that repetitions
inside one process never see; pairing the two processes of a round cancels what drifts between
rounds (machine load, clocks, thermal state).

Each check (a cell × metric) is judged from its K log-ratios ``d_k = log(b_k / a_k)``:

- **regression**: a one-sided paired t-test (``scipy.stats.ttest_1samp`` of the d_k against 0,
  alternative = the metric's worse direction) rejects at ``alpha`` after Holm's correction over
  every tested check of the comparison, *and* the estimated ratio (the geometric mean of b/a,
  ``exp(mean d)``) is worse than the metric's minimum effect;
- **improved**: the same in the better direction (its own Holm family);
- **equivalent**: the 90 % confidence interval of the ratio (TOST at 0.05 each side, not
  corrected) lies inside ``1 ± margin``;
- **inconclusive** otherwise, with the smallest change this K detects (from the observed
  between-round sd, power 0.8, at Holm's strictest level alpha/m) and the K that would both
  detect a change of the margin and show an unchanged metric equivalent (each with power 0.8).

Why the t-test on log-ratios and not Wilcoxon's signed-rank test: process-to-process variation
is multiplicative (a factor per process), so log-ratios are close to normal, and the t-test has no
floor on its p-value and gives the interval TOST needs. The exact one-sided signed-rank p cannot
go below ``2**-K`` (K=5: 0.031, K=8: 0.0039, K=10: 0.00098): with Holm over m checks at
alpha=0.01 the smallest p must be under 0.01/m, so with m=12 no K below 11 could ever flag a
regression, even with every round agreeing. An outlying process inflates the t-test's sd, which
makes a verdict inconclusive rather than wrong.

A check whose log-ratios are all equal (a deterministic metric such as package size) has no
between-round spread: its change is exact (p = 0 in its direction, 1 otherwise; the interval is
the point). Fewer than ``MIN_ROUNDS`` usable pairs is inconclusive and not part of the Holm
family. A pair with a missing (None/NaN) or non-positive value is dropped and counted.

Defaults, from the seeded simulation in ``tests/unit/test_paired.py`` (12 checks per comparison,
a lognormal factor per process, drift between and within rounds, random AB/BA order): alpha =
0.01 family-wise; min effect 2 % and margin 5 % for throughput (a fifth and half of the diff
threshold, ``Criterion.for_metric``); K = 24 rounds. At K = 24 and 3 % between-process sd a 10 %
slowdown is found in 100 % of checks, 5 % in 94 %, 3 % in 35 % (K = 20: 100 / 85 / 24 %); A/A
comparisons with 3–10 % sd flag a regression in 2 of 300 (2 of 1200 cells). At 5 % sd a 5 %
slowdown needs more rounds (47 % at K = 24): ``k_needed`` says how many from the observed sd.

Input: a rounds DataFrame (``ROUND_COLUMNS``: cell, metric, round, a, b; other columns are
ignored), e.g. from ``rounds_frame``. Output: ``PairedComparison`` (``checks``, ``to_frame()``,
``to_json()``/``from_json()``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from rtmatrix.metrics.registry import Direction, direction_of, threshold_of

DEFAULT_ALPHA = 0.01  # family-wise, over every check of a comparison (Holm)
EQUIVALENCE_ALPHA = 0.05  # each side of TOST: the 90 % interval
POWER = 0.8
DEFAULT_ROUNDS = 24  # K: see "Defaults" in the module docstring
MIN_ROUNDS = 2  # a t-test needs two pairs
# the defaults scale with the metric's diff threshold (10 % for throughput -> 2 % and 5 %)
MIN_EFFECT_PER_THRESHOLD = 1 / 5
MARGIN_PER_THRESHOLD = 1 / 2
MAX_PLANNED_ROUNDS = 10_000
ROUND_COLUMNS = ("cell", "metric", "round", "a", "b")
_CONSTANT_SD = 1e-12  # log-ratio spread below this is "all rounds equal"
_KEYS = ["cell", "metric"]
# scipy.stats is imported inside the functions that use it: importing it takes ~2.4 s on the
# 2-core VM, and the CLI imports this module to build ``rtmatrix compare --help``


class PairedVerdict(StrEnum):
    REGRESSION = "regression"
    IMPROVED = "improved"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Criterion:
    """How one metric is judged: its better direction, the smallest change that counts as a
    regression or improvement, and the equivalence margin (relative: 0.05 = 5 %)."""

    metric: str
    direction: Direction
    min_effect: float
    margin: float

    @classmethod
    def for_metric(
        cls, metric: str, min_effect: float | None = None, margin: float | None = None
    ) -> Criterion:
        """Direction and diff threshold from the metric registry (``registry.direction_of``,
        ``registry.threshold_of``); defaults a fifth (min effect) and half (margin) of it."""
        direction = direction_of(metric)
        if direction is None:
            msg = f"metric {metric!r} has no known direction (better when higher or lower?)"
            raise ValueError(msg)
        threshold = threshold_of(metric)
        return cls(
            metric,
            direction,
            round(MIN_EFFECT_PER_THRESHOLD * threshold, 12) if min_effect is None else min_effect,
            round(MARGIN_PER_THRESHOLD * threshold, 12) if margin is None else margin,
        )


@dataclass(frozen=True)
class PairedCheck:
    """The decision for one cell × metric. ``ratio`` and ``ci`` are b/a (candidate / base);
    ``p_worse``/``p_better`` are the raw one-sided p-values, ``*_holm`` Holm-adjusted; ``mde``
    (relative) and ``k_needed`` plan the next comparison. Missing figures are None, never 0."""

    cell: str
    metric: str
    verdict: PairedVerdict
    direction: Direction
    k: int
    min_effect: float
    margin: float
    alpha: float
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    sd_log: float | None = None
    p_worse: float | None = None
    p_better: float | None = None
    p_worse_holm: float | None = None
    p_better_holm: float | None = None
    mde: float | None = None
    k_needed: int | None = None
    dropped: int = 0
    reason: str = ""

    @property
    def change(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "metric": self.metric,
            "verdict": str(self.verdict),
            "direction": str(self.direction),
            "k": self.k,
            "min_effect": self.min_effect,
            "margin": self.margin,
            "alpha": self.alpha,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "sd_log": self.sd_log,
            "p_worse": self.p_worse,
            "p_better": self.p_better,
            "p_worse_holm": self.p_worse_holm,
            "p_better_holm": self.p_better_holm,
            "mde": self.mde,
            "k_needed": self.k_needed,
            "dropped": self.dropped,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedCheck:
        ci = data.get("ci")
        return cls(
            **{k: data[k] for k in _PLAIN_FIELDS if k in data},
            verdict=PairedVerdict(data["verdict"]),
            direction=Direction(data["direction"]),
            ci=(float(ci[0]), float(ci[1])) if ci else None,
        )


_PLAIN_FIELDS = (
    "cell", "metric", "k", "min_effect", "margin", "alpha", "ratio", "sd_log", "p_worse",
    "p_better", "p_worse_holm", "p_better_holm", "mde", "k_needed", "dropped", "reason",
)  # fmt: skip


@dataclass(frozen=True)
class PairedComparison:
    checks: list[PairedCheck]
    alpha: float = DEFAULT_ALPHA
    power: float = POWER
    tested: int = 0  # m: the checks in each Holm family
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {str(v): sum(c.verdict is v for c in self.checks) for v in PairedVerdict}

    def to_frame(self) -> pd.DataFrame:
        """One row per check; ``ci`` split into ``ci_low``/``ci_high``."""
        rows = [c.to_dict() for c in self.checks]
        for row in rows:
            ci = row.pop("ci")
            row["ci_low"], row["ci_high"] = ci if ci else (None, None)
        return pd.DataFrame(rows, columns=[*_FRAME_COLUMNS])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "rtmatrix-paired",
            "version": 1,
            "alpha": self.alpha,
            "power": self.power,
            "tested": self.tested,
            "counts": self.counts(),
            "notes": self.notes,
            "checks": [c.to_dict() for c in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedComparison:
        if data.get("format") != "rtmatrix-paired" or data.get("version") != 1:
            msg = "not an rtmatrix-paired version 1 document"
            raise ValueError(msg)
        return cls(
            [PairedCheck.from_dict(c) for c in data["checks"]],
            alpha=float(data["alpha"]),
            power=float(data["power"]),
            tested=int(data["tested"]),
            notes=[str(n) for n in data.get("notes", [])],
        )

    @classmethod
    def from_json(cls, text: str) -> PairedComparison:
        return cls.from_dict(json.loads(text))


_FRAME_COLUMNS = (
    "cell", "metric", "verdict", "direction", "k", "min_effect", "margin", "alpha", "ratio",
    "ci_low", "ci_high", "sd_log", "p_worse", "p_better", "p_worse_holm", "p_better_holm", "mde",
    "k_needed", "dropped", "reason",
)  # fmt: skip


# --------------------------------------------------------------------------- input


def rounds_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """A rounds DataFrame from mappings with the ``ROUND_COLUMNS`` (extra keys are kept)."""
    frame = pd.DataFrame(list(rows))
    _require_columns(frame)
    return frame


def _require_columns(frame: pd.DataFrame) -> None:
    missing = [c for c in ROUND_COLUMNS if c not in frame.columns]
    if missing:
        msg = f"rounds lack column(s) {missing}; expected {list(ROUND_COLUMNS)}"
        raise ValueError(msg)
    twice = frame[frame.duplicated([*_KEYS, "round"])]
    if len(twice):
        first = twice.iloc[0]
        msg = (
            f"{len(twice)} round(s) given twice, e.g. cell {first['cell']!r} metric "
            f"{first['metric']!r} round {first['round']}: one row per cell, metric and round"
        )
        raise ValueError(msg)


def log_ratios(rounds: pd.DataFrame) -> pd.DataFrame:
    """``rounds`` with ``d = log(b / a)``; NaN where a pair is missing or not positive."""
    a = pd.to_numeric(rounds["a"], errors="coerce").to_numpy(dtype=float)
    b = pd.to_numeric(rounds["b"], errors="coerce").to_numpy(dtype=float)
    usable = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    d = np.full(len(rounds), np.nan)
    d[usable] = np.log(b[usable] / a[usable])
    return rounds.assign(d=d)


# --------------------------------------------------------------------------- statistics


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (reject where adjusted <= alpha)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty(len(p))
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def _t_tests(d: np.ndarray) -> np.ndarray:
    """Rows of equal length k >= 2 with spread -> columns ``_TEST_COLUMNS``: the one-sided
    p-values (the t-test's statistic against both tails) and the 90 % CI of the mean."""
    from scipy import stats

    res = stats.ttest_1samp(d, 0.0, axis=1)
    ci = res.confidence_interval(confidence_level=1.0 - 2.0 * EQUIVALENCE_ALPHA)
    t, df = res.statistic, res.df
    return np.column_stack([stats.t.cdf(t, df), stats.t.sf(t, df), ci.low, ci.high])


def _constant(mean: np.ndarray) -> np.ndarray:
    """Rows without spread: the change is exact."""
    p_less, p_greater = np.where(mean < 0, 0.0, 1.0), np.where(mean > 0, 0.0, 1.0)
    return np.column_stack([p_less, p_greater, mean, mean])


_TEST_COLUMNS = ["p_less", "p_greater", "ci_low", "ci_high"]
_ESTIMATE_COLUMNS = [*_TEST_COLUMNS, "mean", "sd"]


def _estimates_of(d: np.ndarray) -> np.ndarray:
    """Checks that share k (the rows of ``d``) -> columns ``_ESTIMATE_COLUMNS``."""
    mean = d.mean(axis=1)
    sd = d.std(axis=1, ddof=1)
    flat = sd <= _CONSTANT_SD
    out = np.empty((len(d), len(_ESTIMATE_COLUMNS)))
    out[flat, :4] = _constant(mean[flat])
    if (~flat).any():
        out[~flat, :4] = _t_tests(d[~flat])
    out[:, 4], out[:, 5] = mean, np.where(flat, 0.0, sd)
    return out


def estimates(with_d: pd.DataFrame) -> pd.DataFrame:
    """One row per check (cell, metric; in order of first appearance): k (usable pairs),
    dropped, mean and sd of the log-ratios, the one-sided p-values and the 90 % CI of the mean
    log-ratio (NaN where k < MIN_ROUNDS)."""
    codes = with_d.groupby(_KEYS, sort=False).ngroup().to_numpy()  # by first appearance
    keys = with_d.loc[~with_d.duplicated(_KEYS), _KEYS].reset_index(drop=True)
    d = with_d["d"].to_numpy(dtype=float)
    usable = ~np.isnan(d)
    k = np.bincount(codes[usable], minlength=len(keys))
    order = np.argsort(codes[usable], kind="stable")  # each check's pairs, in input order
    values = d[usable][order]
    starts = np.concatenate([[0], np.cumsum(k)[:-1]]).astype(int)
    out = np.full((len(keys), len(_ESTIMATE_COLUMNS)), np.nan)
    for n in np.unique(k[k >= MIN_ROUNDS]):
        rows = np.flatnonzero(k == n)
        out[rows] = _estimates_of(values[starts[rows, None] + np.arange(n)])
    total = np.bincount(codes, minlength=len(keys))
    return keys.assign(**dict(zip(_ESTIMATE_COLUMNS, out.T, strict=True)), k=k, dropped=total - k)


# --------------------------------------------------------------------------- planning


def _factor_detect(k: np.ndarray, level: float, power: float) -> np.ndarray:
    """Times the standard error: the mean log-ratio a one-sided t-test at ``level`` detects
    with ``power`` (the usual t-quantile approximation of the noncentral t)."""
    from scipy import stats

    return np.asarray(stats.t.ppf(1.0 - level, k - 1) + stats.t.ppf(power, k - 1), dtype=float)


def _factor_equivalent(k: np.ndarray, power: float) -> np.ndarray:
    """Times the standard error: the margin TOST shows with ``power`` when the ratio is 1."""
    from scipy import stats

    beta_each = (1.0 - power) / 2.0
    both = stats.t.ppf(1.0 - EQUIVALENCE_ALPHA, k - 1) + stats.t.ppf(1.0 - beta_each, k - 1)
    return np.asarray(both, dtype=float)


@functools.lru_cache(maxsize=16)
def _planning_table(level: float, power: float) -> tuple[np.ndarray, np.ndarray]:
    """For K = MIN_ROUNDS..MAX_PLANNED_ROUNDS, per unit of between-round sd (log): the mean
    log-ratio a one-sided test at ``level`` detects with ``power``, and the larger of that and
    the margin TOST shows with ``power`` at a true ratio of 1 (read-only arrays)."""
    ks = np.arange(MIN_ROUNDS, MAX_PLANNED_ROUNDS + 1)
    detect = _factor_detect(ks, level, power) / np.sqrt(ks)
    need = np.maximum(detect, _factor_equivalent(ks, power) / np.sqrt(ks))
    detect.setflags(write=False)
    need.setflags(write=False)
    return detect, need


def minimum_detectable_effect(sd: float, k: int, level: float, power: float = POWER) -> float:
    """Relative change (0.05 = 5 %) a one-sided test at ``level`` detects with ``power`` from
    ``k`` pairs whose log-ratios have standard deviation ``sd``."""
    if not MIN_ROUNDS <= k <= MAX_PLANNED_ROUNDS:
        msg = f"k={k}: planning covers {MIN_ROUNDS}..{MAX_PLANNED_ROUNDS} rounds"
        raise ValueError(msg)
    detect, _ = _planning_table(level, power)
    return math.expm1(float(detect[k - MIN_ROUNDS]) * sd)


def rounds_needed(sd: float, margin: float, level: float, power: float = POWER) -> int | None:
    """Smallest K that detects a change of ``margin`` and shows an unchanged metric equivalent
    within ``margin``, each with ``power``; None beyond ``MAX_PLANNED_ROUNDS``."""
    _, need = _planning_table(level, power)
    ok = np.flatnonzero(need * sd <= math.log1p(margin))
    return int(ok[0]) + MIN_ROUNDS if len(ok) else None


# --------------------------------------------------------------------------- verdicts


def _fmt_pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _judge(check: PairedCheck) -> tuple[PairedVerdict, str]:
    ratio = math.nan if check.ratio is None else check.ratio
    worse = (ratio < 1.0) if check.direction is Direction.HIGHER else (ratio > 1.0)
    beyond = abs(ratio - 1.0) > check.min_effect
    lo, hi = check.ci or (math.nan, math.nan)
    interval = f"90% CI of the ratio {lo:.3f}..{hi:.3f}"
    p_worse = 1.0 if check.p_worse_holm is None else check.p_worse_holm
    p_better = 1.0 if check.p_better_holm is None else check.p_better_holm
    effect = f"{_fmt_pct(ratio - 1.0)} (min effect {check.min_effect * 100:g}%)"
    if worse and beyond and p_worse <= check.alpha:
        return PairedVerdict.REGRESSION, f"worse by {effect}, Holm p={p_worse:.3g}; {interval}"
    if not worse and beyond and p_better <= check.alpha:
        return PairedVerdict.IMPROVED, f"better by {effect}, Holm p={p_better:.3g}; {interval}"
    if 1.0 - check.margin <= lo and hi <= 1.0 + check.margin:
        return PairedVerdict.EQUIVALENT, f"{interval} inside ±{check.margin * 100:g}%"
    why = f"{interval} not inside ±{check.margin * 100:g}%"
    if min(p_worse, p_better) <= check.alpha:
        why = f"significant {_fmt_pct(ratio - 1.0)}, but within the min effect; {why}"
    return PairedVerdict.INCONCLUSIVE, why


def _plan(check: PairedCheck, level: float, power: float) -> PairedCheck:
    sd = check.sd_log
    if check.verdict is not PairedVerdict.INCONCLUSIVE or not sd:
        return check
    mde = minimum_detectable_effect(sd, check.k, level, power)
    need = rounds_needed(sd, check.margin, level, power)
    wants = f"would need K={need}" if need else f"would need K>{MAX_PLANNED_ROUNDS}"
    more = f"; detects {mde * 100:.1f}% at K={check.k} (power {power:g}), {wants}"
    return replace(check, mde=mde, k_needed=need, reason=check.reason + more)


def _check_of(row: Mapping[Hashable, Any], crit: Criterion, alpha: float) -> PairedCheck:
    base = PairedCheck(
        str(row["cell"]), crit.metric, PairedVerdict.INCONCLUSIVE, crit.direction,
        int(row["k"]), crit.min_effect, crit.margin, alpha, dropped=int(row["dropped"]),
    )  # fmt: skip
    if base.k < MIN_ROUNDS:
        why = f"{base.k} usable round(s): a paired test needs at least {MIN_ROUNDS}"
        return replace(base, reason=why)
    lower_worse = crit.direction is Direction.HIGHER
    p_worse, p_better = ("p_less", "p_greater") if lower_worse else ("p_greater", "p_less")
    tested = replace(
        base,
        ratio=math.exp(row["mean"]),
        ci=(math.exp(row["ci_low"]), math.exp(row["ci_high"])),
        sd_log=float(row["sd"]),
        p_worse=float(row[p_worse]),
        p_better=float(row[p_better]),
        p_worse_holm=float(row[p_worse + "_holm"]),
        p_better_holm=float(row[p_better + "_holm"]),
    )
    verdict, reason = _judge(tested)
    return replace(tested, verdict=verdict, reason=reason)


def _holm_columns(est: pd.DataFrame, directions: Sequence[Direction]) -> pd.DataFrame:
    """Holm over the worse-direction p-values of every tested check, and apart over the
    better-direction ones; written back under ``p_less_holm``/``p_greater_holm``."""
    higher = np.array([d is Direction.HIGHER for d in directions], dtype=bool)
    worse = np.where(higher, est["p_less"], est["p_greater"])
    better = np.where(higher, est["p_greater"], est["p_less"])
    tested = est["k"].to_numpy() >= MIN_ROUNDS
    adj_worse, adj_better = np.full(len(est), np.nan), np.full(len(est), np.nan)
    adj_worse[tested], adj_better[tested] = holm(worse[tested]), holm(better[tested])
    return est.assign(
        p_less_holm=np.where(higher, adj_worse, adj_better),
        p_greater_holm=np.where(higher, adj_better, adj_worse),
    )


def decide(
    rounds: pd.DataFrame,
    criteria: Mapping[str, Criterion] | None = None,
    alpha: float = DEFAULT_ALPHA,
    power: float = POWER,
) -> PairedComparison:
    """Judge every (cell, metric) of ``rounds`` (``ROUND_COLUMNS``; a = base, b = candidate).
    ``criteria`` by metric name; a metric not in it gets ``Criterion.for_metric``."""
    if not 0.0 < alpha < 1.0:
        msg = f"alpha {alpha}: expected a significance level between 0 and 1, e.g. 0.01"
        raise ValueError(msg)
    _require_columns(rounds)
    crit = dict(criteria or {})
    est = estimates(log_ratios(rounds))
    for metric in est["metric"].unique():
        crit.setdefault(str(metric), Criterion.for_metric(str(metric)))
    est = _holm_columns(est, [crit[str(m)].direction for m in est["metric"]])
    m = int((est["k"] >= MIN_ROUNDS).sum())
    level = alpha / max(m, 1)  # Holm's first (strictest) step: what a lone change must pass
    checks = [
        _plan(_check_of(row, crit[str(row["metric"])], alpha), level, power)
        for row in est.to_dict("records")
    ]
    notes = [f"Holm over {m} tested check(s) per direction; planning at alpha/m = {level:.3g}"]
    return PairedComparison(checks, alpha, power, m, notes)
