"""The hard limits: a candidate is excluded by every limit it misses, each with its figure.

A limit whose figure no candidate of the model has (KLD on a synthetic model) does not apply to
that model, and the model's notes say so. A limit ``at`` another fixture reads the row's cell
there (the same dtype where it has one). ``must_behave`` requires the fixture classes it names
to behave as expected: a FAIL in one excludes the candidate; other failing fixtures that FAIL
are noted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtmatrix.names import M
from rtmatrix.results.columns import as_dict, fixture_label, picked
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from rtmatrix.selection.candidates import Draft
from rtmatrix.selection.constraints import (
    LIMITS,
    Constraints,
    LimitSpec,
    SelectionError,
    license_allowed,
    license_alternatives,
)
from rtmatrix.selection.models import classes_of, matches, model_of, tag
from rtmatrix.selection.verdict import Failure, num_text, show


def _cells_at(d: Draft, at: str) -> list[CellRecord]:
    cells = [c for _, c in d.col.cells if matches(at, c)]
    same = [c for c in cells if as_dict(c.get("fixture")).get("dtype") == d.dtype]
    return same or cells


def _sources(d: Draft, spec: LimitSpec, at: str | None) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, metrics) a limit reads: the candidate's own figures, or its cells ``at``."""
    if at is None:
        return [("", d.metrics)]
    sources: list[tuple[str, Mapping[str, Any]]] = [
        (f" at {fixture_label(x)} {tag(x)}", picked(d.col, x)["metrics"]) for x in _cells_at(d, at)
    ]
    if not sources:
        d.failures.append(Failure(spec.key, f"no {spec.label} at {at} for this row"))
    return sources


def _check_limit(d: Draft, spec: LimitSpec, c: Constraints, applies: bool) -> None:
    lim = c.limit(spec.key)
    if lim is None or not applies:
        return
    for where, metrics in _sources(d, spec, lim.at):
        m = as_dict(metrics.get(spec.metric))
        value = m.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool):
            why = m.get("reason") or "not recorded"
            d.failures.append(Failure(spec.key, f"{spec.label}{where} not measured ({why})"))
        elif not spec.passes(float(value), lim):
            sign = ">" if spec.bound == "max" else "<"
            text = f"{spec.label}{where} {show(spec, float(value))} {sign} {spec.key} " + (
                f"{num_text(lim.value)} {spec.unit}"
            )
            d.failures.append(Failure(spec.key, text, float(value)))


def _check_license(d: Draft, c: Constraints) -> None:
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


def _check_behaviour(
    d: Draft, c: Constraints, headlines: Mapping[str, Any], unmet: dict[str, set[str]]
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
        what = (f"{fixture_label(cell)} {tag(cell)} ends {out['status']} (verdict FAIL): "
                f"{out.get('message', '')}")  # fmt: skip
        if hit:
            d.failures.append(Failure("must_behave", f"{what} [{', '.join(hit)}]"))
        elif cell.get("expect") == "error":
            unmet.setdefault(f"{fixture_label(cell)} {tag(cell)}", set()).add(d.col.runtime)


def _applicable(drafts: Sequence[Draft], spec: LimitSpec, c: Constraints) -> bool:
    """A limit applies to a model when some candidate of it has the figure (where it is read)."""
    lim = c.limit(spec.key)
    if lim is None:
        return False
    for d in drafts:
        cells: list[Mapping[str, MetricRecord]] = (
            [d.metrics] if lim.at is None else [x["metrics"] for x in _cells_at(d, lim.at)]
        )
        if any(isinstance(as_dict(m.get(spec.metric)).get("value"), int | float) for m in cells):
            return True
    return False


def judge_limits(
    drafts: Sequence[Draft], c: Constraints, headlines: Mapping[str, Any]
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


def check_at(runs: Sequence[RunRecord], c: Constraints) -> None:
    """A limit's ``at`` that names no cell of any run is a bad constraint (SelectionError)."""
    cells = [cell for run in runs for cell in run["cells"]]
    for spec in LIMITS:
        lim = c.limit(spec.key)
        if lim is None or lim.at is None or any(matches(lim.at, x) for x in cells):
            continue
        names = sorted({f"{as_dict(x.get('fixture')).get('name')}|{tag(x)}" for x in cells})
        raise SelectionError(spec.key, lim.at, "`at` matches no cell of the runs; valid: "
                             + ", ".join(names))  # fmt: skip
