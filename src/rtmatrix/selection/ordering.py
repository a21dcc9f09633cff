"""The order of the eligible candidates, and the reasons for each place.

1. with several runs and ``consistency_rule``: the consistency tier
   (:func:`rtmatrix.selection.consistency.tier`);
2. the Pareto layer over quality (KLD) × speed (TG) × memory (peak RSS), the front first;
3. the priorities, criterion by criterion (:func:`rtmatrix.selection.compare.lexical`).

Candidates that no criterion tells apart share a place and are tied.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from rtmatrix.selection.candidates import Draft
from rtmatrix.selection.compare import dominates, lexical
from rtmatrix.selection.consistency import consistency_reason, tier
from rtmatrix.selection.constraints import CRITERIA, Constraints
from rtmatrix.selection.verdict import BY_METRIC, Candidate, show

#: the Pareto front's three axes
PARETO = ("quality", "tg", "memory")
#: (draft, consistency tier, Pareto layer)
Placed = tuple[Draft, int, int]


def _axes(drafts: Sequence[Draft]) -> list[str]:
    """The Pareto axes some candidate has a figure for."""
    return [a for a in PARETO if any(d.number(CRITERIA[a][0]) is not None for d in drafts)]


def pareto_layers(drafts: Sequence[Draft], c: Constraints) -> dict[int, int]:
    """id(draft) -> its Pareto layer (1: the front), over the axes some candidate has."""
    axes = _axes(drafts)
    left, out, layer = list(drafts), {}, 1
    while left:
        front = [d for d in left if not any(dominates(o, d, c, axes) for o in left if o is not d)]
        for d in front or left:
            out[id(d)] = layer
        left = [d for d in left if id(d) not in out]
        layer += 1
    return out


def order(drafts: list[Draft], c: Constraints) -> list[Placed]:
    """(draft, tier, Pareto layer) in their final order."""
    rule = c.consistency_rule and any(
        d.consistency is not None and d.consistency.runs > 1 for d in drafts
    )
    layers = pareto_layers(drafts, c)

    def cmp(a: Draft, b: Draft) -> int:
        ka, kb = (tier(a, rule), layers[id(a)]), (tier(b, rule), layers[id(b)])
        if ka != kb:
            return -1 if ka < kb else 1
        return lexical(a, b, c)[0].sign

    ordered = sorted(sorted(drafts, key=lambda d: d.label), key=functools.cmp_to_key(cmp))
    return [(d, tier(d, rule), layers[id(d)]) for d in ordered]


def _figures_text(d: Draft) -> str:
    parts = []
    for criterion in PARETO:
        metric = CRITERIA[criterion][0]
        spec = BY_METRIC[metric]
        v = d.number(metric)
        if v is not None:
            parts.append(f"{spec.label} {show(spec, v)}")
    return ", ".join(parts)


def _layer_reason(d: Draft, layer: int, ordered: Sequence[Placed], c: Constraints) -> str:
    if layer == 1:
        return ("on the Pareto front of quality × speed × memory (no other candidate is as good "
                "on all three and better on one)")  # fmt: skip
    axes = _axes([x for x, _, _ in ordered])
    above = [x for x, _, lay in ordered if lay == layer - 1]
    by = next((o for o in above if dominates(o, d, c, axes)), None)
    who = f": {by.label} is as good on quality, speed and memory and better on one" if by else ""
    return f"in Pareto layer {layer}{who}"


def _versus(
    d: Draft, key: tuple[int, int], prev: Placed | None, nxt: Placed | None, c: Constraints
) -> list[str]:
    out = []
    if nxt is not None and nxt[1:] == key:
        j, criterion = lexical(d, nxt[0], c)
        if j.sign:
            out.append(f"ahead of {nxt[0].label} on {criterion}: {j.text}")
        else:
            out.append(f"tied with {nxt[0].label}: within noise on every priority")
    if prev is not None and prev[1:] == key and not lexical(prev[0], d, c)[0].sign:
        out.append(f"tied with {prev[0].label}: within noise on every priority")
    return out


def rank(drafts: list[Draft], c: Constraints) -> list[Candidate]:
    """Places, ties and the reasons of the eligible candidates, best first."""
    ordered = order(drafts, c)
    out: list[Candidate] = []
    place = 0
    for i, (d, t, layer) in enumerate(ordered):
        prev = ordered[i - 1] if i else None
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        tied_prev = prev is not None and prev[1:] == (t, layer) and not lexical(
            prev[0], d, c)[0].sign  # fmt: skip
        place = place if tied_prev else i + 1
        reasons = [_figures_text(d), _layer_reason(d, layer, ordered, c)]
        reasons += _versus(d, (t, layer), prev, nxt, c)
        reasons += consistency_reason(d, t)
        reasons += d.notes
        tied = tuple(x.label for x, xt, lay in ordered if x is not d and (xt, lay) == (t, layer)
                     and not lexical(x, d, c)[0].sign)  # fmt: skip
        out.append(replace(d.freeze(), place=place, tied_with=tied, layer=layer,
                           reasons=tuple(r for r in reasons if r)))  # fmt: skip
    return out
