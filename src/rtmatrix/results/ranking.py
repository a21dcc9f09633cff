"""Best per criterion: for each figure and fixture, the best row, the rows within noise of it,
and the rows whose spread is larger than their lead over the next.

Rows are compared where they ran the same fixture at the same params (the same row key), from
the figures the selection matrix shows (``Column.picks``: never a contended one). A contended
figure is not ranked.

"Within noise" is decided with the test ``rtmatrix diff`` uses
(``rtmatrix.results.stats.compare_samples`` at ``diff.DEFAULT_ALPHA`` = 0.01): the two-sided
Mann–Whitney U test when the sample sizes can reach alpha (5 + 5 values can, 4 + 4 cannot),
else the percentile bootstrap CI of the ratio of medians, else (fewer than 3 values a side) the
two cannot be told apart: the row is marked untested (``#2?``), neither a tie nor behind.
Mann–Whitney because timing samples are skewed and have outliers (a rank test assumes no
distribution) and because it is the test behind the upgrade view's marks, so "within noise"
means the same thing on both. The samples compared are
the rows' medians over their comparable runs when both rows have ``MIN_RUNS`` or more (that sees
process-to-process and run-to-run variation), else the repetitions of the run shown, which come
from one worker process and so understate the noise; the hover text says which. A figure
measured once (peak RSS, cold start) with one run has no noise estimate: it ties only when equal,
and is ranked by its value otherwise (the hover text says "single values").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rtmatrix.metrics import registry
from rtmatrix.results.columns import Column, Rank, Spread, as_dict, headline_cells, row_key
from rtmatrix.results.diff import DEFAULT_ALPHA, Direction, direction_of
from rtmatrix.results.stats import Method, SampleTest, compare_samples

#: the ranked metrics, from the metric registry (``MetricSpec.ranked``)
RANKED = registry.ranked()
MIN_RUNS = 3  # run medians are compared when both rows have at least this many


@dataclass(frozen=True)
class Entry:
    """One row's figure for one criterion at one fixture."""

    col: Column
    median: float
    samples: tuple[float, ...]
    spread: Spread | None

    @property
    def label(self) -> str:
        return self.col.label


def _entry(col: Column, key: str, metric: str) -> Entry | None:
    for cell in headline_cells(col):
        if row_key(cell) != key or cell.get("contended") or cell["outcome"]["status"] != "ok":
            continue
        m = as_dict(cell["metrics"].get(metric))
        value = m.get("value")
        if isinstance(value, int | float) and not isinstance(value, bool):
            samples = tuple(float(s) for s in m.get("samples") or [])
            return Entry(col, float(value), samples, col.spreads.get((key, metric)))
    return None


def entries(cols: Sequence[Column], key: str, metric: str) -> list[Entry]:
    """The rows that have an uncontended figure for ``metric`` at fixture ``key``."""
    found = (_entry(col, key, metric) for col in cols)
    return [e for e in found if e is not None]


def _sides(best: Entry, other: Entry) -> tuple[Sequence[float], Sequence[float], str]:
    """What to compare: run medians where both rows have enough runs, else repetitions."""
    b = best.spread.run_medians if best.spread else ()
    o = other.spread.run_medians if other.spread else ()
    if len(b) >= MIN_RUNS and len(o) >= MIN_RUNS:
        return b, o, "run medians"
    return best.samples or (best.median,), other.samples or (other.median,), "repetitions"


def describe(st: SampleTest, n: tuple[int, int], what: str) -> str:
    """How a pair was judged, in words."""
    sizes = f"n={n[0]}/{n[1]} {what}"
    if st.method is Method.MANN_WHITNEY:
        return f"Mann–Whitney U p={st.p_value:.3g} ({sizes}, α={DEFAULT_ALPHA:g})"
    if st.method is Method.BOOTSTRAP and st.ci:
        level = f"{(1 - DEFAULT_ALPHA) * 100:g}%"
        return f"bootstrap {level} CI of the ratio {st.ci[0]:.3f}–{st.ci[1]:.3f} ({sizes})"
    if st.method is Method.TOO_FEW:
        return f"too few samples to tell apart ({sizes})"
    return f"single values ({sizes}): no noise estimate"


@dataclass(frozen=True)
class Judged:
    tie: bool  # tested, and within noise of the best (or equal to it)
    untested: bool  # too few samples to tell either way
    test: str


def judge(best: Entry, other: Entry) -> Judged:
    """Is ``other`` within noise of ``best``, and how was that decided."""
    b, o, what = _sides(best, other)
    st = compare_samples(list(b), list(o), DEFAULT_ALPHA)
    said = describe(st, (len(b), len(o)), what)
    if other.median == best.median:
        return Judged(True, False, f"{said}: equal to {best.label}")
    if st.method is Method.TOO_FEW:
        return Judged(False, True, f"{said} from {best.label}")
    verdict = "differs from" if st.different else "within noise of"
    return Judged(not st.different, False, f"{said}: {verdict} {best.label}")


def _swing(entry: Entry, nxt: Entry) -> str:
    """Set when the row's figure varies more than it leads the next row by."""
    swing = entry.spread.swing if entry.spread else None
    if swing is None or nxt.median <= 0:
        return ""
    lead = abs(entry.median / nxt.median - 1.0)
    if swing <= lead:
        return ""
    how = "run to run" if entry.spread and entry.spread.between_cv is not None else "repetitions"
    return (
        f"its figure swings ±{swing * 100:.1f}% ({how}), more than its {lead * 100:.1f}% lead "
        f"over {nxt.label}"
    )


def rank(found: Sequence[Entry], direction: Direction) -> list[tuple[Entry, Rank]]:
    """Places by median (best first), ties within noise of the best, swings."""
    ordered = sorted(found, key=lambda e: e.median, reverse=direction is Direction.HIGHER)
    best = ordered[0]
    out = []
    for place, entry in enumerate(ordered, start=1):
        nxt = ordered[place] if place < len(ordered) else None
        swings = _swing(entry, nxt) if nxt is not None else ""
        if entry is best:
            test = f"each other row judged against it ({_method_word()})"
            out.append((entry, Rank(place, len(ordered), True, False, test, swings)))
            continue
        j = judge(best, entry)
        out.append((entry, Rank(place, len(ordered), False, j.tie, j.test, swings, j.untested)))
    return out


def _method_word() -> str:
    return f"Mann–Whitney U or bootstrap CI at α={DEFAULT_ALPHA:g}, as rtmatrix diff"


def attach(cols: Sequence[Column]) -> None:
    """``col.ranks`` for every ranked figure that two or more rows share."""
    keys = list(dict.fromkeys(row_key(c) for col in cols for c in headline_cells(col)))
    for metric in RANKED:
        direction = direction_of(metric)
        if direction is None:
            continue
        for key in keys:
            found = entries(cols, key, metric)
            if len(found) < 2:
                continue
            for entry, r in rank(found, direction):
                entry.col.ranks[(key, metric)] = r
