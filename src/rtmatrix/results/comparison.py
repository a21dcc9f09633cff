"""A paired comparison judged: per-round cell records of two sides -> one verdict and exit code.

The records come from :mod:`rtmatrix.runner.compare` (``rtmatrix compare``): K rounds, each
running every cell once per side (A = base, B = candidate) in a seeded random order. This module
runs nothing; it turns the records into

- the **rounds** table (pandas, tidy: one row per cell × metric × round with A's and B's value —
  each the median of that process's counted repetitions, or its single value — the order the two
  processes ran in, and whether the round is used: a round where either side was ``contended``,
  or a duet round whose two processes did not overlap in time, is kept in the table but skipped
  for figures);
- the **processes** table (one row per worker process: side, round, position, outcome, verdict,
  contention, wall time);
- each cell's **outcome mark**, as ``rtmatrix diff`` marks it (:func:`diff.outcome_mark`: ``!`` new
  failure, ``*`` fixed, ``x`` not comparable, else ``=``) from each side's worst record over the
  rounds, so one crashed process in K is seen;
- the **decisions** (:func:`rtmatrix.results.paired.decide`) per cell × judged metric, from the
  usable rounds of cells that ended ``ok`` on both sides;
- an **explanation** (:mod:`rtmatrix.results.explain`) of every flagged cell (a regression or a
  new failure);
- the **exit code**: ``EXIT_NEW_FAILURE`` 2 before ``EXIT_REGRESSION`` 1 before
  ``EXIT_INCONCLUSIVE`` 3 (a check neither a regression, an improvement nor shown equivalent; a
  cell ok on both sides whose every round was contended; a cell not comparable because one side
  is unavailable; nothing compared at all), else ``EXIT_PASS`` 0 (every check equivalent or
  improved, no outcome got worse). Cells unavailable on both sides (a runtime row not installed
  in either environment) did not run: they are left out and counted in the notes.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from rtmatrix.metrics import registry
from rtmatrix.outcome import Verdict
from rtmatrix.results.diff import KNOWN_METRICS, Mark, direction_of, outcome_mark, outcome_rank
from rtmatrix.results.explain import Explanation, explain, package_differences
from rtmatrix.results.paired import (
    DEFAULT_ALPHA,
    Criterion,
    PairedComparison,
    PairedVerdict,
    decide,
)
from rtmatrix.results.records import CellRecord, MetricRecord, evidence_of, value_of

EXIT_PASS, EXIT_REGRESSION, EXIT_NEW_FAILURE, EXIT_INCONCLUSIVE, EXIT_BAD_INPUT = 0, 1, 2, 3, 4
RESULT_OF = {
    EXIT_PASS: "pass",
    EXIT_REGRESSION: "regression",
    EXIT_NEW_FAILURE: "new-failure",
    EXIT_INCONCLUSIVE: "inconclusive",
}
#: judged by default: the metrics ``rtmatrix gate`` checks by default
DEFAULT_METRICS: tuple[str, ...] = tuple(n for n, (_, _, gate) in KNOWN_METRICS.items() if gate)
SIDES = ("a", "b")
ROUND_TABLE_COLUMNS = (
    "cell", "metric", "round", "a", "b", "unit", "order", "n_a", "n_b", "contended", "used",
)  # fmt: skip
SAMPLE_TABLE_COLUMNS = ("cell", "metric", "round", "side", "position", "rep", "value")
PROCESS_TABLE_COLUMNS = (
    "cell", "round", "side", "position", "status", "verdict", "contended", "host_busy_cores",
    "wall_s",
)  # fmt: skip


@dataclass(frozen=True)
class RoundRecord:
    """One worker process of a comparison: which cell, round and side, and its cell record."""

    key: str
    round: int
    side: str  # "a" or "b"
    position: int  # 0: ran first in its round, 1: second
    record: CellRecord


# --------------------------------------------------------------------------- tables


def round_value(metric: MetricRecord | None) -> tuple[float | None, int]:
    """A process's value of a metric: the median of its counted repetitions (``samples``), else
    its single value; with the number of samples behind it (1 for a single value)."""
    value = value_of(metric)
    if not metric or not isinstance(value, int | float):
        return None, 0
    if isinstance(value, bool):
        return None, 0
    samples = metric.get("samples")
    if isinstance(samples, list) and samples:
        return float(statistics.median(float(s) for s in samples)), len(samples)
    return float(value), 1


def _by_round(records: Iterable[RoundRecord]) -> dict[tuple[str, int], dict[str, RoundRecord]]:
    out: dict[tuple[str, int], dict[str, RoundRecord]] = {}
    for r in records:
        out.setdefault((r.key, r.round), {})[r.side] = r
    return out


def _ok(rec: CellRecord) -> bool:
    return bool(rec["outcome"]["status"] == "ok")


def _contended(a: CellRecord, b: CellRecord) -> str:
    """Why a round is not used for figures: the sides that were contended, and
    ``not-overlapped`` for a duet round whose two processes did not overlap enough; empty when
    it is used."""
    why = [s for s, r in zip(SIDES, (a, b), strict=True) if r.get("contended")]
    duet = [evidence_of(r).get("duet") for r in (a, b)]
    if any(d is not None and not d.get("overlapped") for d in duet):
        why.append("not-overlapped")
    turns = [evidence_of(r).get("alternate") for r in (a, b)]
    if any(t is not None and not t.get("alternated") for t in turns):
        why.append("not-alternated")
    return "+".join(why)


def _round_rows(key: str, rnd: int, pair: dict[str, RoundRecord]) -> list[dict[str, Any]]:
    a, b = pair["a"].record, pair["b"].record
    order = "ab" if pair["a"].position < pair["b"].position else "ba"
    busy = _contended(a, b)
    rows = []
    for name in sorted(set(a["metrics"]) | set(b["metrics"])):
        if direction_of(name) is None:
            continue
        va, na = round_value(a["metrics"].get(name))
        vb, nb = round_value(b["metrics"].get(name))
        if va is None and vb is None:
            continue
        found = a["metrics"].get(name) or b["metrics"].get(name)
        unit = found.get("unit", "") if found else ""
        rows.append(
            {
                "cell": key, "metric": name, "round": rnd, "a": va, "b": vb, "unit": unit,
                "order": order, "n_a": na, "n_b": nb, "contended": busy, "used": not busy,
            }
        )  # fmt: skip
    return rows


def rounds_table(records: Iterable[RoundRecord]) -> pd.DataFrame:
    """One row per cell × metric × round where both sides ended ok (``ROUND_TABLE_COLUMNS``);
    ``used`` is False where a side was contended."""
    rows = [
        row
        for (key, rnd), pair in _by_round(records).items()
        if len(pair) == 2 and _ok(pair["a"].record) and _ok(pair["b"].record)
        for row in _round_rows(key, rnd, pair)
    ]
    frame = pd.DataFrame(rows, columns=list(ROUND_TABLE_COLUMNS))
    return frame.astype({"round": int, "used": bool})


def _samples(metric: MetricRecord | None) -> list[float]:
    found = metric.get("samples") if metric else None
    return [float(v) for v in found] if isinstance(found, list) else []


def samples_table(
    records: Iterable[RoundRecord], metrics: Sequence[str] = DEFAULT_METRICS
) -> pd.DataFrame:
    """One row per counted repetition of each process's ``metrics`` (the ``samples`` behind
    its round value): which cell, round, side, its position in the round's order and the
    repetition's index. For studies of where a round's spread comes from
    (``benchmarks/compare_quality.py --samples``); not judged."""
    rows = [
        {"cell": r.key, "metric": m, "round": r.round, "side": r.side, "position": r.position,
         "rep": i, "value": float(v)}
        for r in records
        if _ok(r.record)
        for m in metrics
        for i, v in enumerate(_samples(r.record["metrics"].get(m)))
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=list(SAMPLE_TABLE_COLUMNS))


def processes_table(records: Iterable[RoundRecord]) -> pd.DataFrame:
    rows = [
        {
            "cell": r.key,
            "round": r.round,
            "side": r.side,
            "position": r.position,
            "status": r.record["outcome"]["status"],
            "verdict": r.record["verdict"],
            "contended": bool(r.record.get("contended")),
            "host_busy_cores": value_of(r.record["metrics"].get("host_busy_cores")),
            "wall_s": r.record.get("wall_s"),
        }
        for r in records
    ]
    return pd.DataFrame(rows, columns=list(PROCESS_TABLE_COLUMNS))


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class CellResult:
    """A cell's outcome over the rounds: its diff mark, how often each side ended how, and how
    many rounds could be used for figures."""

    key: str
    runtime: str
    mark: Mark
    reasons: list[str]
    outcomes: dict[str, dict[str, int]]  # side -> status -> processes
    verdicts: dict[str, str]  # side -> the worst record's verdict
    statuses: dict[str, str]
    rounds: int  # rounds that ran this cell on both sides
    ok_rounds: int  # ... ending ok on both sides
    used_rounds: int  # ... and not contended (nor, in a duet, apart in time)
    left_out: bool = False  # unavailable on both sides: the row did not run
    not_overlapped_rounds: int = 0  # duet rounds whose two processes did not overlap enough

    @property
    def contended_rounds(self) -> int:
        return self.ok_rounds - self.used_rounds - self.not_overlapped_rounds

    @property
    def all_contended(self) -> bool:
        return self.ok_rounds > 0 and self.used_rounds == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "runtime": self.runtime,
            "mark": str(self.mark),
            "reasons": self.reasons,
            "outcomes": self.outcomes,
            "verdicts": self.verdicts,
            "statuses": self.statuses,
            "rounds": self.rounds,
            "ok_rounds": self.ok_rounds,
            "used_rounds": self.used_rounds,
            "contended_rounds": self.contended_rounds,
            "not_overlapped_rounds": self.not_overlapped_rounds,
            "left_out": self.left_out,
        }


def _counts(recs: Sequence[CellRecord]) -> dict[str, int]:
    return dict(Counter(str(r["outcome"]["status"]) for r in recs))


def _counts_text(side: str, counts: Mapping[str, int]) -> str:
    return f"{side.upper()}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def worst(recs: Sequence[CellRecord]) -> CellRecord:
    """The side's worst record over the rounds (the first, among equals)."""
    return max(recs, key=outcome_rank)


#: the one-sided sign test's level for a verdict that changed in some rounds only
VERDICT_ALPHA = 0.05


def _intermittent(
    mark: Mark, reasons: list[str], recs: Mapping[str, Sequence[CellRecord]]
) -> tuple[Mark, list[str]]:
    """A verdict that got worse (or better) in some rounds only, every process of both sides
    ending ok (a self-check's or a timing check's WARN, never a crash): a paired sign test over
    the rounds (``scipy.stats.binomtest``, one-sided) — the side worse in more rounds than
    chance allows keeps the mark; otherwise the cell is marked noise (``~``) with the counts.
    A change seen in every round is kept whatever the number of rounds (a consistent change is
    not intermittent); a status change (crash, error) is never tested."""
    from scipy import stats  # imported here: ~2 s (see rtmatrix.results.paired)

    pairs = list(zip(recs["a"], recs["b"], strict=False))
    if len(pairs) < 2 or not all(_ok(x) and _ok(y) for x, y in pairs):
        return mark, reasons
    b_worse = sum(outcome_rank(y) > outcome_rank(x) for x, y in pairs)
    a_worse = sum(outcome_rank(x) > outcome_rank(y) for x, y in pairs)
    moved, other = (b_worse, a_worse) if mark is Mark.NEW_FAILURE else (a_worse, b_worse)
    if moved == len(pairs) or moved + other == 0:
        return mark, reasons
    p = float(stats.binomtest(moved, moved + other, 0.5, alternative="greater").pvalue)
    if p <= VERDICT_ALPHA:
        return mark, [*reasons, f"in {moved} of {len(pairs)} rounds (the other side "
                      f"{other}; sign test p = {p:.3g})"]  # fmt: skip
    worse = "B" if mark is Mark.NEW_FAILURE else "A"
    text = (
        f"intermittent: {worse}'s verdict was worse in {moved} of {len(pairs)} rounds, the "
        f"other side's in {other}; not shown to be more frequent (one-sided sign test p = "
        f"{p:.2f} > {VERDICT_ALPHA}); each round's record keeps its verdict"
    )
    return Mark.NOISE, [*reasons, text]


def judge_cell(key: str, recs: Mapping[str, Sequence[CellRecord]], rounds: int) -> CellResult:
    """``recs``: side -> the cell's records over the rounds, in round order."""
    wa, wb = worst(recs["a"]), worst(recs["b"])
    mark, reasons = outcome_mark(wa, wb)
    if mark in (Mark.NEW_FAILURE, Mark.FIXED):
        mark, reasons = _intermittent(mark, reasons, recs)
    outcomes = {s: _counts(recs[s]) for s in SIDES}
    mixed = [s for s in SIDES if len(outcomes[s]) > 1]
    if mark is not Mark.SAME and mixed:
        reasons = [*reasons, "; ".join(_counts_text(s, outcomes[s]) for s in SIDES)]
    both_unavailable = all(recs[s][0]["verdict"] == Verdict.UNAVAILABLE for s in SIDES)
    why = [
        _contended(x, y) for x, y in zip(recs["a"], recs["b"], strict=False) if _ok(x) and _ok(y)
    ]
    ok, used = len(why), sum(not w for w in why)
    return CellResult(
        key=key,
        runtime=str(wa["runtime"]),
        mark=mark,
        reasons=reasons,
        outcomes=outcomes,
        verdicts={"a": str(wa["verdict"]), "b": str(wb["verdict"])},
        statuses={"a": str(wa["outcome"]["status"]), "b": str(wb["outcome"]["status"])},
        rounds=rounds,
        ok_rounds=ok,
        used_rounds=used,
        left_out=mark is Mark.NOT_COMPARABLE and both_unavailable,
        not_overlapped_rounds=sum(w in ("not-overlapped", "not-alternated") for w in why),
    )


def records_by_cell(records: Iterable[RoundRecord]) -> dict[str, dict[str, list[CellRecord]]]:
    """key -> side -> records in round order (cells in the order first seen)."""
    out: dict[str, dict[str, list[CellRecord]]] = {}
    for r in sorted(records, key=lambda r: r.round):
        out.setdefault(r.key, {"a": [], "b": []})[r.side].append(r.record)
    return out


# --------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Outcome:
    code: int
    headline: str
    counts: dict[str, int]

    @property
    def result(self) -> str:
        return RESULT_OF[self.code]


def _inconclusive_cells(cells: Sequence[CellResult]) -> list[CellResult]:
    return [
        c for c in cells if not c.left_out and (c.all_contended or c.mark is Mark.NOT_COMPARABLE)
    ]


def _undecided_text(shown: Sequence[CellResult], paired: PairedComparison, inc: int) -> str:
    if not shown:
        return "no cell was compared"
    parts = []
    if inc:
        parts.append(f"{inc} of {len(paired.checks)} check(s) neither worse nor shown equivalent")
    busy = sum(c.all_contended for c in shown)
    if busy:
        parts.append(f"{busy} cell(s) not judged: every round contended")
    apart = sum(c.mark is Mark.NOT_COMPARABLE for c in shown)
    if apart:
        parts.append(f"{apart} cell(s) not comparable")
    return "; ".join(parts)


def outcome_of(cells: Sequence[CellResult], paired: PairedComparison) -> Outcome:
    """The exit code and headline: 2 new failure, 1 regression, 3 inconclusive, 0 pass."""
    shown = [c for c in cells if not c.left_out]
    verdicts = paired.counts()
    n = {
        "cells": len(shown),
        "new_failures": sum(c.mark is Mark.NEW_FAILURE for c in shown),
        "fixed": sum(c.mark is Mark.FIXED for c in shown),
        "not_comparable": sum(c.mark is Mark.NOT_COMPARABLE for c in shown),
        "not_judged_contended": sum(c.all_contended for c in shown),
        "checks": len(paired.checks),
        **verdicts,
    }
    reg, inc = verdicts[PairedVerdict.REGRESSION], verdicts[PairedVerdict.INCONCLUSIVE]
    undecided = inc + len(_inconclusive_cells(shown))
    if n["new_failures"]:
        code = EXIT_NEW_FAILURE
        head = f"NEW FAILURE: {n['new_failures']} cell(s) got worse; {reg} regression(s)"
    elif reg:
        flagged = len({c.cell for c in paired.checks if c.verdict is PairedVerdict.REGRESSION})
        code, head = EXIT_REGRESSION, f"REGRESSION: {reg} check(s) worse on {flagged} cell(s)"
    elif undecided or not shown:
        code, head = EXIT_INCONCLUSIVE, "INCONCLUSIVE: " + _undecided_text(shown, paired, inc)
    else:
        code = EXIT_PASS
        head = (
            f"PASS: {len(paired.checks)} check(s) on {len(shown)} cell(s): "
            f"{verdicts[PairedVerdict.EQUIVALENT]} equivalent, "
            f"{verdicts[PairedVerdict.IMPROVED]} improved; no outcome got worse"
        )
    return Outcome(code, head, n)


# --------------------------------------------------------------------------- assembly


def empty_comparison(alpha: float) -> PairedComparison:
    why = "no check: no round ended ok on both sides without contention"
    return PairedComparison([], alpha, tested=0, notes=[why])


@dataclass(frozen=True)
class Comparison:
    settings: dict[str, Any]
    sides: dict[str, dict[str, Any]]
    cells: list[CellResult]
    rounds: pd.DataFrame
    processes: pd.DataFrame
    paired: PairedComparison
    explanations: dict[str, Explanation]
    outcome: Outcome
    notes: list[str] = field(default_factory=list)
    #: every counted repetition's value (:func:`samples_table`); not serialized
    samples: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(SAMPLE_TABLE_COLUMNS))
    )
    created_utc: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def code(self) -> int:
        return self.outcome.code

    def flagged(self) -> list[str]:
        """Keys of cells with a new failure or a regression: new failures first."""
        new = [c.key for c in self.cells if c.mark is Mark.NEW_FAILURE]
        reg = [c.cell for c in self.paired.checks if c.verdict is PairedVerdict.REGRESSION]
        return list(dict.fromkeys([*new, *reg]))

    def to_dict(self) -> dict[str, Any]:
        a = self.sides["a"].get("environment", {}).get("distributions", {})
        b = self.sides["b"].get("environment", {}).get("distributions", {})
        return {
            "format": "rtmatrix-compare",
            "version": 1,
            "created_utc": self.created_utc,
            "exit_code": self.outcome.code,
            "result": self.outcome.result,
            "headline": self.outcome.headline,
            "counts": self.outcome.counts,
            "settings": self.settings,
            "sides": self.sides,
            "package_differences": [p.to_dict() for p in package_differences(a, b)],
            "flagged": self.flagged(),
            "cells": [c.to_dict() for c in self.cells],
            "explanations": {k: e.to_dict() for k, e in self.explanations.items()},
            "decisions": self.paired.to_dict(),
            "rounds": _records(self.rounds),
            "processes": _records(self.processes),
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A DataFrame as JSON records, NaN as null (pandas' own JSON writer)."""
    out: list[dict[str, Any]] = json.loads(frame.to_json(orient="records"))
    return out


def _duet_note(settings: Mapping[str, Any]) -> list[str]:
    if settings.get("mode_used") == "alternate":
        return [
            "alternate: each round ran both sides' processes at once, their repetitions "
            "taking turns (ABBA); their imports and loads ran side by side, so cold-start "
            "figures were measured beside the other side"
        ]
    if settings.get("mode_used") != "duet":
        return []
    return [
        "duet: each round ran both sides at once, each pinned to its own CPUs; the sides' "
        "absolute figures were measured beside each other (lower than alone): the ratios are "
        "the finding"
    ]


def _notes(cells: Sequence[CellResult], rounds: pd.DataFrame) -> list[str]:
    notes = []
    busy = sum(c.contended_rounds for c in cells)
    if busy:
        which = sum(c.contended_rounds > 0 for c in cells)
        notes.append(
            f"{busy} contended round(s) on {which} cell(s) skipped for figures (the host was busy "
            "outside the cell on a side); their outcomes still count"
        )
    apart = sum(c.not_overlapped_rounds for c in cells)
    if apart:
        notes.append(
            f"{apart} duet or alternate round(s) skipped for figures: the two processes' counted "
            "repetitions did not overlap enough (evidence.duet) or did not all take their turns "
            "(evidence.alternate)"
        )
    once = [c.key for c in cells if c.rounds == 1 and not c.left_out]
    if once:
        notes.append(
            f"{len(once)} cell(s) ran one round only: not ok on a side in the first round, so "
            "there are no figures to compare"
        )
    left = [c.key for c in cells if c.left_out]
    if left:
        notes.append(f"{len(left)} cell(s) unavailable on both sides left out (did not run)")
    single = sorted(set(rounds.loc[(rounds["n_a"] == 1) & rounds["used"], "metric"]))
    if single:
        notes.append("single-value metrics (one value per process): " + ", ".join(single))
    return notes


#: the A/A ledger ``benchmarks/compare_quality.py`` appends to (a source checkout has it)
LEDGER = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "compare_quality_ledger.csv"
NOISE_METRICS = tuple(reversed(registry.noise_metrics()))  # tg_tps, pp_tps


def typical_noise(ledger: Path = LEDGER, mode: str = "sequential") -> dict[str, tuple[float, int]]:
    """Per throughput metric: the median per-round sd of the paired log-ratio over the ledger's
    A/A comparisons made in ``mode`` (rows without a mode were sequential), and how many there
    were (empty without a ledger)."""
    try:
        table = pd.read_csv(ledger)
    except (OSError, ValueError):
        return {}
    modes = table["mode"].fillna("sequential") if "mode" in table else "sequential"
    aa = table[
        (table["condition"] == "A/A") & table["metric"].isin(NOISE_METRICS) & (modes == mode)
    ]
    out: dict[str, tuple[float, int]] = {}
    for metric, group in aa.groupby("metric"):
        sd = pd.to_numeric(group["sd_log"], errors="coerce").dropna()
        if len(sd):
            out[str(metric)] = (float(sd.median()), len(sd))
    return out


def noise_notes(checks: Sequence[Any], typical: Mapping[str, tuple[float, int]]) -> list[str]:
    """Per cell and throughput metric: the per-round spread this comparison measured against
    the ledger's typical one, so a machine noisier than it should be shows."""
    out = []
    for c in checks:
        if c.metric not in NOISE_METRICS or not c.sd_log:
            continue
        line = f"noise {c.cell} {c.metric}: per-round sd of the log-ratio {c.sd_log * 100:.1f} %"
        if c.metric in typical:
            med, n = typical[c.metric]
            factor = c.sd_log / med if med else float("nan")
            line += (
                f" (ledger's typical on this kind of host, same mode: {med * 100:.1f} % over "
                f"{n} A/A comparisons; {factor:.1f}x)"
            )
            if factor > 1.5:
                line += ": this machine is noisier than usual; more rounds, or a quieter host"
        else:
            line += " (no A/A ledger to compare with)"
        out.append(line)
    return out


def build(
    records: Sequence[RoundRecord],
    sides: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    metrics: Sequence[str] = DEFAULT_METRICS,
    criteria: Mapping[str, Criterion] | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """Judge the records of a comparison. ``sides``: per side (``a``, ``b``) its description
    (python, adapter, options, ``environment`` with ``distributions``); ``settings`` is recorded
    as given."""
    rounds = rounds_table(records)
    by_cell = records_by_cell(records)
    cells = [
        judge_cell(key, recs, min(len(recs["a"]), len(recs["b"])))
        for key, recs in by_cell.items()
        if recs["a"] and recs["b"]
    ]
    judged = rounds[rounds["used"] & rounds["metric"].isin(list(metrics))]
    paired = decide(judged, criteria, alpha) if len(judged) else empty_comparison(alpha)
    outcome = outcome_of(cells, paired)
    flagged = {c.key for c in cells if c.mark is Mark.NEW_FAILURE} | {
        c.cell for c in paired.checks if c.verdict is PairedVerdict.REGRESSION
    }
    used = rounds[rounds["used"]]
    explanations = {
        key: explain(
            key,
            by_cell[key]["a"],
            by_cell[key]["b"],
            used[used["cell"] == key],
            sides,
            alpha,
            {c.metric: c for c in paired.checks if c.cell == key},
        )
        for key in by_cell
        if key in flagged
    }
    return Comparison(
        settings=settings,
        sides=sides,
        cells=cells,
        rounds=rounds,
        processes=processes_table(records),
        samples=samples_table(records, metrics),
        paired=paired,
        explanations=explanations,
        outcome=outcome,
        notes=_notes(cells, rounds)
        + _duet_note(settings)
        + paired.notes
        + noise_notes(
            paired.checks, typical_noise(mode=str(settings.get("mode_used", "sequential")))
        ),
    )
