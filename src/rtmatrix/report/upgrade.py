"""The upgrade view: a candidate run against a baseline, regressions first.

Built on the JSON of ``rtmatrix.results.diff`` (``diff_runs(...).to_dict()``, documented in that
module): cells paired by key, one mark per cell (``!`` new failure, ``*`` fixed, ``x`` not
comparable, ``-`` / ``+`` significantly worse / better, ``~`` within noise, ``=`` unchanged) and
one per compared metric, with the test that decided it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rtmatrix.report.plots import Plot, Ratio, upgrade_ratios
from rtmatrix.report.views import fmt_value
from rtmatrix.results.diff import diff_runs

# regressions first: new failures, significant worsening, not comparable, then the rest
MARK_ORDER = ("!", "-", "x", "~", "+", "*", "=")
LEGEND = (
    ("!", "new failure: the verdict, or with the same verdict the outcome, got worse"),
    ("-", "a metric got significantly worse (past its threshold, and the samples differ)"),
    ("x", "not comparable: machine, fixture hash or params differ, a side unavailable or absent"),
    ("~", "moved past its threshold, but within noise"),
    ("+", "a metric got significantly better"),
    ("*", "fixed: the verdict or outcome got better"),
    ("=", "unchanged: every checked metric within its threshold"),
)


@dataclass(frozen=True)
class Change:
    """One row of the upgrade table: a cell's verdict change, or one of its metrics."""

    cls: str
    key: str
    metric: str
    baseline: str
    candidate: str
    ratio: float | None
    significance: str
    note: str

    @property
    def ratio_text(self) -> str:
        if self.ratio is None or not math.isfinite(self.ratio):
            return ""
        return f"{self.ratio:.3f}×"


@dataclass(frozen=True)
class Upgrade:
    baseline_id: str
    candidate_id: str
    versions: list[tuple[str, str, str]]
    machine_differences: list[str]
    checks: str
    counts: dict[str, int]
    changes: list[Change]  # what moved, regressions first
    unchanged: list[str]  # keys of cells marked "=" with nothing worth a row
    metrics: list[Change]  # every compared metric of every paired cell
    plot: Plot
    legend: tuple[tuple[str, str], ...] = LEGEND


def _rank(mark: str) -> int:
    return MARK_ORDER.index(mark) if mark in MARK_ORDER else len(MARK_ORDER)


def _value(value: Any, unit: str) -> str:
    return fmt_value({"value": value, "unit": unit})


def significance(m: dict[str, Any]) -> str:
    """How a metric's change was judged: test, p-value or CI, sample counts, threshold."""
    parts = []
    if m.get("test") == "mann-whitney" and m.get("p_value") is not None:
        parts.append(f"Mann–Whitney p={m['p_value']:.3g}")
    elif m.get("test") == "bootstrap" and m.get("ci"):
        lo, hi = m["ci"]
        parts.append(f"bootstrap CI {lo:.3f}–{hi:.3f}" if lo is not None else "bootstrap")
    elif m.get("test"):
        parts.append(str(m["test"]))
    if m.get("n_base") or m.get("n_candidate"):
        parts.append(f"n={m.get('n_base')}/{m.get('n_candidate')}")
    if m.get("threshold") is not None:
        checked = "checked" if m.get("gate") else "not checked"
        parts.append(f"threshold {m['threshold'] * 100:g}% ({checked})")
    return "; ".join(parts)


def metric_change(key: str, m: dict[str, Any]) -> Change:
    change = m.get("change")
    ratio = 1.0 + change if isinstance(change, int | float) else None
    return Change(
        str(m["mark"]),
        key,
        str(m["name"]),
        _value(m.get("base"), str(m.get("unit", ""))),
        _value(m.get("candidate"), str(m.get("unit", ""))),
        ratio,
        significance(m),
        str(m.get("note") or ""),
    )


def worth_a_row(m: dict[str, Any]) -> bool:
    """Checked metrics that moved; unchecked ones only when significantly worse or better."""
    if m.get("gate"):
        return m.get("mark") != "="
    return m.get("mark") in ("-", "+")


def _cell_row(cell: dict[str, Any]) -> Change:
    b, c = cell["base"], cell["candidate"]
    return Change(
        str(cell["mark"]),
        str(cell["key"]),
        "verdict",
        f"{b['verdict']} ({b['status']})",
        f"{c['verdict']} ({c['status']})",
        None,
        "",
        "; ".join(cell.get("reasons") or []) or str(c.get("message", "")),
    )


def changes(data: dict[str, Any]) -> tuple[list[Change], list[str], list[Change]]:
    """(rows that moved, regressions first; keys of unchanged cells; every compared metric)."""
    rows: list[tuple[int, int, Change]] = []
    unchanged, every = [], []
    for cell in data["cells"]:
        mark = str(cell["mark"])
        metrics = [metric_change(cell["key"], m) for m in cell.get("metrics") or []]
        every += metrics
        if mark in ("!", "*", "x"):
            rows.append((_rank(mark), _rank(mark), _cell_row(cell)))
            continue
        shown = [
            ch for m, ch in zip(cell.get("metrics") or [], metrics, strict=True) if worth_a_row(m)
        ]
        rows += [(_rank(mark), _rank(ch.cls), ch) for ch in shown]
        if not shown:
            unchanged.append(str(cell["key"]))
    for side, label in (("only_base", "baseline"), ("only_candidate", "candidate")):
        for one in data.get(side) or []:
            text = f"{one['verdict']} ({one['status']})"
            ch = Change(
                "x",
                str(one["key"]),
                "cell",
                text if side == "only_base" else "absent",
                text if side == "only_candidate" else "absent",
                None,
                "",
                f"only in the {label}",
            )
            rows.append((_rank("x"), _rank("x"), ch))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in rows], unchanged, every


def _ratios(moved: list[Change], every: list[Change]) -> list[Ratio]:
    """What moved, then PP and TG of every other cell, for the chart."""
    picked = [ch for ch in moved if ch.ratio is not None]
    seen = {(ch.key, ch.metric) for ch in picked}
    picked += [
        ch
        for ch in every
        if ch.metric in ("pp_tps", "tg_tps")
        and ch.ratio is not None
        and (ch.key, ch.metric) not in seen
    ]
    return [Ratio(f"{ch.key} {ch.metric}", ch.ratio or 0.0, ch.cls) for ch in picked]


def _version(run: dict[str, Any], name: str, version: Any) -> str:
    if version:
        return str(version)
    return "not installed" if name in run.get("runtimes", {}) else "absent"


def view(baseline: dict[str, Any], candidate: dict[str, Any]) -> Upgrade:
    data = diff_runs(baseline, candidate).to_dict()
    moved, unchanged, every = changes(data)
    versions = [
        (
            name,
            _version(baseline, name, v.get("base")),
            _version(candidate, name, v.get("candidate")),
        )
        for name, v in (data.get("runtime_versions") or {}).items()
    ]
    checks = ", ".join(
        f"{c['metric']} {c['threshold'] * 100:g}%" for c in data.get("checks") or [] if c["gate"]
    )
    plot = upgrade_ratios(_ratios(moved, every), baseline["run_id"], candidate["run_id"])
    return Upgrade(
        baseline["run_id"],
        candidate["run_id"],
        versions,
        list(data.get("machine_differences") or []),
        f"{checks or 'nothing'}; alpha {data.get('alpha')}",
        {str(k): int(v) for k, v in (data.get("counts") or {}).items()},
        moved,
        unchanged,
        every,
        plot,
    )
