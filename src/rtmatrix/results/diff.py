"""Compare two runs cell by cell, as ``asv compare`` does: ``rtmatrix diff BASE CANDIDATE``.

Cells are paired by ``key`` (runtime | fixture/dtype | parameter tag). Each pair gets one mark:

====  ==========================================================================================
``!``  new failure: the verdict got worse (PASS -> WARN/FAIL, WARN -> FAIL), or the verdict stayed
       and the outcome got worse (a clean ``error`` became a ``crash``, ``oom-killed`` or ``hang``)
``*``  fixed: the verdict, or with the same verdict the outcome, got better
``x``  not comparable: the machines differ (arch, CPU model, cores), the fixture's content hash or
       the parameters differ, a side is ``unavailable``, or a side ran ``contended`` (the host was
       busy outside the cell); the reasons say which
``-``  a checked metric got significantly worse;  ``+``  significantly better
``~``  a checked metric moved past its threshold, but within noise (the samples do not differ)
``=``  unchanged: every checked metric within its threshold
====  ==========================================================================================

Figures are judged only on cells that ended ``ok`` on both sides (a cell killed or refused on
both sides is ``=`` with that said).
A cell's mark is its verdict change if there is one, else the worst mark of its *checked*
metrics (``-`` before ``+`` before ``~`` before ``=``); every numeric metric is compared and listed
with its own mark, checked or not. Cells found on one side only are listed apart.

**Significance.** A metric counts as changed only when the ratio of the medians moves by more than
its threshold *and* the repeated samples differ (``stats.compare_samples``: Mann–Whitney U
two-sided at ``alpha`` when the sample sizes can reach it, else a bootstrap CI of the ratio of
medians at level 1 - alpha, else — fewer than 3 samples on a side — "too few samples", which is
never significant). A metric without samples (package size, peak RSS, cold start) is a single
measurement and is judged by its threshold alone. Direction: higher is better for ``*_tps``,
lower for time (``*_s``), memory and size (``*_bytes``), energy and power.

**One process per side.** ``rtmatrix run`` runs each cell in one worker process, so a run
record's samples are repetitions inside that one process: they do not see process-to-process
variation (on a busy VM larger than a 10 % threshold), and a ``-``/``+`` from them says these two
processes differ, not that the versions do. The diff says so, per cell (``processes``,
``replication``) and once for the whole diff (``notes``), without changing any mark;
``rtmatrix.results.paired`` judges K paired rounds of processes instead. A cell that pools
several processes' repetitions says how many in its ``processes`` field (default 1).

**Checks** (pytest-benchmark style, ``--fail METRIC:PCT``) set a metric's threshold and make it
*checked*: its significant regression fails ``rtmatrix gate``. Defaults (``DEFAULT_CHECKS``):
checked ``pp_tps`` and ``tg_tps`` 10 %, ``peak_rss_os_bytes`` 10 %, ``package_size_bytes`` 20 %;
compared but not checked: the runtime-counter throughputs, TTFT and TPOT 10 %
(the same calls as PP and TG), per-token p50/p90 25 %, sampled RSS 10 %, cold start 50 % (one
noisy measurement per cell), energy and power 10 %; any other numeric metric 10 %.
``--fail NAME:off`` unchecks a metric.

**JSON** (``RunDiff.to_dict()``, ``rtmatrix diff --json``; the input of the HTML upgrade view)::

    {"format": "rtmatrix-diff", "version": 1, "alpha": 0.01,
     "base": RUN, "candidate": RUN,
       # RUN = {"path", "run_id", "created_utc", "status", "matrix",
       #        "machine": {"arch", "cpu_model", "cores_logical", ...},
       #        "runtimes": {name: {"distribution", "version"}}}
     "machine_differences": ["cpu_model: 'A' -> 'B'", ...],
     "runtime_versions": {name: {"distribution", "base", "candidate"}},
     "checks": [{"metric", "threshold", "gate", "direction"}],
     "counts": {"!": n, "*": n, "x": n, "-": n, "+": n, "~": n, "=": n},
     "notes": [str],   # e.g. that the samples come from one process per side
     "cells": [{"key", "runtime", "mark", "reasons": [str],
                "processes": {"base": n, "candidate": n}, "replication": str | null,
                "base": {"verdict", "status", "message"}, "candidate": {...},
                "metrics": [{"name", "unit", "mark", "base", "candidate", "change",
                             "direction", "threshold", "gate", "test", "p_value", "ci",
                             "n_base", "n_candidate", "note", "missing_in"}]}],
     "only_base": [{"key", "verdict", "status"}], "only_candidate": [...]}

``change`` is candidate / base - 1 of the values (medians); ``test`` is ``mann-whitney``,
``bootstrap``, ``threshold-only``, ``too-few-samples`` or null (within the threshold: no test
needed); ``ci`` is the bootstrap CI of the ratio, or null.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from rtmatrix.metrics import registry
from rtmatrix.metrics.registry import FALLBACK_THRESHOLD as FALLBACK_THRESHOLD
from rtmatrix.metrics.registry import Direction as Direction
from rtmatrix.metrics.registry import direction_of as direction_of
from rtmatrix.outcome import Status, Verdict
from rtmatrix.results.changes import stack_differences
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from rtmatrix.results.stats import Method, SampleTest, compare_samples

DEFAULT_ALPHA = 0.01
ONE_PROCESS = "within-process repetitions only; between-process variation not seen"
MACHINE_FIELDS = ("arch", "cpu_model", "cores_logical", "cores_physical", "cpu_affinity")


class Mark(StrEnum):
    NEW_FAILURE = "!"
    FIXED = "*"
    NOT_COMPARABLE = "x"
    WORSE = "-"
    BETTER = "+"
    NOISE = "~"
    SAME = "="


MARK_ORDER = tuple(Mark)  # the order of the counts and of the text output
SIDES = ("base", "candidate")


@dataclass(frozen=True)
class Check:
    """A metric's threshold (relative change, 0.05 = 5 %) and whether its regression fails the
    gate (pytest-benchmark's ``PercentageRegressionCheck``)."""

    metric: str
    threshold: float
    gate: bool = True

    def exceeded(self, change: float) -> bool:
        return abs(change) > self.threshold

    def display(self) -> str:
        return f"{self.metric}:{self.threshold * 100:g}%" + ("" if self.gate else " (not checked)")


class CheckError(ValueError):
    """A ``--fail`` spec that cannot be used; the message lists the valid metric names."""


# name -> (direction, default threshold, checked by the gate by default): the compared entries
# of the metric registry (rtmatrix.metrics.registry), in its order
KNOWN_METRICS: dict[str, tuple[Direction, float, bool]] = registry.compared()
_VERDICT_RANK = {Verdict.PASS: 0, Verdict.WARN: 1, Verdict.FAIL: 2}
# with the same verdict, how bad the outcome is: a clean error beats a crash
_STATUS_SEVERITY = {
    Status.OK: 0,
    Status.FALLBACK: 1,
    Status.ERROR: 2,
    Status.WRONG_OUTPUT: 3,
    Status.CRASH: 3,
    Status.OOM_KILLED: 3,
    Status.HANG: 3,
}
_WORST = 3


def default_checks() -> dict[str, Check]:
    return {name: Check(name, thr, gate) for name, (_, thr, gate) in KNOWN_METRICS.items()}


def _unknown_metric(name: str, valid: Collection[str]) -> str:
    close = [v for v in sorted(valid) if v.startswith(name)] or difflib.get_close_matches(
        name, sorted(valid), n=3
    )
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown metric {name!r}{hint}"


def parse_check(spec: str, valid: Collection[str]) -> Check:
    """``NAME:PCT%`` (e.g. ``tg_tps:5%``) or ``NAME:off``; raises CheckError."""
    name, sep, value = spec.partition(":")
    name, value = name.strip(), value.strip()
    where = f"--fail {spec!r}"
    if not sep or not name or not value:
        msg = f"{where}: expected METRIC:PERCENT, e.g. tg_tps:5%"
        raise CheckError(msg)
    if name not in valid:
        msg = f"{where}: {_unknown_metric(name, valid)}"
        raise CheckError(msg)
    if direction_of(name) is None:
        msg = f"{where}: {name!r} has no known direction (better when higher or lower?)"
        raise CheckError(msg)
    if value.lower() == "off":
        thr = KNOWN_METRICS.get(name, (Direction.LOWER, FALLBACK_THRESHOLD, False))[1]
        return Check(name, thr, gate=False)
    try:
        pct = float(value.removesuffix("%")) if value.endswith("%") else math.nan
    except ValueError:
        pct = math.nan
    if not math.isfinite(pct) or pct < 0:
        msg = f"{where}: threshold {value!r} must be a non-negative percentage like 5% (or off)"
        raise CheckError(msg)
    return Check(name, pct / 100.0, gate=True)


def parse_checks(specs: Iterable[str], metrics: Iterable[str] = ()) -> dict[str, Check]:
    """The default checks with ``specs`` applied; all bad specs are reported in one error.
    ``metrics``: further valid names (those found in the runs)."""
    valid = set(KNOWN_METRICS) | set(metrics)
    checks = default_checks()
    errors: list[str] = []
    for spec in specs:
        try:
            check = parse_check(spec, valid)
        except CheckError as exc:
            errors.append(str(exc))
            continue
        checks[check.metric] = check
    if errors:
        names = ", ".join(sorted(n for n in valid if direction_of(n) is not None))
        msg = "\n".join([*errors, f"valid metric names: {names}"])
        raise CheckError(msg)
    return checks


def run_metric_names(*runs: RunRecord) -> set[str]:
    return {name for run in runs for cell in run.get("cells", []) for name in cell["metrics"]}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class MetricDiff:
    name: str
    unit: str
    mark: Mark
    base: float | int | str | None
    candidate: float | int | str | None
    change: float | None = None
    direction: Direction | None = None
    threshold: float | None = None
    gate: bool = False
    test: Method | None = None
    p_value: float | None = None
    ci: tuple[float, float] | None = None
    n_base: int = 0
    n_candidate: int = 0
    note: str = ""
    missing_in: str | None = None  # "base", "candidate" or "both": the side(s) without a value

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "mark": str(self.mark),
            "base": self.base,
            "candidate": self.candidate,
            "change": _finite(self.change),
            "direction": str(self.direction) if self.direction else None,
            "threshold": self.threshold,
            "gate": self.gate,
            "test": str(self.test) if self.test else None,
            "p_value": self.p_value,
            "ci": [_finite(v) for v in self.ci] if self.ci else None,
            "n_base": self.n_base,
            "n_candidate": self.n_candidate,
            "note": self.note,
            "missing_in": self.missing_in,
        }


@dataclass(frozen=True)
class Side:
    verdict: str
    status: str
    message: str
    #: the error kind of a failed cell (``outcome.error_kind``), if classified
    kind: str | None = None

    @classmethod
    def of(cls, cell: CellRecord) -> Side:
        out = cell["outcome"]
        kind = out.get("error_kind")
        return cls(cell["verdict"], out["status"], str(out.get("message", "")), kind)

    def to_dict(self) -> dict[str, Any]:
        out = {"verdict": self.verdict, "status": self.status, "message": self.message}
        return out | ({"kind": self.kind} if self.kind else {})


@dataclass(frozen=True)
class CellDiff:
    key: str
    runtime: str
    mark: Mark
    base: Side
    candidate: Side
    reasons: list[str] = field(default_factory=list)
    metrics: list[MetricDiff] = field(default_factory=list)
    processes: tuple[int, int] = (1, 1)  # worker processes behind each side's samples
    #: what differs in ``evidence.stack`` (kernels first, then backend, runtime, format)
    stack: list[str] = field(default_factory=list)

    @property
    def replication(self) -> str | None:
        """Which side's repeated samples all come from one worker process, or None (no repeated
        samples were compared, or both sides pool several processes)."""
        if not any(m.n_base > 1 or m.n_candidate > 1 for m in self.metrics):
            return None
        one = [side for side, n in zip(SIDES, self.processes, strict=True) if n <= 1]
        if not one:
            return None
        where = "one process per side" if len(one) == 2 else f"one process in the {one[0]}"
        return f"samples from {where}: {ONE_PROCESS}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "runtime": self.runtime,
            "mark": str(self.mark),
            "reasons": self.reasons,
            "stack": self.stack,
            "processes": dict(zip(SIDES, self.processes, strict=True)),
            "replication": self.replication,
            "base": self.base.to_dict(),
            "candidate": self.candidate.to_dict(),
            "metrics": [m.to_dict() for m in self.metrics],
        }


@dataclass(frozen=True)
class RunDiff:
    base: dict[str, Any]
    candidate: dict[str, Any]
    machine_differences: list[str]
    cells: list[CellDiff]
    only_base: list[dict[str, Any]]
    only_candidate: list[dict[str, Any]]
    checks: dict[str, Check]
    alpha: float

    def counts(self) -> dict[str, int]:
        return {str(m): sum(c.mark is m for c in self.cells) for m in MARK_ORDER}

    @property
    def comparable(self) -> list[CellDiff]:
        return [c for c in self.cells if c.mark is not Mark.NOT_COMPARABLE]

    def notes(self) -> list[str]:
        """What the reader must know to weigh the marks (the pseudo-replication warning)."""
        single = [c for c in self.cells if c.replication]
        if not single:
            return []
        kinds = {c.replication for c in single}
        what = single[0].replication if len(kinds) == 1 else None
        what = what or f"samples from one process: {ONE_PROCESS}"
        return [
            f"{len(single)} of {len(self.cells)} paired cell(s): {what}, so a significant change"
            " says these two processes differ, not that the versions do"
        ]

    def runtime_versions(self) -> dict[str, dict[str, Any]]:
        b, c = self.base["runtimes"], self.candidate["runtimes"]
        return {
            name: {
                "distribution": (c.get(name) or b.get(name) or {}).get("distribution"),
                "base": (b.get(name) or {}).get("version"),
                "candidate": (c.get(name) or {}).get("version"),
            }
            for name in sorted(set(b) | set(c))
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "rtmatrix-diff",
            "version": 1,
            "alpha": self.alpha,
            "base": self.base,
            "candidate": self.candidate,
            "machine_differences": self.machine_differences,
            "runtime_versions": self.runtime_versions(),
            "checks": [
                {
                    "metric": c.metric,
                    "threshold": c.threshold,
                    "gate": c.gate,
                    "direction": str(direction_of(c.metric)),
                }
                for c in self.checks.values()
            ],
            "counts": self.counts(),
            "notes": self.notes(),
            "cells": [c.to_dict() for c in self.cells],
            "only_base": self.only_base,
            "only_candidate": self.only_candidate,
        }


def _finite(x: float | None) -> float | None:
    """JSON has no infinity: a change from 0 is written as null."""
    return x if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------- metrics


#: a side without the metric, read as the record of one with no keys
_NO_METRIC: Mapping[str, Any] = {}


def _samples(metric: MetricRecord) -> list[float] | None:
    s = metric.get("samples")
    return [float(v) for v in s] if isinstance(s, list) and s else None


def _change(base: float, cand: float) -> float:
    if base == cand:
        return 0.0
    if base == 0:
        return math.copysign(math.inf, cand)
    return (cand - base) / base


def _noise_note(st: SampleTest, nb: int, nc: int) -> str:
    if st.method is Method.TOO_FEW:
        return f"too few samples ({nb} vs {nc}) to tell from noise"
    if st.method is Method.MANN_WHITNEY:
        return f"within noise (Mann–Whitney p={st.p_value:.3g})"
    lo, hi = st.ci or (math.nan, math.nan)
    return f"within noise (bootstrap CI of the ratio {lo:.3f}..{hi:.3f} holds 1)"


def _significance_note(st: SampleTest) -> str:
    if st.method is Method.MANN_WHITNEY:
        return f"Mann–Whitney p={st.p_value:.3g}"
    if st.method is Method.BOOTSTRAP and st.ci:
        return f"bootstrap CI of the ratio {st.ci[0]:.3f}..{st.ci[1]:.3f}"
    return "single values: threshold only"


def _missing_side(b: MetricRecord | None, c: MetricRecord | None) -> tuple[str, str] | None:
    """(the side without a value, why), or None when both sides have one."""
    if b is None or c is None:
        return ("base", "only in the candidate") if b is None else ("candidate", "only in the base")
    if b.get("value") is None and c.get("value") is None:
        return ("both", "unavailable on both sides")
    for side, m in (("base", b), ("candidate", c)):
        if m.get("value") is None:
            return (side, f"unavailable in the {side}: {m.get('reason', '')}".rstrip(": "))
    return None


def compare_metric(
    name: str,
    b: MetricRecord | None,
    c: MetricRecord | None,
    check: Check | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> MetricDiff:
    check = check or Check(name, FALLBACK_THRESHOLD, gate=False)
    unit = str((c or b or _NO_METRIC).get("unit", ""))
    bv, cv = (b or _NO_METRIC).get("value"), (c or _NO_METRIC).get("value")
    missing = _missing_side(b, c)
    if missing is not None:
        side, why = missing
        return MetricDiff(
            name,
            unit,
            Mark.SAME if side == "both" else Mark.NOT_COMPARABLE,
            bv,
            cv,
            direction=direction_of(name),
            threshold=check.threshold,
            gate=check.gate,
            note=why,
            missing_in=side,
        )
    assert b is not None and c is not None  # _missing_side says so
    if isinstance(bv, str) or isinstance(cv, str):
        same = bv == cv
        note = "" if same else f"changed: {bv!r} -> {cv!r}"
        return MetricDiff(name, unit, Mark.SAME if same else Mark.NOISE, bv, cv, note=note)
    return _compare_numbers(name, unit, b, c, check, alpha)


def _number(metric: MetricRecord) -> float:
    """The value of a metric :func:`compare_metric` found on both sides and not text."""
    value = metric["value"]
    assert value is not None and not isinstance(value, str)  # compare_metric says so
    return float(value)


def _compare_numbers(
    name: str, unit: str, b: MetricRecord, c: MetricRecord, check: Check, alpha: float
) -> MetricDiff:
    bv, cv = _number(b), _number(c)
    bs, cs = _samples(b), _samples(c)
    change = _change(bv, cv)
    direction = direction_of(name)
    base = MetricDiff(
        name,
        unit,
        Mark.SAME,
        b["value"],
        c["value"],
        change=change,
        direction=direction,
        threshold=check.threshold,
        gate=check.gate,
        n_base=len(bs or []),
        n_candidate=len(cs or []),
    )
    if not check.exceeded(change):
        return base
    st = compare_samples(bs, cs, alpha)
    tested = replace(base, test=st.method, p_value=st.p_value, ci=st.ci)
    if not st.different:
        note = _noise_note(st, base.n_base, base.n_candidate)
        return replace(tested, mark=Mark.NOISE, note=note)
    if direction is None:
        note = "changed, direction unknown: " + _significance_note(st)
        return replace(tested, mark=Mark.NOISE, note=note)
    better = (change > 0) == (direction is Direction.HIGHER)
    mark = Mark.BETTER if better else Mark.WORSE
    return replace(tested, mark=mark, note=_significance_note(st))


# --------------------------------------------------------------------------- cells


def machine_differences(base: RunRecord, cand: RunRecord) -> list[str]:
    return _differences(base.get("machine", {}), cand.get("machine", {}))


def _differences(mb: Mapping[str, Any], mc: Mapping[str, Any]) -> list[str]:
    return [
        f"{k}: {mb[k]!r} -> {mc[k]!r}"
        for k in MACHINE_FIELDS
        if k in mb and k in mc and mb[k] != mc[k]
    ]


def _host_machine(cell: CellRecord) -> dict[str, Any] | None:
    """The machine a cell ran on when it is not its run's (a fleet host, a merged part)."""
    machine = (cell.get("host") or {}).get("machine")
    return machine if isinstance(machine, dict) and machine else None


def cell_machine_differences(
    b: CellRecord, c: CellRecord, base: RunRecord, cand: RunRecord
) -> list[str]:
    """Machine differences of one pair: each cell's own host where it has one, else its run's."""
    if _host_machine(b) is None and _host_machine(c) is None:
        return machine_differences(base, cand)
    mb = _host_machine(b) or base.get("machine", {})
    mc = _host_machine(c) or cand.get("machine", {})
    return _differences(mb, mc)


def _incomparable(b: CellRecord, c: CellRecord) -> list[str]:
    reasons = []
    hb, hc = b["fixture"].get("sha256"), c["fixture"].get("sha256")
    if hb and hc and hb != hc:
        reasons.append(f"fixture content differs (sha256 {hb[:12]} -> {hc[:12]})")
    pb, pc = b["params"], c["params"]
    names = sorted(set(pb) | set(pc))
    changed = [f"{k} {pb.get(k)} -> {pc.get(k)}" for k in names if pb.get(k) != pc.get(k)]
    if changed:
        reasons.append("params differ: " + ", ".join(changed))
    for side, cell in (("base", b), ("candidate", c)):
        if Verdict.UNAVAILABLE in (cell["verdict"], cell["outcome"]["status"]):
            reasons.append(f"unavailable in the {side}: {cell['outcome'].get('message', '')}")
        if cell["outcome"]["status"] == Status.HOST_LOST:  # nothing learnt about the runtime
            reasons.append(f"host lost in the {side}: {cell['outcome'].get('message', '')}")
    return reasons


def _kind_change(b: Side, c: Side) -> tuple[Mark, str] | None:
    """The same verdict and outcome, but the runtime now fails for another reason: ``!`` unless
    the candidate still PASSes (both kinds expected), which ``compare_cells`` notes instead."""
    if not (b.kind and c.kind) or b.kind == c.kind or c.verdict == Verdict.PASS:
        return None
    return Mark.NEW_FAILURE, f"error kind {b.kind} -> {c.kind} (verdict {c.verdict} on both sides)"


def _outcome_change(b: Side, c: Side) -> tuple[Mark, str] | None:
    """``!`` or ``*`` with the reason, or None when verdict and outcome severity are unchanged."""
    rb, rc = _VERDICT_RANK[Verdict(b.verdict)], _VERDICT_RANK[Verdict(c.verdict)]
    what = f"verdict {b.verdict} -> {c.verdict} (outcome {b.status} -> {c.status})"
    if rb == rc:
        sb = _STATUS_SEVERITY.get(Status(b.status), _WORST)
        sc = _STATUS_SEVERITY.get(Status(c.status), _WORST)
        if sb == sc:
            return _kind_change(b, c)
        rb, rc = sb, sc
        what = f"outcome {b.status} -> {c.status} (verdict {b.verdict} on both sides)"
    return (Mark.NEW_FAILURE, what) if rc > rb else (Mark.FIXED, what)


def outcome_mark(b: CellRecord, c: CellRecord) -> tuple[Mark, list[str]]:
    """How two records of one cell compare on their outcome alone, as :func:`compare_cells`
    judges it before any figure: ``x`` (fixture, params or a side unavailable), ``!``, ``*``,
    else ``=``; with the reasons. (``rtmatrix compare`` judges figures by paired rounds.)"""
    reasons = _incomparable(b, c)
    if reasons:
        return Mark.NOT_COMPARABLE, reasons
    change = _outcome_change(Side.of(b), Side.of(c))
    return (change[0], [change[1]]) if change else (Mark.SAME, [])


def outcome_rank(cell: CellRecord) -> tuple[int, int]:
    """(verdict rank, outcome severity) of a record: higher is worse; unavailable is lowest."""
    verdict = Verdict(cell["verdict"])
    if verdict is Verdict.UNAVAILABLE:
        return (-1, -1)
    severity = _STATUS_SEVERITY.get(Status(cell["outcome"]["status"]), _WORST)
    return (_VERDICT_RANK[verdict], severity)


def _worst(metrics: Sequence[MetricDiff]) -> Mark:
    marks = {m.mark for m in metrics if m.gate}
    for mark in (Mark.WORSE, Mark.BETTER, Mark.NOISE):
        if mark in marks:
            return mark
    return Mark.SAME


def _metric_order(names: Iterable[str]) -> list[str]:
    known = list(KNOWN_METRICS)
    return sorted(names, key=lambda n: (known.index(n) if n in known else len(known), n))


def _one_process(m: MetricDiff, processes: tuple[int, int]) -> MetricDiff:
    """A significant change found in one process's repetitions says so where it is reported."""
    tested = m.test in (Method.MANN_WHITNEY, Method.BOOTSTRAP)
    if m.mark not in (Mark.WORSE, Mark.BETTER) or not tested:
        return m
    where = "one process per side" if max(processes) <= 1 else "one process on a side"
    return replace(m, note=f"{m.note}; samples from {where}")


#: worker processes a side needs before its figures are judged by process medians (the gate
#: judges performance only then)
MIN_PROCESSES = 5


def _process_medians(metrics: dict[str, MetricRecord]) -> dict[str, MetricRecord]:
    """Each metric with its per-process values as its samples (pooled by ``run --processes``)."""
    out = {}
    for name, m in metrics.items():
        pv = m.get("process_values") if isinstance(m, dict) else None
        out[name] = (m | {"samples": list(pv)}) if isinstance(pv, list) and pv else m
    return out


def sample_processes(cell: CellRecord) -> int:
    """How many worker processes a cell's samples pool: the cell's ``processes`` field, else 1
    (``rtmatrix run`` runs each cell's repetitions in one worker process)."""
    n = cell.get("processes", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def contended_reasons(b: CellRecord, c: CellRecord) -> list[str]:
    """Why a pair's figures cannot be judged: a side ran on a busy host (``contended``)."""
    out = []
    for side, cell in (("base", b), ("candidate", c)):
        if cell.get("contended"):
            busy = (cell.get("metrics", {}).get("host_busy_cores") or _NO_METRIC).get("value")
            cores = f"{busy:.2f} cores" if isinstance(busy, int | float) else "CPU"
            out.append(f"contended: {side} had {cores} busy outside the cell during its run")
    return out


def compare_cells(
    b: CellRecord,
    c: CellRecord,
    checks: dict[str, Check],
    alpha: float = DEFAULT_ALPHA,
    machine: Sequence[str] = (),
) -> CellDiff:
    """The pair's mark, with what differs in their four layers (``evidence.stack``) kept beside
    it: the first explanation a changed cell gets."""
    from dataclasses import replace

    stack = [f"{s.name}: {s.a or '—'} -> {s.b or '—'}" for s in stack_differences(b, c)]
    return replace(_compare_cells(b, c, checks, alpha, machine), stack=stack)


def _compare_cells(
    b: CellRecord,
    c: CellRecord,
    checks: dict[str, Check],
    alpha: float = DEFAULT_ALPHA,
    machine: Sequence[str] = (),
) -> CellDiff:
    sb, sc = Side.of(b), Side.of(c)
    reasons = [f"machine differs: {m}" for m in machine] + _incomparable(b, c)
    if reasons:
        return CellDiff(b["key"], b["runtime"], Mark.NOT_COMPARABLE, sb, sc, reasons)
    change = _outcome_change(sb, sc)
    if change is not None:
        return CellDiff(b["key"], b["runtime"], change[0], sb, sc, [change[1]])
    if sb.kind and sc.kind and sb.kind != sc.kind:
        why = f"error kind {sb.kind} -> {sc.kind} (both accepted: verdict {sc.verdict})"
        return CellDiff(b["key"], b["runtime"], Mark.SAME, sb, sc, [why])
    busy = contended_reasons(b, c)
    if busy:
        return CellDiff(b["key"], b["runtime"], Mark.NOT_COMPARABLE, sb, sc, busy)
    if sb.status != "ok" or sc.status != "ok":
        why = f"outcome {sb.status} -> {sc.status}: performance and memory are judged on ok cells"
        return CellDiff(b["key"], b["runtime"], Mark.SAME, sb, sc, [why])
    mb, mc = b["metrics"], c["metrics"]
    processes = (sample_processes(b), sample_processes(c))
    if min(processes) >= MIN_PROCESSES:  # between-process evidence: judge the process medians
        mb, mc = _process_medians(mb), _process_medians(mc)
    metrics = [
        compare_metric(n, mb.get(n), mc.get(n), checks.get(n), alpha)
        for n in _metric_order(set(mb) | set(mc))
    ]
    notes = [] if sb.status == sc.status else [f"outcome {sb.status} -> {sc.status}"]
    if min(processes) <= 1:
        metrics = [_one_process(m, processes) for m in metrics]
    return CellDiff(b["key"], b["runtime"], _worst(metrics), sb, sc, notes, metrics, processes)


def run_info(run: RunRecord, path: str | None = None) -> dict[str, Any]:
    machine: Mapping[str, Any] = run.get("machine", {})
    return {
        "path": path,
        "run_id": run["run_id"],
        "created_utc": run["created_utc"],
        "status": run["status"],
        "matrix": run["matrix"].get("path"),
        "machine": {k: machine[k] for k in MACHINE_FIELDS if k in machine},
        "runtimes": {
            name: {"distribution": rt.get("distribution"), "version": rt.get("version")}
            for name, rt in run["runtimes"].items()
        },
    }


def _one_side(cells: Iterable[CellRecord]) -> list[dict[str, Any]]:
    return [
        {"key": c["key"], "verdict": c["verdict"], "status": c["outcome"]["status"]} for c in cells
    ]


def diff_runs(
    base: RunRecord,
    candidate: RunRecord,
    checks: dict[str, Check] | None = None,
    alpha: float = DEFAULT_ALPHA,
    paths: tuple[str | None, str | None] = (None, None),
) -> RunDiff:
    """Pair the cells of two (loaded, validated) run records by key and classify each pair."""
    checks = default_checks() if checks is None else checks
    machine = machine_differences(base, candidate)
    by_key = {c["key"]: c for c in candidate["cells"]}
    base_keys = {c["key"] for c in base["cells"]}
    cells = [
        compare_cells(
            b,
            by_key[b["key"]],
            checks,
            alpha,
            cell_machine_differences(b, by_key[b["key"]], base, candidate),
        )
        for b in base["cells"]
        if b["key"] in by_key
    ]
    return RunDiff(
        base=run_info(base, paths[0]),
        candidate=run_info(candidate, paths[1]),
        machine_differences=machine,
        cells=cells,
        only_base=_one_side(b for b in base["cells"] if b["key"] not in by_key),
        only_candidate=_one_side(c for c in candidate["cells"] if c["key"] not in base_keys),
        checks=checks,
        alpha=alpha,
    )


# --------------------------------------------------------------------------- text


def fmt_number(value: float | int | str | None, unit: str) -> str:
    if value is None:
        return "unavailable"
    if isinstance(value, str):
        return value
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "s":
        return f"{value * 1e3:,.3g} ms" if value < 1 else f"{value:,.3g} s"
    if unit == "tokens/s":
        return f"{value:,.0f} tok/s"
    return f"{value:,.4g} {unit}".strip()


def fmt_change(change: float | None) -> str:
    if change is None:
        return ""
    if not math.isfinite(change):
        return "from 0"
    return f"{change * 100:+.1f}%"


def metric_line(m: MetricDiff) -> str:
    values = f"{fmt_number(m.base, m.unit)} -> {fmt_number(m.candidate, m.unit)}"
    checked = "" if m.gate else ", not checked"
    thr = f"threshold {m.threshold * 100:g}%{checked}" if m.threshold is not None else ""
    detail = "; ".join(x for x in (m.note, thr) if x)
    return f"{m.mark} {m.name}: {values} {fmt_change(m.change)}".rstrip() + (
        f"  ({detail})" if detail else ""
    )


def _run_line(label: str, info: dict[str, Any]) -> str:
    versions = ", ".join(
        f"{rt.get('distribution') or name} {rt.get('version')}"
        for name, rt in info["runtimes"].items()
    )
    where = info["path"] or info["run_id"]
    return f"{label}: {where} (run {info['run_id']}; {versions or 'no runtimes'})"


def _worth_showing(m: MetricDiff) -> bool:
    """Checked metrics that moved, unchecked ones that changed significantly."""
    if m.gate:
        return m.mark is not Mark.SAME
    return m.mark in (Mark.WORSE, Mark.BETTER)


def too_few_samples(diff: RunDiff) -> list[str]:
    """``key: metric`` for checked metrics that moved but had too few samples to be tested."""
    return [
        f"{c.key}: {m.name}"
        for c in diff.cells
        for m in c.metrics
        if m.gate and m.test is Method.TOO_FEW
    ]


def render_text(diff: RunDiff, verbose: bool = False) -> str:
    """Terminal output: one line per cell, indented lines for metrics that moved."""
    lines = [_run_line("base", diff.base), _run_line("candidate", diff.candidate)]
    m = diff.base["machine"]
    lines.append(
        "machine: "
        + (
            "differs: " + "; ".join(diff.machine_differences)
            if diff.machine_differences
            else f"same ({m.get('cpu_model')}, {m.get('cores_logical')} cores, {m.get('arch')})"
        )
    )
    lines.append("")
    for cell in diff.cells:
        verdict = (
            cell.base.verdict
            if cell.base.verdict == cell.candidate.verdict
            else f"{cell.base.verdict} -> {cell.candidate.verdict}"
        )
        lines.append(f"{cell.mark} {cell.key}  [{verdict}]")
        if cell.mark is not Mark.SAME or verbose:  # the four layers' changes explain first
            lines.extend(f"    stack {x}" for x in cell.stack[:8])
        lines.extend(f"    {r}" for r in cell.reasons)
        shown = [x for x in cell.metrics if verbose or _worth_showing(x)]
        lines.extend(f"    {metric_line(x)}" for x in shown)
    sides = (("only in base", diff.only_base), ("only in candidate", diff.only_candidate))
    for label, items in sides:
        if items:
            lines.append(f"\n{label} ({len(items)}):")
            lines.extend(f"  {i['key']}  [{i['verdict']}]" for i in items)
    counts = ", ".join(f"{v} {k}" for k, v in diff.counts().items() if v)
    lines.append(
        f"\n{len(diff.cells)} paired cells: {counts or 'none'}; {len(diff.only_base)} only in base,"
        f" {len(diff.only_candidate)} only in candidate"
    )
    checked = ", ".join(c.display() for c in diff.checks.values() if c.gate)
    lines.append(f"checked: {checked or 'nothing'}; alpha {diff.alpha:g}")
    few = too_few_samples(diff)
    if few:
        lines.append(
            f"note: {len(few)} checked metric(s) moved but had too few samples to test; "
            "a gate needs repetitions >= 5 (Mann–Whitney) or >= 3 (bootstrap)"
        )
    lines.extend(f"note: {n}" for n in diff.notes())
    return "\n".join(lines) + "\n"
