"""A runtime's sampler, rebuilt in numpy from the reference's logits: the candidate set and the
distribution each documented order of the stages gives, and a goodness-of-fit test of a
runtime's draws against them (``scipy.stats``). Pure functions; nothing here imports a runtime.

A stage is one of ``penalties`` (repetition penalty on the ids already in the sequence, as
llama.cpp applies it: a positive logit divided by the penalty, a negative one multiplied),
``top_k``, ``top_p`` (the smallest set of most probable ids whose probability reaches ``p``, the
id that crosses it included), ``min_p`` (ids whose probability is at least ``min_p`` times the
most probable one's), ``temperature`` (logits divided by ``T``) and ``dist`` (the draw, from the
softmax of what is left). A truncation stage computes its probabilities from the logits as they
are at that point: before ``temperature`` they are the untempered ones, after it the tempered
ones — which is the difference the order probe looks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

STAGES = ("penalties", "top_k", "top_p", "min_p", "temperature", "dist")
#: the documented orders of the stages per runtime (``sources``: where each comes from)
ORDERS: dict[str, tuple[str, ...]] = {
    # llama-cpp-python's Llama._init_sampler: penalties, top_k, typical, top_p, min_p, temp, dist
    "truncate-then-temperature": ("penalties", "top_k", "top_p", "min_p", "temperature", "dist"),
    # onnxruntime-genai's GreedySearch_Cpu::SampleTopKTopP / SampleTopP (src/search.cpp): top-k,
    # logits / T, top-p, draw; OpenVINO GenAI's LogitProcessor (src/cpp/src/sampling/
    # logit_processor.hpp): penalties, top-k, temperature, min-p, top-p (top-k by rank does not
    # care where the temperature is; min-p before top-p matters only with both on)
    "temperature-then-truncate": ("penalties", "temperature", "top_k", "top_p", "min_p", "dist"),
}
NEG = -np.inf
#: how far (in logits) from a truncation's cut an id may be and still count as on either side
BOUNDARY_TOL = 0.05


@dataclass(frozen=True)
class Params:
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off
    repeat_penalty: float = 1.0  # 1: off

    @classmethod
    def from_options(cls, opts: Mapping[str, Any]) -> Params:
        return cls(
            temperature=float(opts.get("temperature", 1.0)),
            top_k=int(opts.get("top_k", 0) or 0),
            top_p=float(opts.get("top_p", 1.0)),
            min_p=float(opts.get("min_p", 0.0)),
            repeat_penalty=float(opts.get("repeat_penalty", 1.0)),
        )

    def validate(self) -> None:
        if not self.temperature > 0:
            msg = f"temperature must be > 0 for sampling, got {self.temperature}"
            raise ValueError(msg)
        if not 0 < self.top_p <= 1 or not 0 <= self.min_p < 1 or self.top_k < 0:
            msg = f"need 0 < top_p <= 1, 0 <= min_p < 1, top_k >= 0; got {self}"
            raise ValueError(msg)

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "repeat_penalty": self.repeat_penalty}  # fmt: skip


def _softmax(x: NDArray[np.float64]) -> NDArray[np.float64]:
    finite = np.isfinite(x)
    out = np.zeros_like(x)
    if finite.any():
        z = x[finite] - x[finite].max()
        e = np.exp(z)
        out[finite] = e / e.sum()
    return out


def _keep_near(x: NDArray[np.float64], kept: NDArray[np.bool_], tol: float) -> NDArray[np.float64]:
    """Mask what a truncation dropped, except ids within ``tol`` of the lowest kept logit."""
    if not kept.any():
        return x
    floor = float(x[kept].min()) - tol
    out = x.copy()
    out[~kept & (x < floor)] = NEG
    return out


def _stage(
    name: str, x: NDArray[np.float64], p: Params, history: Sequence[int], tol: float = 0.0
) -> NDArray[np.float64]:
    x = x.copy()
    if name == "penalties" and p.repeat_penalty != 1.0:
        for t in set(history):
            if np.isfinite(x[t]):
                x[t] = x[t] / p.repeat_penalty if x[t] > 0 else x[t] * p.repeat_penalty
    elif name == "top_k" and 0 < p.top_k < np.isfinite(x).sum():
        kth = np.sort(x[np.isfinite(x)])[::-1][p.top_k - 1]
        x = _keep_near(x, x >= kth, tol)
    elif name == "top_p" and p.top_p < 1.0:
        prob = _softmax(x)
        order = np.argsort(-prob, kind="stable")
        cum = np.cumsum(prob[order])
        keep = int(np.searchsorted(cum, p.top_p - 1e-12)) + 1  # the id that crosses p included
        kept = np.zeros(x.shape, dtype=bool)
        kept[order[:keep]] = True
        x = _keep_near(x, kept, tol)
    elif name == "min_p" and p.min_p > 0.0:
        prob = _softmax(x)
        x = _keep_near(x, prob >= p.min_p * prob.max(), tol)
    elif name == "temperature":
        x = x / p.temperature
    return x


def distribution(
    logits: NDArray[np.floating[Any]],
    p: Params,
    order: Sequence[str],
    history: Sequence[int] = (),
    tol: float = 0.0,
) -> NDArray[np.float64]:
    """The probability of each id under the stages in ``order`` (``dist`` ends it). ``tol``
    widens each truncation to the ids within ``tol`` of its lowest kept logit: a runtime's
    logits differ from the reference's by rounding, so ids at a cut's near-tie may fall on
    either side of it."""
    x = np.asarray(logits, dtype=np.float64)
    for name in order:
        if name == "dist":
            break
        x = _stage(name, x, p, history, tol)
    return _softmax(x)


@dataclass(frozen=True)
class Fit:
    """How draws fit one order's distribution."""

    order: str
    support: int  # ids with probability > 0
    outside: int  # draws of ids the order never allows
    chi2: float | None
    dof: int
    p_value: float  # 0 when any draw lies outside the support

    def to_dict(self) -> dict[str, Any]:
        return {"order": self.order, "support": self.support, "outside": self.outside,
                "chi2": self.chi2, "dof": self.dof, "p_value": self.p_value}  # fmt: skip


def _bins(prob: NDArray[np.float64], min_expected: float, n: int) -> list[NDArray[np.intp]]:
    """Ids grouped, most probable first, into consecutive bins that each expect at least
    ``min_expected`` of ``n`` draws (the chi-square approximation needs it; a short last bin
    joins the one before). Rank order keeps the tail apart from the head: a sampler that
    truncates more than the distribution says leaves the tail's bins empty."""
    ids = np.flatnonzero(prob > 0)
    ids = ids[np.argsort(-prob[ids], kind="stable")]
    bins: list[NDArray[np.intp]] = []
    cur: list[int] = []
    mass = 0.0
    for i in ids:
        cur.append(int(i))
        mass += float(prob[i])
        if n * mass >= min_expected:
            bins.append(np.array(cur))
            cur, mass = [], 0.0
    if cur:
        if bins:
            bins[-1] = np.concatenate([bins[-1], np.array(cur)])
        else:
            bins.append(np.array(cur))
    return bins


def fit(
    counts: NDArray[np.int64], prob: NDArray[np.float64], order: str, min_expected: float = 5.0
) -> Fit:
    """Chi-square goodness of fit of first-token ``counts`` (per id) to ``prob``."""
    from scipy import stats

    n = int(counts.sum())
    outside = int(counts[prob <= 0].sum())
    support = int((prob > 0).sum())
    if outside:
        return Fit(order, support, outside, None, 0, 0.0)
    bins = _bins(prob, min_expected, n)
    if len(bins) < 2:  # one bin: the draws cannot disagree with it
        return Fit(order, support, 0, 0.0, 0, 1.0)
    obs = np.array([counts[b].sum() for b in bins], dtype=np.float64)
    exp = np.array([prob[b].sum() for b in bins]) * n
    res = stats.chisquare(obs, exp * obs.sum() / exp.sum())
    return Fit(order, support, 0, float(res.statistic), len(bins) - 1, float(res.pvalue))


def power(
    true_prob: NDArray[np.float64],
    alt_prob: NDArray[np.float64],
    n: int,
    alpha: float,
    min_expected: float = 5.0,
) -> float:
    """The chance that ``n`` draws from ``true_prob`` reject ``alt_prob`` at ``alpha``: 1 minus
    the chance that no draw leaves ``alt``'s support and the chi-square does not reject
    (noncentral chi-square with the binned noncentrality)."""
    from scipy import stats

    outside = float(true_prob[alt_prob <= 0].sum())
    stay = (1.0 - outside) ** n
    bins = _bins(alt_prob, min_expected, n)
    if len(bins) < 2:
        return 1.0 - stay
    inside = true_prob.copy()
    inside[alt_prob <= 0] = 0.0
    inside = inside / inside.sum() if inside.sum() > 0 else inside
    p1 = np.array([inside[b].sum() for b in bins])
    p0 = np.array([alt_prob[b].sum() for b in bins])
    ncp = n * float(((p1 - p0) ** 2 / p0).sum())
    dof = len(bins) - 1
    crit = float(stats.chi2.ppf(1.0 - alpha, dof))
    miss = float(stats.ncx2.cdf(crit, dof, ncp)) if ncp > 0 else 1.0 - alpha
    return 1.0 - stay * miss


def judge_order(
    counts: NDArray[np.int64],
    logits: NDArray[np.floating[Any]],
    p: Params,
    documented: str,
    alpha: float,
    history: Sequence[int] = (),
    tol: float = BOUNDARY_TOL,
) -> dict[str, Any]:
    """Every known order's fit to the draws; the order found (the one the draws fit while every
    other is rejected at ``alpha``, else ``undecided``) against the documented one; the test's
    power to tell the documented order from each other at this ``n``. The ids within ``tol``
    of an order's cut (on either side: a runtime's rounding may put them on the other) are left
    out of its fit and counted apart (``at_cut_boundary``); a draw beyond them is outside."""
    n = int(counts.sum())
    raw = np.asarray(logits, dtype=np.float64)
    probs = {name: distribution(logits, p, order, history) for name, order in ORDERS.items()}
    wide = {name: distribution(logits, p, order, history, tol) for name, order in ORDERS.items()}
    band: dict[str, NDArray[np.bool_]] = {}
    fits: dict[str, Fit] = {}
    for name, prob in probs.items():
        kept = prob > 0
        cut = float(raw[kept].min()) if kept.any() else np.inf
        band[name] = (wide[name] > 0) & (~kept | (raw < cut + tol))
        core = np.where(band[name], 0.0, prob)
        core = core / core.sum() if core.sum() > 0 else prob
        inside = np.where(band[name], 0, counts)
        inside[wide[name] <= 0] = counts[wide[name] <= 0]  # outside even the widened cut
        fits[name] = fit(inside, core, name)
    fitting = [k for k, f in fits.items() if f.p_value >= alpha]
    found = fitting[0] if len(fitting) == 1 else ("none" if not fitting else "undecided")
    pw = {
        other: round(power(probs[documented], probs[other], n, alpha), 4)
        for other in probs
        if other != documented and documented in probs
    }
    return {
        "draws": n,
        "alpha": alpha,
        "documented": documented,
        "found": found,
        "fits": {k: f.to_dict() for k, f in fits.items()},
        "power_against": pw,
        "candidates_documented": int((probs[documented] > 0).sum())
        if documented in probs
        else None,
        "boundary_tol_logit": tol,
        "at_cut_boundary": {k: int(counts[band[k]].sum()) for k in probs},
    }
