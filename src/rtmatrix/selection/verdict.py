"""What the verdict says of one candidate: its figures, the hard limits it misses, its
consistency over runs, and its place — frozen values, each with ``to_dict`` for
``rtmatrix select --json``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtmatrix.names import M
from rtmatrix.options import options_text
from rtmatrix.selection.constraints import LIMITS, LimitSpec

#: the figures a candidate carries: every limit's metric, and its licence
FIGURES = (*(s.metric for s in LIMITS), M.LICENSE)
#: metric -> the limit that reads it (its label, unit and scale)
BY_METRIC = {s.metric: s for s in LIMITS}


def num_text(v: float) -> str:
    """A number with the digits that matter: ``508``, ``0.0812``, ``3.6e-11``."""
    if v == 0 or abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if abs(v) >= 0.01 else f"{v:.2g}"


def show(spec: LimitSpec, value: float) -> str:
    """A figure in its limit's unit: ``508 MiB``, ``0.0812 nats``."""
    return f"{num_text(value * spec.scale)} {spec.unit}"


@dataclass(frozen=True)
class Figure:
    """One figure of a candidate: its value as recorded (None: unavailable, with the reason)."""

    metric: str
    value: float | str | None
    unit: str
    samples: tuple[float, ...] = ()
    reason: str = ""

    @property
    def number(self) -> float | None:
        v = self.value
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "n": len(self.samples),
                "reason": self.reason or None}  # fmt: skip


@dataclass(frozen=True)
class Failure:
    """A hard limit a candidate misses: the constraint, its figure and the limit, in words."""

    constraint: str
    text: str
    figure: float | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"constraint": self.constraint, "text": self.text, "figure": self.figure}


@dataclass(frozen=True)
class Regression:
    """A run-to-run step of a candidate's cell that ``rtmatrix diff`` marks worse (``-``) or a
    new failure (``!``), and what recorded change explains it (empty: nothing did)."""

    run_id: str
    mark: str
    text: str
    because: str

    @property
    def explained(self) -> bool:
        return bool(self.because)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "mark": self.mark, "text": self.text,
                "explained": self.explained, "because": self.because or None}  # fmt: skip


@dataclass(frozen=True)
class Consistency:
    """A candidate over the runs that have its headline cell, oldest first."""

    runs: int
    tg_cv: float | None  # run-to-run coefficient of variation of TG (comparable runs)
    places: tuple[int | None, ...]  # its place in each run's own selection (None: not eligible)
    regressions: tuple[Regression, ...]
    max_cv: float  # the limit it was judged by (a fraction)

    @property
    def held(self) -> tuple[int | None, int]:
        """(its most frequent place, in how many runs it held it)."""
        found = Counter(p for p in self.places if p is not None)
        if not found:
            return None, 0
        place, n = min(found.items(), key=lambda kv: (-kv[1], kv[0]))
        return place, n

    @property
    def consistent(self) -> bool | None:
        """None with fewer than two runs (nothing to judge)."""
        if self.runs < 2:
            return None
        noisy = self.tg_cv is not None and self.tg_cv > self.max_cv
        return not noisy and all(r.explained for r in self.regressions)

    def text(self) -> str:
        if self.runs < 2:
            return "one run: no history to judge its consistency by"
        cv = "unknown" if self.tg_cv is None else f"±{self.tg_cv * 100:.1f}%"
        bound = ">" if self.tg_cv is not None and self.tg_cv > self.max_cv else "≤"
        place, n = self.held
        parts = [f"TG spread {cv} run to run ({bound} {self.max_cv * 100:g}%)"]
        if place is not None:
            parts.append(f"held place {place} in {n} of {self.runs} runs")
        for r in self.regressions:
            why = f"explained: {r.because}" if r.explained else "unexplained: nothing recorded "
            why += "" if r.explained else "changed (version, settings, stack, machine)"
            parts.append(f"regression in run {r.run_id} ({r.text}) {why}")
        if not self.regressions:
            parts.append("no regression")
        return f"over {self.runs} runs: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        place, n = self.held
        return {"runs": self.runs, "tg_cv": self.tg_cv, "max_cv": self.max_cv,
                "places": list(self.places), "held_place": place, "held_runs": n,
                "regressions": [r.to_dict() for r in self.regressions],
                "consistent": self.consistent}  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    """A runtime row × dtype × settings for one model, eligible (no failures) or excluded."""

    model: str
    runtime: str
    dtype: str
    settings: Mapping[str, Any]
    key: str  # its headline cell
    run_id: str  # the run its verdict is read from
    figures: Mapping[str, Figure]
    failures: tuple[Failure, ...] = ()
    notes: tuple[str, ...] = ()
    consistency: Consistency | None = None
    place: int | None = None  # 1-based; tied candidates share it
    tied_with: tuple[str, ...] = ()
    layer: int | None = None  # its Pareto layer (1: the front)
    reasons: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        opts = options_text(dict(self.settings))
        return f"{self.runtime} {self.dtype}" + (f" ({opts})" if opts else "")

    @property
    def eligible(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "model": self.model, "runtime": self.runtime,
            "dtype": self.dtype, "settings": dict(self.settings), "key": self.key,
            "run_id": self.run_id, "eligible": self.eligible, "place": self.place,
            "tied_with": list(self.tied_with), "pareto_layer": self.layer,
            "figures": {k: f.to_dict() for k, f in self.figures.items()},
            "failures": [f.to_dict() for f in self.failures], "notes": list(self.notes),
            "reasons": list(self.reasons),
            "consistency": self.consistency.to_dict() if self.consistency else None,
        }  # fmt: skip
