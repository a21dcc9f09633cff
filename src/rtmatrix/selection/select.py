"""The selection verdict: per model, which candidate to pick under a team's constraints, why,
and why the others are out.

Models come real checkpoints first (a cell's ``fixture.source``, or a model rtmatrix ships as
a real one), then the architecture-family toys (``fixture.architecture``), then the seeded
synthetic models. A candidate is a runtime row × dtype × the settings it needed: the row's
options, plus the control options a crashed or imprecise cell needed to run (its figures are
then the control's). Its figures are those of its headline cell (the model's most common
params), read as the report reads them: where the newest run ran the cell contended, from the
newest run that did not (``report.history.pick``).

A candidate is excluded by every hard limit it misses, each with its figure; a limit whose
figure no candidate of the model has (KLD on a synthetic model) does not apply to that model
and says so. The eligible ones are ordered:

1. with several runs and ``consistency_rule``: consistent candidates (TG spread across runs
   within ``max_tg_cv_pct``, every regression explained by a recorded change) before those
   without history, before inconsistent ones — the chapter's rule, "a consistent second place
   whose regressions remain explainable beats a one-time winner that cannot be diagnosed";
2. by Pareto layer over quality (KLD) × speed (TG) × memory (peak RSS), the front first;
3. by the priorities, criterion by criterion; two figures within noise of each other (the
   report's ranking test, :func:`rtmatrix.report.ranking.judge`) do not decide, nor do two KLDs
   both at or below ``negligible_kld``. Candidates that no criterion tells apart are tied.

The report imports this package: ``rtmatrix.report`` modules must import it inside functions
(this module imports ``rtmatrix.report.views``, ``history`` and ``ranking``).
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rtmatrix.fixtures.sources import REAL_MODELS
from rtmatrix.fixtures.variants import VARIANTS
from rtmatrix.matrix import options_text
from rtmatrix.metrics import registry
from rtmatrix.names import M
from rtmatrix.report import history, ranking
from rtmatrix.report.views import (
    Column,
    Spread,
    as_dict,
    columns,
    common_params,
    fixture_label,
    normal_cells,
    params_text,
    picked,
    scenario_of,
)
from rtmatrix.results.diff import (
    Check,
    Direction,
    Mark,
    compare_cells,
    default_checks,
    machine_differences,
)
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from rtmatrix.selection.constraints import (
    CRITERIA,
    LIMITS,
    Constraints,
    LimitSpec,
    SelectionError,
    license_allowed,
    license_alternatives,
)

KINDS = ("real checkpoint", "architecture toy", "synthetic")
#: the Pareto front's three axes
PARETO = ("quality", "tg", "memory")
RULE = (
    "a consistent second place whose regressions remain explainable beats a one-time winner "
    "that cannot be diagnosed"
)
EXIT_ELIGIBLE, EXIT_NONE = 0, 1
_FIGURES = (*(s.metric for s in LIMITS), M.LICENSE)
_BY_METRIC = {s.metric: s for s in LIMITS}


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class ModelSelection:
    """The verdict for one model: its eligible candidates in order, the excluded ones."""

    model: str
    kind: str  # one of KINDS
    host: str
    run_id: str
    params: Mapping[str, Any]
    ranked: tuple[Candidate, ...]
    excluded: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()
    runs: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "host": self.host,
                "run_id": self.run_id, "params": dict(self.params), "runs": self.runs,
                "ranked": [c.to_dict() for c in self.ranked],
                "excluded": [c.to_dict() for c in self.excluded],
                "notes": list(self.notes)}  # fmt: skip

    def markdown(self) -> list[str]:
        runs = f"{self.runs} runs, newest {self.run_id}" if self.runs > 1 else f"run {self.run_id}"
        at = f", at {params_text(dict(self.params))}" if self.params else ""
        out = [f"For **{self.model}** ({self.kind}) on {self.host}, {runs}{at}, under these "
               "constraints:", ""]  # fmt: skip
        for c in self.ranked:
            tie = "=" if c.tied_with else ""
            out.append(f"{tie}{c.place}. **{c.label}**, because {'; '.join(c.reasons)}.")
        if not self.ranked:
            out.append("No candidate meets the constraints.")
        if self.excluded:
            out += ["", "Excluded:"]
            out += [f"- **{c.label}**: {'; '.join(f.text for f in c.failures)}."
                    for c in self.excluded]  # fmt: skip
        if self.notes:
            out += ["", *(f"_Note: {n}_" for n in self.notes)]
        return out


@dataclass(frozen=True)
class Selection:
    """The answer for every model of the runs, under one set of constraints."""

    constraints: Constraints
    models: tuple[ModelSelection, ...]
    run_ids: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        """0 when the first model has an eligible candidate, 1 when it has none (or there is
        no model to choose for)."""
        return EXIT_ELIGIBLE if self.models and self.models[0].ranked else EXIT_NONE

    def to_dict(self) -> dict[str, Any]:
        lines = self.constraints.lines()
        return {
            "format": "rtmatrix-select", "runs": list(self.run_ids),
            "exit_code": self.exit_code, "constraints": self.constraints.to_dict(),
            "constraint_lines": [{"key": k, "value": v, "from": o, "why": w}
                                 for k, v, o, w in lines],
            "models": [m.to_dict() for m in self.models],
        }  # fmt: skip

    def to_markdown(self) -> str:
        out = ["## Selection", "", f"Constraints: {self.constraints.summary()}.", ""]
        for m in self.models:
            out += [*m.markdown(), ""]
        if not self.models:
            out += ["No model with a cell expected to run in these runs.", ""]
        out += ["<details><summary>Constraints</summary>", "",
                "| constraint | value | from | why |", "|---|---|---|---|"]  # fmt: skip
        for key, value, origin, why in self.constraints.lines():
            out.append(f"| `{key}` | {value} | {origin} | {why} |")
        out += ["", "</details>", ""]
        return "\n".join(out)


# --------------------------------------------------------------------------- models


def model_of(cell: CellRecord) -> tuple[str, str]:
    """(model name, kind) of a cell: a real checkpoint, an architecture toy, or synthetic."""
    fx = as_dict(cell.get("fixture"))
    name = str(fx.get("model") or fx.get("name") or "?")
    if fx.get("source") or name in REAL_MODELS:
        return name, KINDS[0]
    return name, KINDS[1] if fx.get("architecture") else KINDS[2]


def host_of(col: Column) -> str:
    m = col.machine
    cores = m.get("cores_logical")
    detail = ", ".join(
        str(x) for x in (m.get("cpu_model"), m.get("arch"), cores and f"{cores} cores") if x
    )
    name = str(m.get("hostname") or "this host")
    return f"{name} ({detail})" if detail else name


def _tag(cell: CellRecord) -> str:
    return str(cell["key"]).rsplit("|", 1)[-1]


def matches(at: str, cell: CellRecord) -> bool:
    """Whether a limit's ``at`` glob names this cell: ``FIXTURE|TAG`` or the fixture name."""
    name = str(as_dict(cell.get("fixture")).get("name"))
    target = f"{name}|{_tag(cell)}" if "|" in at else name
    return fnmatch.fnmatchcase(target, at)


# --------------------------------------------------------------------------- candidates


@dataclass
class _Draft:
    """A candidate while it is being judged: its column and cells with the figures."""

    col: Column
    model: str
    dtype: str
    cell: CellRecord  # the headline cell of the newest run with the row
    metrics: Mapping[str, MetricRecord]  # where its figures come from
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    spreads: dict[str, Spread] = field(default_factory=dict)
    consistency: Consistency | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        opts = options_text(self.settings)
        return f"{self.col.runtime} {self.dtype}" + (f" ({opts})" if opts else "")

    def figure(self, metric: str) -> Figure:
        m = as_dict(self.metrics.get(metric))
        samples = tuple(float(s) for s in m.get("samples") or [])
        value = m.get("value")
        reason = str(m.get("reason") or ("not recorded" if not m else ""))
        return Figure(metric, value, str(m.get("unit") or ""), samples, reason)

    def number(self, metric: str) -> float | None:
        return self.figure(metric).number

    def freeze(self) -> Candidate:
        return Candidate(
            self.model, self.col.runtime, self.dtype, dict(self.settings), str(self.cell["key"]),
            str(self.col.run.get("run_id")), {m: self.figure(m) for m in _FIGURES},
            tuple(self.failures), tuple(self.notes), self.consistency,
        )  # fmt: skip


def _headline(cells: Sequence[CellRecord], model: str, params: Any) -> CellRecord:
    """The cell at the model's headline params (the model's own fixture first), else the
    first at the candidate's own most common params."""
    at = [c for c in cells if c["params"] == params] or [
        c for c in cells if c["params"] == common_params(cells)
    ]
    own = [c for c in at if as_dict(c.get("fixture")).get("name") == model]
    return (own or at)[0]


def _rescue(cell: CellRecord) -> tuple[dict[str, Any], Mapping[str, MetricRecord], str] | None:
    """A failed cell a control run rescued: (control options, the control's figures, note)."""
    for key in ("control", "numerics_control"):
        ctl = as_dict(cell.get(key))
        ran = as_dict(ctl.get("outcome")).get("status") == "ok"
        if ctl and ran and ctl.get("verdict") != "FAIL":
            opts = dict(as_dict(ctl.get("options")))
            note = (f"fails with the row's settings ({cell['outcome']['status']}); runs with "
                    f"{options_text(opts)}: figures from that one control run")  # fmt: skip
            return opts, as_dict(ctl.get("metrics")), note
    return None


def _draft(col: Column, model: str, dtype: str, cell: CellRecord) -> _Draft:
    settings = dict(as_dict(col.info.get("options")))
    shown = picked(col, cell)
    pick = col.picks.get(str(cell["key"]))
    d = _Draft(col, model, dtype, cell, shown["metrics"], settings)
    if cell.get("numerics_mark"):
        d.notes.append(f"computed below the requested precision: {cell.get('numerics_mark')}")
    if pick is not None:
        d.notes.append(pick.why)
    elif cell.get("contended"):
        busy = as_dict(cell["metrics"].get(M.HOST_BUSY_CORES)).get("value")
        cores = f"{busy:.2f} cores" if isinstance(busy, int | float) else "the CPU"
        d.notes.append(f"measured while the host was busy ({cores} outside the cell): "
                       "speed figures may understate it")  # fmt: skip
    ok = cell["outcome"]["status"] == "ok" and cell["verdict"] != "FAIL"
    rescued = None if ok else _rescue(cell)
    if rescued is not None:
        d.settings |= rescued[0]
        d.metrics = rescued[1]
        d.notes.append(rescued[2])
    elif not ok:
        out = cell["outcome"]
        why = cell.get("verdict_reason") or out.get("message") or ""
        d.failures.append(Failure("runs", f"ends {out['status']} (verdict {cell['verdict']}): "
                                  f"{why}".rstrip(": "), out["status"]))  # fmt: skip
    return d


def _groups(shown: Sequence[Column]) -> dict[str, tuple[str, list[tuple[Column, CellRecord]]]]:
    """model -> (kind, its plain generation cells expected to run, per shown column)."""
    out: dict[str, tuple[str, list[tuple[Column, CellRecord]]]] = {}
    for col in shown:
        for cell in normal_cells(c for _, c in col.cells):
            model, kind = model_of(cell)
            out.setdefault(model, (kind, []))[1].append((col, cell))
    order = {k: i for i, k in enumerate(KINDS)}
    return dict(sorted(out.items(), key=lambda kv: order[kv[1][0]]))


def _drafts(model: str, found: list[tuple[Column, CellRecord]], params: Any) -> list[_Draft]:
    by: dict[tuple[int, str], list[CellRecord]] = {}
    cols: dict[int, Column] = {}
    for col, cell in found:
        dtype = str(as_dict(cell.get("fixture")).get("dtype") or "as stored")
        by.setdefault((id(col), dtype), []).append(cell)
        cols[id(col)] = col
    return [_draft(cols[c], model, dt, _headline(cells, model, params))
            for (c, dt), cells in by.items()]  # fmt: skip


# --------------------------------------------------------------------------- hard limits


def _num(v: float) -> str:
    if v == 0 or abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if abs(v) >= 0.01 else f"{v:.2g}"


def show(spec: LimitSpec, value: float) -> str:
    """A figure in its limit's unit: ``508 MiB``, ``0.0812 nats``."""
    return f"{_num(value * spec.scale)} {spec.unit}"


def _cells_at(d: _Draft, at: str) -> list[CellRecord]:
    cells = [c for _, c in d.col.cells if matches(at, c)]
    same = [c for c in cells if as_dict(c.get("fixture")).get("dtype") == d.dtype]
    return same or cells


def _check_limit(d: _Draft, spec: LimitSpec, c: Constraints, applies: bool) -> None:
    lim = c.limit(spec.key)
    if lim is None or not applies:
        return
    if lim.at is None:
        sources: list[tuple[str, Mapping[str, MetricRecord]]] = [("", d.metrics)]
    else:
        sources = [(f" at {fixture_label(x)} {x['key'].rsplit('|', 1)[-1]}",
                    picked(d.col, x)["metrics"]) for x in _cells_at(d, lim.at)]  # fmt: skip
        if not sources:
            d.failures.append(Failure(spec.key, f"no {spec.label} at {lim.at} for this row"))
    for where, metrics in sources:
        m = as_dict(metrics.get(spec.metric))
        value = m.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool):
            why = m.get("reason") or "not recorded"
            d.failures.append(Failure(spec.key, f"{spec.label}{where} not measured ({why})"))
        elif not spec.passes(float(value), lim):
            sign = ">" if spec.bound == "max" else "<"
            text = f"{spec.label}{where} {show(spec, float(value))} {sign} {spec.key} " + (
                f"{_num(lim.value)} {spec.unit}"
            )
            d.failures.append(Failure(spec.key, text, float(value)))


def _check_license(d: _Draft, c: Constraints) -> None:
    if c.licenses is None:
        return
    fig = d.figure(M.LICENSE)
    if not isinstance(fig.value, str):
        d.failures.append(Failure("licenses", f"licence not recorded ({fig.reason})"))
        return
    if license_allowed(fig.value, c.licenses):
        return
    unknown = [alt for alt in license_alternatives(fig.value) if None in alt]
    hint = " (names no SPDX id rtmatrix knows)" if unknown else ""
    text = f"licence {fig.value!r}{hint} is not among the allowed: {', '.join(c.licenses)}"
    d.failures.append(Failure("licenses", text, fig.value))


def classes_of(cell: CellRecord, headline: Any) -> set[str]:
    """The fixture classes a cell belongs to (``must_behave``)."""
    fx = as_dict(cell.get("fixture"))
    variant = fx.get("variant")
    out: set[str] = set()
    if variant in VARIANTS:
        out |= {str(variant), VARIANTS[str(variant)].kind}
    if cell.get("expect") == "error":
        out.add("failing")
        if "out-of-memory" in (cell.get("expect_kind") or []):
            out.add("memory")
        return out
    scenario = scenario_of(cell)
    if scenario is not None:
        return out | {"lifecycle", str(scenario)}
    if not variant and cell["params"] != headline:
        out.add("boundary")
    return out


def _check_behaviour(
    d: _Draft, c: Constraints, headlines: Mapping[str, Any], unmet: dict[str, set[str]]
) -> None:
    """A FAIL in a required class excludes the candidate; other failing fixtures that FAIL are
    gathered in ``unmet`` (fixture -> rows) for the model's notes."""
    required = set(c.must_behave)
    for _, cell in d.col.cells:
        if cell["verdict"] != "FAIL":
            continue
        classes = classes_of(cell, headlines.get(model_of(cell)[0]))
        hit = sorted(classes & required)
        out = cell["outcome"]
        what = (f"{fixture_label(cell)} {_tag(cell)} ends {out['status']} (verdict FAIL): "
                f"{out.get('message', '')}")  # fmt: skip
        if hit:
            d.failures.append(Failure("must_behave", f"{what} [{', '.join(hit)}]"))
        elif cell.get("expect") == "error":
            unmet.setdefault(f"{fixture_label(cell)} {_tag(cell)}", set()).add(d.col.runtime)


def _applicable(drafts: Sequence[_Draft], spec: LimitSpec, c: Constraints) -> bool:
    """A limit applies to a model when some candidate of it has the figure (where it is read)."""
    lim = c.limit(spec.key)
    if lim is None:
        return False
    for d in drafts:
        cells = [d.metrics] if lim.at is None else [x["metrics"] for x in _cells_at(d, lim.at)]
        if any(isinstance(as_dict(m.get(spec.metric)).get("value"), int | float) for m in cells):
            return True
    return False


def _judge_limits(
    drafts: Sequence[_Draft], c: Constraints, headlines: Mapping[str, Any]
) -> list[str]:
    """Every hard limit on every candidate; the model's notes (limits that do not apply)."""
    notes = []
    for spec in LIMITS:
        applies = _applicable(drafts, spec, c)
        if c.limit(spec.key) is not None and not applies:
            notes.append(f"{spec.key} does not apply: no candidate has a {spec.label} figure")
        for d in drafts:
            if not any(f.constraint == "runs" for f in d.failures):
                _check_limit(d, spec, c, applies)
    unmet: dict[str, set[str]] = {}
    for d in drafts:
        _check_license(d, c)
        _check_behaviour(d, c, headlines, unmet)
    for what, rows in unmet.items():
        notes.append(f"{what} ends FAIL on {', '.join(sorted(rows))}: not a hard limit, as "
                     "must_behave does not require its class")  # fmt: skip
    return notes


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Judgement:
    """How two candidates compare on one criterion: < 0 the first is better, 0 tied."""

    sign: int
    text: str
    untested: bool = False


def _entry(d: _Draft, metric: str, value: float) -> ranking.Entry:
    fig = d.figure(metric)
    return ranking.Entry(d.col, value, fig.samples, d.spreads.get(metric))


def compare(a: _Draft, b: _Draft, criterion: str, c: Constraints) -> Judgement:
    """One criterion: the report's noise test for measured figures; KLD by ``negligible_kld``."""
    metric = CRITERIA[criterion][0]
    spec = _BY_METRIC[metric]
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
    eb = _entry(best, metric, max(va, vb) if higher else min(va, vb))
    eo = _entry(other, metric, min(va, vb) if higher else max(va, vb))
    if _single(eb) and _single(eo):  # no noise estimate: rtmatrix diff's threshold decides
        threshold = registry.threshold_of(metric)
        if not Check(metric, threshold).exceeded(eo.median / eb.median - 1.0):
            return Judgement(0, f"{said}: single values within rtmatrix diff's "
                             f"{threshold * 100:g}% threshold")  # fmt: skip
        return Judgement(sign, f"{said} (single values, beyond the {threshold * 100:g}% "
                         "threshold)")  # fmt: skip
    j = ranking.judge(eb, eo)
    if j.tie:
        return Judgement(0, f"{said}: within noise ({j.test})")
    if j.untested:
        return Judgement(sign, f"{said} (too few samples to test: ordered by value)", True)
    return Judgement(sign, f"{said} ({j.test})")


def _single(e: ranking.Entry) -> bool:
    """A figure measured once, without run medians enough for the noise test."""
    runs = len(e.spread.run_medians) if e.spread else 0
    return len(e.samples) <= 1 and runs < ranking.MIN_RUNS


def _lexical(a: _Draft, b: _Draft, c: Constraints) -> tuple[Judgement, str]:
    """The first priority that tells two candidates apart, or a tie on all of them."""
    for criterion in c.priorities:
        j = compare(a, b, criterion, c)
        if j.sign:
            return j, criterion
    return Judgement(0, "no priority tells them apart"), ""


def dominates(a: _Draft, b: _Draft, c: Constraints, axes: Sequence[str]) -> bool:
    """At least as good on every Pareto axis, and better on one (noise ties are not better)."""
    signs = [compare(a, b, axis, c).sign for axis in axes]
    return all(s <= 0 for s in signs) and any(s < 0 for s in signs)


def pareto_layers(drafts: Sequence[_Draft], c: Constraints) -> dict[int, int]:
    """id(draft) -> its Pareto layer (1: the front), over the axes some candidate has."""
    axes = [a for a in PARETO if any(d.number(CRITERIA[a][0]) is not None for d in drafts)]
    left, out, layer = list(drafts), {}, 1
    while left:
        front = [d for d in left if not any(dominates(o, d, c, axes) for o in left if o is not d)]
        for d in front or left:
            out[id(d)] = layer
        left = [d for d in left if id(d) not in out]
        layer += 1
    return out


# --------------------------------------------------------------------------- consistency


def _explanation(
    prev: tuple[Column, CellRecord], cur: tuple[Column, CellRecord], stack: Sequence[str]
) -> str:
    """What recorded change explains a step: version, row options, stack, machine."""
    (pc, pcell), (cc, ccell) = prev, cur
    out = []
    pv = pcell["outcome"].get("runtime_version") or pc.version
    cv = ccell["outcome"].get("runtime_version") or cc.version
    if pv != cv:
        out.append(f"{cc.runtime} {pv} → {cv}")
    po, co = as_dict(pc.info.get("options")), as_dict(cc.info.get("options"))
    if po != co:
        out.append(f"row options {options_text(po) or 'none'} → {options_text(co) or 'none'}")
    out += [f"stack {s}" for s in stack[:3]]
    out += [f"machine {m}" for m in machine_differences(pc.run, cc.run)]
    return "; ".join(out)


def regressions(series: Sequence[tuple[Column, CellRecord]]) -> list[Regression]:
    """Each step of one cell from the run before that ``rtmatrix diff`` marks ``-`` or ``!``
    (``compare_cells`` with the default checks, as the history view marks its steps)."""
    out, checks = [], default_checks()
    for prev, cur in itertools.pairwise(series):
        machine = machine_differences(prev[0].run, cur[0].run)
        diff = compare_cells(prev[1], cur[1], checks, machine=machine)
        if diff.mark not in (Mark.WORSE, Mark.NEW_FAILURE):
            continue
        moved = [f"{m.name} {m.mark} {m.note}".strip() for m in diff.metrics
                 if m.mark is Mark.WORSE and m.gate]  # fmt: skip
        text = "; ".join([*diff.reasons, *moved]) or str(diff.mark)
        because = _explanation(prev, cur, diff.stack)
        out.append(Regression(str(cur[0].run.get("run_id")), str(diff.mark), text, because))
    return out


def _series(d: _Draft) -> list[tuple[Column, CellRecord]]:
    key = d.cell["key"]
    found = [(col, c) for col in (d.col.series or [d.col]) for _, c in col.cells if c["key"] == key]
    return found


def _attach_history(drafts: Sequence[_Draft], c: Constraints, places: _Places) -> None:
    """Spreads (for the noise test) and consistency of every candidate."""
    tables: dict[int, Any] = {}
    for d in drafts:
        series = _series(d)
        if id(d.col) not in tables:
            tables[id(d.col)] = history.frame(d.col.series or [d.col])
        table = tables[id(d.col)]
        shown = picked(d.col, d.cell)
        for metric in history.TRACKED:
            s = history.spread(table, shown, metric)
            if s is not None:
                d.spreads[str(metric)] = s
        tg = d.spreads.get(M.TG_TPS)
        cv = tg.between_cv if tg is not None else None
        where = tuple(places.place(col.run, d) for col, _ in series)
        max_cv = c.max_tg_cv_pct / 100.0
        d.consistency = Consistency(len(series), cv, where, tuple(regressions(series)), max_cv)


class _Places:
    """Each run's own selection (no history), cached: where a candidate stood in each run."""

    def __init__(self, constraints: Constraints) -> None:
        self.constraints = replace(constraints, consistency_rule=False)
        self.done: dict[str, Selection] = {}

    def place(self, run: RunRecord, d: _Draft) -> int | None:
        run_id = str(run.get("run_id"))
        if run_id not in self.done:
            self.done[run_id] = _select([run], self.constraints, None)
        for m in self.done[run_id].models:
            if m.model == d.model:
                return next((x.place for x in m.ranked if x.label == d.label), None)
        return None


def _tier(d: _Draft, rule: bool) -> int:
    if not rule or d.consistency is None:
        return 0
    return {True: 0, None: 1, False: 2}[d.consistency.consistent]


# --------------------------------------------------------------------------- ordering


def _order(drafts: list[_Draft], c: Constraints) -> list[tuple[_Draft, int, int]]:
    """(draft, tier, Pareto layer) in their final order."""
    rule = c.consistency_rule and any(
        d.consistency is not None and d.consistency.runs > 1 for d in drafts
    )
    layers = pareto_layers(drafts, c)

    def cmp(a: _Draft, b: _Draft) -> int:
        ka, kb = (_tier(a, rule), layers[id(a)]), (_tier(b, rule), layers[id(b)])
        if ka != kb:
            return -1 if ka < kb else 1
        return _lexical(a, b, c)[0].sign

    ordered = sorted(sorted(drafts, key=lambda d: d.label), key=functools.cmp_to_key(cmp))
    return [(d, _tier(d, rule), layers[id(d)]) for d in ordered]


def _figures_text(d: _Draft) -> str:
    parts = []
    for criterion in PARETO:
        metric = CRITERIA[criterion][0]
        spec = _BY_METRIC[metric]
        v = d.number(metric)
        if v is not None:
            parts.append(f"{spec.label} {show(spec, v)}")
    return ", ".join(parts)


def _layer_reason(
    d: _Draft, layer: int, ordered: Sequence[tuple[_Draft, int, int]], c: Constraints
) -> str:
    if layer == 1:
        return ("on the Pareto front of quality × speed × memory (no other candidate is as good "
                "on all three and better on one)")  # fmt: skip
    same = [x for x, _, _ in ordered]
    axes = [a for a in PARETO if any(x.number(CRITERIA[a][0]) is not None for x in same)]
    above = [x for x, _, lay in ordered if lay == layer - 1]
    by = next((o for o in above if dominates(o, d, c, axes)), None)
    who = f": {by.label} is as good on quality, speed and memory and better on one" if by else ""
    return f"in Pareto layer {layer}{who}"


def _rank(drafts: list[_Draft], c: Constraints) -> list[Candidate]:
    """Places, ties and the reasons of the eligible candidates, best first."""
    ordered = _order(drafts, c)
    out: list[Candidate] = []
    place = 0
    for i, (d, tier, layer) in enumerate(ordered):
        prev = ordered[i - 1] if i else None
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        tied_prev = prev is not None and prev[1:] == (tier, layer) and not _lexical(
            prev[0], d, c)[0].sign  # fmt: skip
        place = place if tied_prev else i + 1
        reasons = [_figures_text(d), _layer_reason(d, layer, ordered, c)]
        reasons += _versus(d, (tier, layer), prev, nxt, c)
        reasons += _consistency_reason(d, tier, c)
        reasons += d.notes
        tied = tuple(x.label for x, t, lay in ordered if x is not d and (t, lay) == (tier, layer)
                     and not _lexical(x, d, c)[0].sign)  # fmt: skip
        cand = d.freeze()
        out.append(replace(cand, place=place, tied_with=tied, layer=layer,
                           reasons=tuple(r for r in reasons if r)))  # fmt: skip
    return out


def _versus(
    d: _Draft,
    key: tuple[int, int],
    prev: tuple[_Draft, int, int] | None,
    nxt: tuple[_Draft, int, int] | None,
    c: Constraints,
) -> list[str]:
    out = []
    if nxt is not None and nxt[1:] == key:
        j, criterion = _lexical(d, nxt[0], c)
        if j.sign:
            out.append(f"ahead of {nxt[0].label} on {criterion}: {j.text}")
        else:
            out.append(f"tied with {nxt[0].label}: within noise on every priority")
    if prev is not None and prev[1:] == key and not _lexical(prev[0], d, c)[0].sign:
        out.append(f"tied with {prev[0].label}: within noise on every priority")
    return out


def _consistency_reason(d: _Draft, tier: int, c: Constraints) -> list[str]:
    cons = d.consistency
    if cons is None or (cons.runs < 2 and tier == 0):
        return []
    text = cons.text()
    if tier == 2:
        return [f"ranked below the consistent candidates, {text} — the rule: {RULE}"]
    if tier == 1:
        return [f"ranked below the candidates with a consistent history: {text}"]
    return [f"consistent {text}"]


# --------------------------------------------------------------------------- select


def _check_at(runs: Sequence[RunRecord], c: Constraints) -> None:
    """A limit's ``at`` that names no cell of any run is a bad constraint."""
    cells = [cell for run in runs for cell in run["cells"]]
    for spec in LIMITS:
        lim = c.limit(spec.key)
        if lim is None or lim.at is None or any(matches(lim.at, x) for x in cells):
            continue
        names = sorted({f"{as_dict(x.get('fixture')).get('name')}|{_tag(x)}" for x in cells})
        raise SelectionError(spec.key, lim.at, "`at` matches no cell of the runs; valid: "
                             + ", ".join(names))  # fmt: skip


def _select(runs: Sequence[RunRecord], c: Constraints, places: _Places | None) -> Selection:
    ordered = history.by_time(runs)
    shown = history.shown_columns(columns(list(ordered)))
    history.attach_picks(shown)
    groups = _groups(shown)
    headlines = {m: common_params(cell for _, cell in found) for m, (_, found) in groups.items()}
    models = []
    for model, (kind, found) in groups.items():
        drafts = _drafts(model, found, headlines[model])
        notes = _judge_limits(drafts, c, headlines)
        if places is not None:
            _attach_history(drafts, c, places)
        eligible = [d for d in drafts if not d.failures]
        ranked = tuple(_rank(eligible, c)) if eligible else ()
        excluded = tuple(d.freeze() for d in sorted(drafts, key=lambda d: d.label) if d.failures)
        newest = max((d.col for d in drafts), key=lambda col: col.run_index)
        n = max((len(_series(d)) for d in drafts), default=1)
        models.append(ModelSelection(model, kind, host_of(newest), str(newest.run["run_id"]),
                                     dict(headlines[model] or {}), ranked, excluded,
                                     tuple(notes), n))  # fmt: skip
    return Selection(c, tuple(models), tuple(str(r["run_id"]) for r in ordered))


def select(runs: Sequence[RunRecord], constraints: Constraints | None = None) -> Selection:
    """The selection verdict over one run or a history of runs (any order; the newest decides
    each candidate's figures, the others its consistency). SelectionError for a limit whose
    ``at`` names no cell."""
    c = constraints or Constraints()
    _check_at(runs, c)
    return _select(runs, c, _Places(c))


def constraints_for(runs: Iterable[RunRecord], overrides: Sequence[str] = ()) -> Constraints:
    """The newest run's matrix ``[selection]`` table (when its record keeps one) over the
    defaults, then ``KEY=VALUE`` overrides."""
    newest = history.by_time(list(runs))
    table = as_dict(as_dict(newest[-1].get("matrix")).get("selection")) if newest else {}
    return Constraints.from_table(table).with_overrides(overrides)
