"""Two candidates on one criterion: which is better, or tied within noise.

Measured figures are judged by the report's ranking test (:func:`rtmatrix.results.ranking.judge`:
Mann–Whitney U or a bootstrap CI over repetitions or run medians); figures measured once with
no history are judged by ``rtmatrix diff``'s threshold for the metric. Two KLDs both at or
below ``negligible_kld`` do not decide. A candidate that lacks a figure its rival has is worse
on that criterion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rtmatrix.metrics import registry
from rtmatrix.results import ranking
from rtmatrix.results.diff import Check, Direction
from rtmatrix.selection.candidates import Draft
from rtmatrix.selection.constraints import CRITERIA, Constraints
from rtmatrix.selection.verdict import BY_METRIC, show


@dataclass(frozen=True)
class Judgement:
    """How two candidates compare on one criterion: < 0 the first is better, 0 tied."""

    sign: int
    text: str
    untested: bool = False


def _entry(d: Draft, metric: str, value: float) -> ranking.Entry:
    fig = d.figure(metric)
    return ranking.Entry(d.col, value, fig.samples, d.spreads.get(metric))


def _single(e: ranking.Entry) -> bool:
    """A figure measured once, without run medians enough for the noise test."""
    runs = len(e.spread.run_medians) if e.spread else 0
    return len(e.samples) <= 1 and runs < ranking.MIN_RUNS


def _noise(best: Draft, other: Draft, metric: str, values: tuple[float, float]) -> Judgement:
    """The noise test between the better figure (``values[0]``) and the other (sign 0: tied,
    else -1; ``untested`` when there were too few samples to test)."""
    eb, eo = _entry(best, metric, values[0]), _entry(other, metric, values[1])
    if _single(eb) and _single(eo):  # no noise estimate: rtmatrix diff's threshold decides
        threshold = registry.threshold_of(metric)
        if not Check(metric, threshold).exceeded(eo.median / eb.median - 1.0):
            return Judgement(0, f"single values within rtmatrix diff's {threshold * 100:g}% "
                             "threshold")  # fmt: skip
        return Judgement(-1, f"single values, beyond the {threshold * 100:g}% threshold")
    j = ranking.judge(eb, eo)
    if j.tie:
        return Judgement(0, f"within noise ({j.test})")
    if j.untested:
        return Judgement(-1, "too few samples to test: ordered by value", True)
    return Judgement(-1, j.test)


def compare(a: Draft, b: Draft, criterion: str, c: Constraints) -> Judgement:
    """One criterion: the report's noise test for measured figures; KLD by ``negligible_kld``."""
    metric = CRITERIA[criterion][0]
    spec = BY_METRIC[metric]
    va, vb = a.number(metric), b.number(metric)
    if va is None or vb is None:
        sign = 0 if va is None and vb is None else (1 if va is None else -1)
        return Judgement(sign, f"{spec.label} not measured for both")
    said = f"{spec.label} {show(spec, va)} vs {show(spec, vb)}"
    if va == vb:
        return Judgement(0, f"{said}: equal")
    higher = registry.direction_of(metric) is Direction.HIGHER
    sign = -1 if (va > vb) == higher else 1
    if criterion == "quality":
        if max(va, vb) <= c.negligible_kld:
            return Judgement(0, f"{said}: both ≤ {c.negligible_kld:g} nats (negligible)")
        return Judgement(sign, said)
    best, other = (a, b) if sign < 0 else (b, a)
    values = (max(va, vb), min(va, vb)) if higher else (min(va, vb), max(va, vb))
    j = _noise(best, other, metric, values)
    if not j.sign:
        return Judgement(0, f"{said}: {j.text}")
    return Judgement(sign, f"{said} ({j.text})", j.untested)


def lexical(a: Draft, b: Draft, c: Constraints) -> tuple[Judgement, str]:
    """The first priority that tells two candidates apart, or a tie on all of them."""
    for criterion in c.priorities:
        j = compare(a, b, criterion, c)
        if j.sign:
            return j, criterion
    return Judgement(0, "no priority tells them apart"), ""


def dominates(a: Draft, b: Draft, c: Constraints, axes: Sequence[str]) -> bool:
    """At least as good on every Pareto axis, and better on one (noise ties are not better)."""
    signs = [compare(a, b, axis, c).sign for axis in axes]
    return all(s <= 0 for s in signs) and any(s < 0 for s in signs)
