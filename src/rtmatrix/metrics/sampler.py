"""A runtime's sampler, rebuilt in numpy from a model's logits (the reference's, or for a quantized
cell the runtime's own): the candidate set and the distribution each documented order of the
stages gives, and a goodness-of-fit test of a runtime's draws against them whose p-value is
simulated (a Monte-Carlo exact multinomial test, so it holds at any expected count per bin; the
chi-square approximation's p is kept beside it). Pure functions; nothing here imports a runtime.

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
from functools import lru_cache
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
#: the goodness-of-fit test's p-value is simulated (Monte Carlo) from this many multinomial
#: samples of the draws' size: its resolution is 1 / (MC_SIMULATIONS + 1)
MC_SIMULATIONS = 4000
MC_SEED = 0x5A3D1E
MC_METHOD = "monte-carlo"
#: the power against every other order at which the draws can tell the orders apart; below it,
#: an order fit by several is "undecided" for want of power, not by chance
POWER_TO_DECIDE = 0.8
#: each parameter's value that turns its stage off: a sampler that ignores the parameter draws
#: from the documented order with it so (``judge_order``'s ``power_against_ignored``)
NEUTRAL: dict[str, float] = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}


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
    """How draws fit one order's distribution. ``p_value`` is the Monte-Carlo one (exact up to
    the simulation: ``(1 + #{simulated statistic >= observed}) / (simulations + 1)``, valid at
    any expected count per bin); ``p_asymptotic`` the chi-square approximation's, for comparison."""

    order: str
    support: int  # ids with probability > 0
    outside: int  # draws of ids the order never allows
    chi2: float | None
    dof: int
    p_value: float  # 0 when any draw lies outside the support
    p_asymptotic: float | None = None
    simulations: int = 0
    method: str = MC_METHOD

    def to_dict(self) -> dict[str, Any]:
        return {"order": self.order, "support": self.support, "outside": self.outside,
                "chi2": self.chi2, "dof": self.dof, "p_value": self.p_value,
                "p_asymptotic": self.p_asymptotic, "simulations": self.simulations,
                "method": self.method}  # fmt: skip


def _bins(prob: NDArray[np.float64], min_expected: float, n: int) -> list[NDArray[np.intp]]:
    """Ids grouped, most probable first, into consecutive bins that each expect at least
    ``min_expected`` of ``n`` draws (a short last bin joins the one before). Rank order keeps
    the tail apart from the head: a sampler that truncates more than the distribution says
    leaves the tail's bins empty. The p-value is simulated, so the bins need not make the
    chi-square approximation hold; they keep the statistic's power on the head and tail."""
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


def _bin_probs(prob: NDArray[np.float64], bins: Sequence[NDArray[np.intp]]) -> NDArray[np.float64]:
    p0 = np.array([float(prob[b].sum()) for b in bins], dtype=np.float64)
    return np.asarray(p0 / p0.sum(), dtype=np.float64)


def _pearson(obs: NDArray[Any], exp: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(((obs - exp) ** 2 / exp).sum(axis=-1), dtype=np.float64)


@lru_cache(maxsize=256)
def _null(p0_key: bytes, n: int, simulations: int) -> NDArray[np.float64]:
    """The Pearson statistic of ``simulations`` multinomial samples of ``n`` draws over bins
    with probabilities ``p0`` (bytes of a float64 array), sorted: its null distribution."""
    p0 = np.frombuffer(p0_key, dtype=np.float64)
    rng = np.random.default_rng([MC_SEED, n, simulations, len(p0)])
    sims = rng.multinomial(n, p0, size=simulations)
    out = np.sort(_pearson(sims, n * p0))
    out.flags.writeable = False
    return out


def _mc_p(null: NDArray[np.float64], stat: NDArray[np.float64] | float) -> NDArray[np.float64]:
    """``(1 + #{null >= stat}) / (len(null) + 1)``, ties (to rounding) counted as >=."""
    s = np.asarray(stat, dtype=np.float64)
    below = np.searchsorted(null, s - 1e-9 * np.maximum(1.0, np.abs(s)), side="left")
    return np.asarray((1 + len(null) - below) / (len(null) + 1), dtype=np.float64)


def fit(
    counts: NDArray[np.int64],
    prob: NDArray[np.float64],
    order: str,
    min_expected: float = 5.0,
    simulations: int = MC_SIMULATIONS,
) -> Fit:
    """Goodness of fit of first-token ``counts`` (per id) to ``prob``: a draw outside the
    support is p = 0; else Pearson's statistic over rank-ordered bins (:func:`_bins`), its
    p-value simulated from ``simulations`` multinomial samples of the same size (a Monte-Carlo
    exact test: the documented distribution is rejected in at most ``alpha`` of trials whatever
    the counts per bin; ``tests/unit/test_sampler.py`` and ``benchmarks/sampler_calibration.py``
    check it by simulation)."""
    from scipy import stats

    n = int(counts.sum())
    outside = int(counts[prob <= 0].sum())
    support = int((prob > 0).sum())
    if outside:
        return Fit(order, support, outside, None, 0, 0.0, None, 0, "outside the support")
    bins = _bins(prob, min_expected, n)
    if len(bins) < 2 or n == 0:  # one bin: the draws cannot disagree with it
        return Fit(order, support, 0, 0.0, 0, 1.0, 1.0, 0, "one bin")
    p0 = _bin_probs(prob, bins)
    obs = np.array([counts[b].sum() for b in bins], dtype=np.float64)
    stat = float(_pearson(obs, n * p0))
    dof = len(bins) - 1
    p_mc = float(_mc_p(_null(p0.tobytes(), n, simulations), stat))
    p_asym = float(stats.chi2.sf(stat, dof))
    return Fit(order, support, 0, stat, dof, p_mc, p_asym, simulations)


@lru_cache(maxsize=256)
def _power(p1_key: bytes, p0_key: bytes, n: int, alpha: float, simulations: int) -> float:
    p1 = np.frombuffer(p1_key, dtype=np.float64)  # the bins' true mass, then the outside's
    p0 = np.frombuffer(p0_key, dtype=np.float64)
    null = _null(p0_key, n, simulations)
    rng = np.random.default_rng([MC_SEED + 1, n, simulations, len(p0)])
    sims = rng.multinomial(n, p1, size=simulations)
    out = sims[:, -1] > 0
    rejected = out | (_mc_p(null, _pearson(sims[:, :-1], n * p0)) < alpha)
    return float(rejected.mean())


def power(
    true_prob: NDArray[np.float64],
    alt_prob: NDArray[np.float64],
    n: int,
    alpha: float,
    min_expected: float = 5.0,
    simulations: int = MC_SIMULATIONS,
) -> float:
    """The chance that ``n`` draws from ``true_prob`` reject ``alt_prob`` at ``alpha`` with
    :func:`fit`'s test (a draw outside ``alt``'s support, or the simulated p-value below
    ``alpha``), itself estimated from ``simulations`` samples of ``n`` draws."""
    true_prob = np.asarray(true_prob, dtype=np.float64)
    outside = float(true_prob[alt_prob <= 0].sum())
    bins = _bins(alt_prob, min_expected, n)
    if len(bins) < 2 or n == 0:
        return 1.0 - (1.0 - min(1.0, outside)) ** n
    p0 = _bin_probs(alt_prob, bins)
    p1 = np.array([*(float(true_prob[b].sum()) for b in bins), outside], dtype=np.float64)
    p1 = np.clip(p1, 0.0, None)
    p1 = p1 / p1.sum()
    return _power(p1.tobytes(), p0.tobytes(), n, float(alpha), simulations)


def total_variation(a: NDArray[np.float64], b: NDArray[np.float64]) -> float:
    """Half the L1 distance of two distributions: 0 the same, 1 disjoint."""
    return float(0.5 * np.abs(np.asarray(a) - np.asarray(b)).sum())


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
    other is rejected at ``alpha``; ``undecided`` when several fit, ``none`` when none does)
    against the documented one; the test's power to tell the documented order from each other
    at this ``n`` and the distance between them (``decidable``: power >= ``POWER_TO_DECIDE``
    against every other order); the chance that the test catches a sampler that ignores each
    parameter set (``power_against_ignored``: draws from the documented order with that stage
    off; a low figure says such a sampler would pass unseen). The ids within ``tol`` of an
    order's cut (on either side: a runtime's rounding may put them on the other) are left out
    of its fit and counted apart (``at_cut_boundary``); a draw beyond them is outside.

    ``verdict``: ``fail`` when the documented order is rejected (p < ``alpha``: a calibrated
    test rejects the right distribution in at most ``alpha`` of runs), ``pass`` when it fits
    and every other order is rejected, ``undecided`` when it fits and so does another: with
    these parameters and draws the orders cannot be told apart — said as such, not a
    failure."""
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
    known = documented in probs
    pw = {
        other: round(power(probs[documented], probs[other], n, alpha), 4)
        for other in probs
        if other != documented and known
    }
    tv = {
        other: round(total_variation(probs[documented], probs[other]), 4)
        for other in probs
        if other != documented and known
    }
    ignored: dict[str, float] = {}
    for name, off in NEUTRAL.items() if known else ():
        if getattr(p, name) != off:
            without = Params.from_options(p.to_dict() | {name: off})
            wrong = distribution(logits, without, ORDERS[documented], history)
            if total_variation(wrong, probs[documented]) > 0:
                ignored[name] = round(power(wrong, probs[documented], n, alpha), 4)
    doc_fit = fits.get(documented)
    verdict = None
    if doc_fit is not None:
        verdict = (
            "fail" if doc_fit.p_value < alpha else "pass" if found == documented else "undecided"
        )
    return {
        "draws": n,
        "alpha": alpha,
        "documented": documented,
        "found": found,
        "verdict": verdict,
        "decidable": bool(pw) and min(pw.values()) >= POWER_TO_DECIDE,
        "fits": {k: f.to_dict() for k, f in fits.items()},
        "power_against": pw,
        "distance_tv": tv,
        "power_against_ignored": ignored,
        "candidates_documented": int((probs[documented] > 0).sum()) if known else None,
        "boundary_tol_logit": tol,
        "at_cut_boundary": {k: int(counts[band[k]].sum()) for k in probs},
        "test": f"Pearson statistic over rank-ordered bins (>= 5 expected draws each), p-value "
        f"from {MC_SIMULATIONS} simulated multinomial samples of the same size",
    }


def simulate_verdicts(
    logits: NDArray[np.floating[Any]],
    p: Params,
    documented: str,
    draw_prob: NDArray[np.float64],
    seeds: Sequence[int],
    n: int,
    alpha: float,
    history: Sequence[int] = (),
) -> dict[str, int]:
    """:func:`judge_order`'s verdicts on ``n`` draws from ``draw_prob``, one sample per seed:
    with the documented order's own distribution, ``fail`` is the false-rejection count (at most
    ``alpha`` of the seeds for a calibrated test); with a wrong sampler's, the catches. Also
    ``asymptotic_rejects``: how often the chi-square approximation's p would have rejected the
    documented order (for comparison)."""
    out = {"pass": 0, "fail": 0, "undecided": 0, "asymptotic_rejects": 0}
    prob = np.asarray(draw_prob, dtype=np.float64)
    prob = prob / prob.sum()
    for seed in seeds:
        ids = np.random.default_rng(seed).choice(len(prob), size=n, p=prob)
        counts = np.bincount(ids, minlength=len(prob)).astype(np.int64)
        got = judge_order(counts, logits, p, documented, alpha, history)
        out[str(got["verdict"])] += 1
        p_asym = got["fits"][documented]["p_asymptotic"]
        out["asymptotic_rejects"] += int(p_asym is None or p_asym < alpha)
    return out
