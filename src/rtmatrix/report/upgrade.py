"""The upgrade views: a candidate against a baseline, the verdict first, regressions first.

Two sources:

- a **paired comparison** (``rtmatrix compare``; the JSON of ``rtmatrix.results.comparison``):
  :func:`comparison_view`, :func:`markdown` (the CI job summary; the page:
  :func:`rtmatrix.report.render.render_comparison`)
  (the HTML report: the comparison, then the matrix of the two sides' runs);
- **two run files** (``rtmatrix report RUN --baseline BASE``; the JSON of
  ``rtmatrix.results.diff``, ``diff_runs(...).to_dict()``): :func:`view` — cells paired by key,
  one mark per cell (``!`` new failure, ``*`` fixed, ``x`` not comparable, ``-`` / ``+``
  significantly worse / better, ``~`` within noise, ``=`` unchanged) and one per compared metric,
  with the test that decided it.

Runtime rows that did not run (no cell on either side) are left out of both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from rtmatrix.report.plots import Plot, Ratio, upgrade_ratios
from rtmatrix.report.views import fmt_value
from rtmatrix.results.diff import diff_runs
from rtmatrix.results.records import RunRecord

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


def _version(run: RunRecord, name: str, version: Any) -> str:
    if version:
        return str(version)
    return "not installed" if name in run.get("runtimes", {}) else "absent"


def view(baseline: RunRecord, candidate: RunRecord) -> Upgrade:
    data = diff_runs(baseline, candidate).to_dict()
    moved, unchanged, every = changes(data)
    ran = {c["runtime"] for run in (baseline, candidate) for c in run["cells"]}
    versions = [
        (
            name,
            _version(baseline, name, v.get("base")),
            _version(candidate, name, v.get("candidate")),
        )
        for name, v in (data.get("runtime_versions") or {}).items()
        if name in ran
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


# --------------------------------------------------------------------------- rtmatrix compare
#
# The upgrade report of a paired comparison (``rtmatrix compare``, the JSON documented in
# ``rtmatrix.results.comparison``): the verdict first — regressions and new failures first, each
# with its explanation — then every check, then the matrix of the two sides' runs (rows that did
# not run left out). The Markdown summary (a CI job summary) and the HTML section are rendered
# from the same view.

VERDICT_CLASS = {  # a check's verdict -> the mark class its row is coloured with
    "regression": "-",
    "inconclusive": "~",
    "improved": "+",
    "equivalent": "=",
}
_CHECK_ORDER = ("regression", "inconclusive", "improved", "equivalent")
_RESULT_TITLE = {
    "pass": "PASS",
    "regression": "REGRESSION",
    "new-failure": "NEW FAILURE",
    "inconclusive": "INCONCLUSIVE",
}


@dataclass(frozen=True)
class SideRow:
    name: str
    label: str
    python: str
    python_version: str
    versions: str
    setup: str  # adapter and options


@dataclass(frozen=True)
class CheckRow:
    cls: str
    cell: str
    metric: str
    verdict: str
    change: str
    ci: str
    k: int
    note: str


@dataclass(frozen=True)
class Flagged:
    cls: str  # "!" new failure, "-" regression
    key: str
    what: list[str]  # what was found: the outcome change, the regressed checks
    sections: list[tuple[str, list[str]]]  # the explanation


@dataclass(frozen=True)
class ComparisonView:
    result: str
    title: str
    code: int
    headline: str
    sides: list[SideRow]
    settings: str
    flagged: list[Flagged]
    checks: list[CheckRow]
    outcome_changes: list[tuple[str, str, str]]  # (mark, key, reasons) for *, x
    notes: list[str]


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{(ratio - 1.0) * 100:+.1f}%"


def _side_row(side: dict[str, Any]) -> SideRow:
    env = side.get("environment") or {}
    versions = ", ".join(
        f"{rt.get('distribution') or name} {rt.get('version') or 'not installed'}"
        for name, rt in (side.get("runtimes") or {}).items()
    )
    options = ", ".join(f"{k}={json.dumps(v)}" for k, v in (side.get("options") or {}).items())
    setup = "; ".join(
        x for x in (f"adapter {side['adapter']}" if side.get("adapter") else "", options) if x
    )
    return SideRow(
        str(side.get("name", "")).upper(),
        str(side.get("label", "")),
        str(side.get("python", "")),
        str(env.get("python", "")),
        versions,
        setup or "as in the matrix",
    )


def check_row(c: dict[str, Any]) -> CheckRow:
    ci = c.get("ci")
    return CheckRow(
        VERDICT_CLASS.get(str(c["verdict"]), "~"),
        str(c["cell"]),
        str(c["metric"]),
        str(c["verdict"]),
        _pct(c.get("ratio")),
        f"{_pct(ci[0])}..{_pct(ci[1])}" if ci else "",
        int(c.get("k", 0)),
        str(c.get("reason", "")),
    )


def _checks(doc: dict[str, Any]) -> list[CheckRow]:
    rows = [check_row(c) for c in doc["decisions"]["checks"]]
    order = {v: i for i, v in enumerate(_CHECK_ORDER)}
    return sorted(rows, key=lambda r: order.get(r.verdict, len(order)))


def _flagged(doc: dict[str, Any], checks: list[CheckRow]) -> list[Flagged]:
    cells = {c["key"]: c for c in doc["cells"]}
    out = []
    for key in doc.get("flagged") or []:
        cell = cells.get(key, {})
        new = cell.get("mark") == "!"
        what = list(cell.get("reasons") or []) if new else []
        what += [
            f"{r.metric} {r.change} (90% CI {r.ci}): {r.note}"
            for r in checks
            if r.cell == key and r.verdict == "regression"
        ]
        sections = (doc.get("explanations") or {}).get(key, {}).get("sections") or []
        out.append(Flagged("!" if new else "-", key, what, [(t, list(ls)) for t, ls in sections]))
    return out


def _settings_text(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    d = doc["decisions"]
    cells = doc["counts"].get("cells", 0)
    return (
        f"{s.get('k_how', '')}; "
        + (f"{s['mode_how']}; " if s.get("mode_how") else "")
        + f"α = {d.get('alpha')} family-wise (Holm over {d.get('tested')} "
        f"tested checks); seed {s.get('seed')}; {cells} cell(s); judged metrics: "
        + ", ".join(s.get("metrics") or [])
    )


def comparison_view(doc: dict[str, Any]) -> ComparisonView:
    """The view of a ``rtmatrix-compare`` document (``Comparison.to_dict()``)."""
    if doc.get("format") != "rtmatrix-compare":
        msg = "not an rtmatrix-compare document"
        raise ValueError(msg)
    checks = _checks(doc)
    changes = [
        (str(c["mark"]), str(c["key"]), "; ".join(c.get("reasons") or []))
        for c in doc["cells"]
        if c["mark"] in ("*", "x") and not c.get("left_out")
    ]
    return ComparisonView(
        result=str(doc["result"]),
        title=_RESULT_TITLE.get(str(doc["result"]), str(doc["result"]).upper()),
        code=int(doc["exit_code"]),
        headline=str(doc["headline"]),
        sides=[_side_row(doc["sides"][s]) for s in ("a", "b")],
        settings=_settings_text(doc),
        flagged=_flagged(doc, checks),
        checks=checks,
        outcome_changes=changes,
        notes=[str(n) for n in doc.get("notes") or []],
    )


def _txt(text: str) -> str:
    """Free text (runtime messages, log lines) for Markdown: no raw HTML, one line."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _md(text: str) -> str:
    """Text for a Markdown table cell: as :func:`_txt`, pipes escaped."""
    return _txt(text).replace("|", "\\|")


def markdown(doc: dict[str, Any]) -> str:
    """The comparison as Markdown for a CI job summary: the verdict and the flagged cells with
    their explanations first, then every check, outcome changes and notes."""
    v = comparison_view(doc)
    out = [f"## rtmatrix compare: {v.title} (exit {v.code})", "", f"**{_txt(v.headline)}**", ""]
    out += ["| side | python | runtime versions | setup |", "|---|---|---|---|"]
    out += [
        f"| {_md(s.label)} | `{_md(s.python)}` {s.python_version} | {_md(s.versions)} "
        f"| {_md(s.setup)} |"
        for s in v.sides
    ]
    out += ["", _txt(v.settings), ""]
    if v.flagged:
        out += ["### Regressions and new failures", ""]
        for f in v.flagged:
            kind = "new failure" if f.cls == "!" else "regression"
            out.append(f"#### `{f.cls}` {kind}: `{f.key}`")
            out += [f"- {_txt(w)}" for w in f.what]
            for title, lines in f.sections:
                out.append(f"- **{title}**")
                out += [f"  - {_txt(ln)}" for ln in lines]
            out.append("")
    if v.checks:
        out += ["### Checks", "", "| | cell | metric | verdict | change | 90% CI | K | note |"]
        out.append("|---|---|---|---|---|---|---|---|")
        out += [
            f"| `{r.cls}` | `{_md(r.cell)}` | {r.metric} | {r.verdict} | {r.change} | {r.ci} "
            f"| {r.k} | {_md(r.note)} |"
            for r in v.checks
        ]
        out.append("")
    if v.outcome_changes:
        out += ["### Fixed and not comparable", ""]
        out += [f"- `{m}` `{k}`: {_txt(r)}" for m, k, r in v.outcome_changes]
        out.append("")
    if v.notes:
        out += ["### Notes", ""] + [f"- {_txt(n)}" for n in v.notes] + [""]
    return "\n".join(out)
