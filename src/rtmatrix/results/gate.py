"""The regression gate: a diff judged by its checks, as an exit code CI can tell apart.

=====  =======================================================================================
0      pass: no new failure, no significant regression of a checked metric
1      a checked metric regressed significantly (past its threshold *and* beyond noise)
2      a new failure: a verdict got worse, or an outcome did (a clean error became a crash)
3      nothing comparable (no shared cells, or every pair ``x``), or missing data: cells or
       checked metrics the base has and the candidate lacks
=====  =======================================================================================

The worst finding wins (2 before 1 before 3); all findings are collected and reported together
(pytest-benchmark). Noise alone never fails the gate: a ``~`` is reported, not counted. The JUnit
XML (one test case per cell) and the Markdown summary (for a CI job summary) are rendered from the
same findings, so they are written before the command exits.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from rtmatrix.results.diff import (
    MIN_PROCESSES,
    CellDiff,
    Mark,
    MetricDiff,
    RunDiff,
    fmt_change,
    fmt_number,
    too_few_samples,
)

EXIT_PASS, EXIT_REGRESSION, EXIT_NEW_FAILURE, EXIT_NOTHING_COMPARABLE = 0, 1, 2, 3


class Kind(StrEnum):
    NEW_FAILURE = "new-failure"
    REGRESSION = "regression"
    MISSING = "missing-data"


EXIT_OF = {
    Kind.NEW_FAILURE: EXIT_NEW_FAILURE,
    Kind.REGRESSION: EXIT_REGRESSION,
    Kind.MISSING: EXIT_NOTHING_COMPARABLE,
}


@dataclass(frozen=True)
class Finding:
    kind: Kind
    key: str
    message: str
    metric: str | None = None


@dataclass(frozen=True)
class GateResult:
    code: int
    findings: list[Finding]
    headline: str
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.code == EXIT_PASS


def regression_message(m: MetricDiff) -> str:
    return (
        f"{m.name} {fmt_number(m.base, m.unit)} -> {fmt_number(m.candidate, m.unit)} "
        f"({fmt_change(m.change)}, threshold {(m.threshold or 0) * 100:g}%; {m.note})"
    )


def judges_performance(cell: CellDiff) -> bool:
    """Performance is judged on a pair only where both sides pool ``MIN_PROCESSES`` worker
    processes (``rtmatrix run --processes N``): repetitions inside one process per side do not
    see the process-to-process spread, and two runs of the same code minutes apart differ by it."""
    return min(cell.processes) >= MIN_PROCESSES


def _cell_findings(cell: CellDiff) -> Iterator[Finding]:
    if cell.mark is Mark.NEW_FAILURE:
        yield Finding(Kind.NEW_FAILURE, cell.key, "; ".join(cell.reasons))
        return
    for m in cell.metrics:
        if not m.gate:
            continue
        if m.mark is Mark.WORSE and not judges_performance(cell):
            continue  # said once in the notes: performance not judged
        if m.mark is Mark.WORSE:
            yield Finding(Kind.REGRESSION, cell.key, regression_message(m), m.name)
        elif m.missing_in == "candidate":
            yield Finding(Kind.MISSING, cell.key, f"{m.name}: {m.note}", m.name)


def findings(diff: RunDiff) -> list[Finding]:
    out = [f for cell in diff.cells for f in _cell_findings(cell)]
    out += [
        Finding(Kind.MISSING, o["key"], f"cell missing from the candidate (base: {o['verdict']})")
        for o in diff.only_base
    ]
    return out


def _headline(code: int, found: list[Finding], diff: RunDiff) -> str:
    n = {k: sum(f.kind is k for f in found) for k in Kind}
    if code == EXIT_NEW_FAILURE:
        return f"FAIL: {n[Kind.NEW_FAILURE]} new failure(s), {n[Kind.REGRESSION]} regression(s)"
    if code == EXIT_REGRESSION:
        return f"FAIL: {n[Kind.REGRESSION]} significant regression(s)"
    if code == EXIT_NOTHING_COMPARABLE and not diff.comparable:
        why = "; ".join(diff.machine_differences) or (
            "no shared cells" if not diff.cells else "every shared cell is not comparable"
        )
        return f"NOTHING COMPARABLE: {why}"
    if code == EXIT_NOTHING_COMPARABLE:
        return f"MISSING DATA: {n[Kind.MISSING]} cell(s) or checked metric(s) absent"
    return f"PASS: {len(diff.comparable)} cell(s) compared, no new failure or regression"


def _notes(diff: RunDiff) -> list[str]:
    unjudged = [
        c
        for c in diff.comparable
        if c.base.status == c.candidate.status == "ok" and not judges_performance(c)
    ]
    notes = (
        [
            f"performance not judged in {len(unjudged)} cell(s): fewer than {MIN_PROCESSES} "
            "worker processes per side (one process per side: its repetitions do not see the "
            "process-to-process spread); outcomes and verdicts were judged; rerun both with "
            f"`rtmatrix run --processes {MIN_PROCESSES}` to judge performance"
        ]
        if unjudged
        else []
    )
    notes += [
        f"not comparable: {c.key}: {'; '.join(c.reasons)}" for c in diff.cells if c.mark == "x"
    ]
    notes += [f"within noise: {c.key}" for c in diff.cells if c.mark is Mark.NOISE]
    few = too_few_samples(diff)
    if few:
        notes.append(
            f"{len(few)} checked metric(s) moved but had too few samples to test "
            "(use repetitions >= 5): " + ", ".join(few)
        )
    return notes + diff.notes()


def evaluate(diff: RunDiff) -> GateResult:
    """Judge a diff: the exit code, every finding, a one-line headline and notes."""
    found = findings(diff)
    codes = {EXIT_OF[f.kind] for f in found}
    if not diff.comparable:
        codes.add(EXIT_NOTHING_COMPARABLE)
    code = next(
        (c for c in (EXIT_NEW_FAILURE, EXIT_REGRESSION, EXIT_NOTHING_COMPARABLE) if c in codes),
        EXIT_PASS,
    )
    return GateResult(code, found, _headline(code, found, diff), _notes(diff))


def render_text(result: GateResult) -> str:
    lines = [f"rtmatrix gate: {result.headline} (exit {result.code})"]
    lines += [f"  {f.kind}: {f.key}: {f.message}" for f in result.findings]
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- JUnit XML


def _testcase(suite: ET.Element, key: str, runtime: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=f"rtmatrix.{runtime}", name=key, time="0")


def junit_xml(diff: RunDiff, result: GateResult) -> str:
    """One test case per cell: a failure per finding, skipped when not comparable."""
    by_key: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_key.setdefault(f.key, []).append(f)
    suite = ET.Element("testsuite", name="rtmatrix gate")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for cell in diff.cells:
        case = _testcase(suite, cell.key, cell.runtime)
        counts["tests"] += 1
        if cell.mark is Mark.NOT_COMPARABLE:
            ET.SubElement(case, "skipped", message="not comparable: " + "; ".join(cell.reasons))
            counts["skipped"] += 1
        cell_findings = by_key.get(cell.key, [])
        for f in cell_findings:
            tag = "error" if f.kind is Kind.MISSING else "failure"
            ET.SubElement(case, tag, type=str(f.kind), message=f.message).text = f.message
        kinds = {f.kind for f in cell_findings}
        if kinds - {Kind.MISSING}:
            counts["failures"] += 1
        elif kinds:
            counts["errors"] += 1
    for o in diff.only_base:
        case = _testcase(suite, o["key"], o["key"].split("|", 1)[0])
        ET.SubElement(case, "error", type=str(Kind.MISSING), message="missing from the candidate")
        counts["tests"] += 1
        counts["errors"] += 1
    for k, v in counts.items():
        suite.set(k, str(v))
    props = ET.Element("properties")
    for name, value in (
        ("exit_code", str(result.code)),
        ("headline", result.headline),
        ("base", diff.base["run_id"]),
        ("candidate", diff.candidate["run_id"]),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    suite.insert(0, props)
    root = ET.Element("testsuites", name="rtmatrix gate")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# --------------------------------------------------------------------------- Markdown


def _md(text: str) -> str:
    """Escape a table cell: pipes split cells, newlines end rows."""
    return text.replace("|", "\\|").replace("\n", " ")


def _versions(diff: RunDiff) -> str:
    parts = [
        f"{v['distribution'] or name} {v['base']} → {v['candidate']}"
        for name, v in diff.runtime_versions().items()
    ]
    return ", ".join(parts) or "no runtimes"


def _cell_row(cell: CellDiff) -> str:
    verdict = (
        cell.base.verdict
        if cell.base.verdict == cell.candidate.verdict
        else f"{cell.base.verdict} → {cell.candidate.verdict}"
    )
    moved = [
        f"{m.mark} {m.name} {fmt_change(m.change)}"
        for m in cell.metrics
        if m.gate and m.mark in (Mark.WORSE, Mark.BETTER, Mark.NOISE)
    ]
    detail = "; ".join(cell.reasons + moved)
    return f"| `{cell.mark}` | `{_md(cell.key)}` | {verdict} | {_md(detail)} |"


def markdown(diff: RunDiff, result: GateResult) -> str:
    """A summary for a CI job page (GitHub's ``$GITHUB_STEP_SUMMARY``)."""
    icon = "✅" if result.passed else "❌"
    lines = [
        f"## {icon} rtmatrix gate: {_md(result.headline)} (exit {result.code})",
        "",
        f"Base `{diff.base['run_id']}` → candidate `{diff.candidate['run_id']}`: {_versions(diff)}."
        + (
            f" Machine differs: {_md('; '.join(diff.machine_differences))}."
            if diff.machine_differences
            else ""
        ),
        "",
    ]
    if result.findings:
        lines += ["### Findings", ""]
        lines += [f"- **{f.kind}** `{_md(f.key)}`: {_md(f.message)}" for f in result.findings]
        lines.append("")
    changed = [c for c in diff.cells if c.mark is not Mark.SAME]
    if changed:
        lines += ["| | cell | verdict | detail |", "|---|---|---|---|"]
        lines += [_cell_row(c) for c in changed]
        lines.append("")
    counts = ", ".join(f"`{k}` {v}" for k, v in diff.counts().items() if v)
    lines.append(
        f"{len(diff.cells)} paired cells ({counts or 'none'}), {len(diff.only_base)} only in base, "
        f"{len(diff.only_candidate)} only in candidate. Checked: "
        + ", ".join(f"`{c.display()}`" for c in diff.checks.values() if c.gate)
        + f"; alpha {diff.alpha:g}."
    )
    if result.notes:
        lines += ["", "<details><summary>Notes</summary>", ""]
        lines += [f"- {_md(n)}" for n in result.notes]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
