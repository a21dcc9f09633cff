"""Render run records into one self-contained ``index.html``.

The page holds everything it shows: CSS and the few lines of JavaScript inline, plots as inline
SVG, no network. Its Content-Security-Policy allows no fetches at all and only the one script
whose hash it names, so even text that slipped past autoescaping could not run.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from rtmatrix.metrics import registry
from rtmatrix.report import (
    architectures,
    cellmarks,
    evidence,
    history,
    lifecycle,
    partitions,
    plots,
    realmodel,
    stack,
    upgrade,
    views,
)
from rtmatrix.report.views import fmt_value
from rtmatrix.results import ranking, series
from rtmatrix.results.columns import Column, as_dict, as_list, columns
from rtmatrix.results.records import RunRecord
from rtmatrix.selection import Selection, SelectionError, constraints_for, select
from rtmatrix.selection.models import KINDS

__all__ = ["fmt_value", "render_report"]


def _asset(name: str) -> str:
    return resources.files("rtmatrix.report").joinpath("templates", name).read_text("utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )


def _env(notes: views.Notes) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rtmatrix.report", "templates"),
        autoescape=True,  # every template, whatever its file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # the metrics a control run is shown by: the ones the report ranks (the metric registry's)
    env.globals["control_metrics"] = [str(m) for m in registry.ranked()]
    env.filters["metric"] = lambda m, name="": views.metric_value(m, notes, name)
    env.filters["parity"] = lambda p: views.parity_value(p, notes)
    env.filters["fmt"] = fmt_value
    env.filters["flat"] = views.flat_items
    env.filters["other_evidence"] = views.other_evidence
    env.filters["as_dict"] = as_dict
    env.filters["as_list"] = as_list
    env.filters["figure"] = lambda m, cell, name="": views.marked_metric(m, notes, name, cell)
    env.filters["marks"] = lambda cell: cellmarks.marks(cell, notes)
    env.filters["cmdline"] = cellmarks.command_line
    env.filters["ev_blocks"] = evidence.blocks_of
    env.filters["metric_rows"] = lambda metrics: evidence.metric_rows(metrics, notes)
    return env


def _plots(cols: list[Column]) -> list[plots.Plot]:
    return [
        plots.throughput_by_quant(cols),
        plots.context_scaling(cols),
        plots.cold_start_split(cols),
    ]


def _shown(cols: list[Column], by_matrix: bool = True) -> list[Column]:
    """One column per matrix and runtime row (the newest run's), with picks, spreads, ranks;
    without ``by_matrix`` (a paired comparison's two sides), each run's rows side by side."""
    shown = series.shown_columns(cols) if by_matrix else [c for c in cols if c.cells]
    series.attach(shown)
    ranking.attach(shown)
    return shown


def _upgrades(runs: list[RunRecord], baseline: RunRecord | None) -> list[upgrade.Upgrade]:
    """Each run against the baseline (a results folder may hold the baseline itself)."""
    if baseline is None:
        return []
    return [upgrade.view(baseline, run) for run in runs if run["run_id"] != baseline["run_id"]]


def _answer(runs: list[RunRecord]) -> Selection | dict[str, str]:
    """The selection verdict the page opens with (``rtmatrix select`` on the same runs, under
    the newest run's ``[selection]`` table and the defaults); ``{"unavailable": why}`` when it
    cannot be given."""
    try:
        return select(runs, constraints_for(runs, []))
    except (SelectionError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # records this release cannot read for a verdict: the page says so and goes on
        return {"unavailable": f"no selection verdict: {type(exc).__name__}: {exc}"}


def _answer_plots(answer: Selection | dict[str, str]) -> dict[str, plots.Plot]:
    """The quality-vs-speed chart of each real model the answer shows (its first three)."""
    if not isinstance(answer, Selection):
        return {}
    shown = [m for m in answer.models[:3] if m.kind == KINDS[0]]
    return {m.model: plots.quality_speed(m, answer.constraints, i) for i, m in enumerate(shown)}


def render_html(
    runs: list[RunRecord],
    baseline: RunRecord | None = None,
    comparison: upgrade.ComparisonView | None = None,
    paired: Sequence[history.PairedMark] = (),
) -> str:
    """The page for ``runs`` (ordered by time here), with an upgrade view against ``baseline``
    and/or a paired comparison first; upgrade pages leave out runtime rows that did not run.
    Several runs of one matrix show each runtime row once, with its history (a comparison's
    two sides stay side by side: the comparison section judges them)."""
    runs = series.by_time(runs)
    notes = views.Notes()
    every = columns(runs, ran_only=bool(baseline or comparison))
    cols = _shown(every, by_matrix=comparison is None)
    # an upgrade or comparison page answers "what changed" first: its own view leads
    answer = None if baseline or comparison else _answer(runs)
    script = _asset("report.js")
    context = {
        "runs": runs,
        "cols": cols,
        "every": every,
        "shared_evidence": evidence.shared(every),
        "left_out": series.left_out(every, cols),
        "history": history.views(cols, paired),
        "summary": views.summary(runs, cols),
        "real_model": realmodel.rows(cols, notes),
        "stack_rows": stack.rows(cols, notes),
        "real_sources": realmodel.sources(cols),
        "architectures": architectures.view(cols),
        "answer": answer,
        "answer_plots": _answer_plots(answer) if answer is not None else {},
        "selection": views.selection(cols, notes),
        "grid": views.grid(cols),
        "plots": _plots(cols),
        "lifecycle": lifecycle.panel(cols, notes),
        "partitions": partitions.panel(cols, notes),
        "upgrades": _upgrades(runs, baseline),
        "baseline": baseline,
        "comparison": comparison,
        "notes": notes,
        "sources": views.SOURCES,
        "css": _asset("report.css"),
        "script": script,
        "csp": _csp(script),
    }
    return _env(notes).get_template("index.html.j2").render(context)


def render_report(
    runs: list[RunRecord],
    out_dir: Path,
    baseline: RunRecord | None = None,
    comparison: upgrade.ComparisonView | None = None,
    paired: Sequence[history.PairedMark] = (),
) -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (newest last); returns its path. ``paired``:
    regressions paired comparisons found, marked on the history (``history.paired_marks``)."""
    html = render_html(runs, baseline, comparison, paired)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html, "utf-8")
    tmp.replace(path)
    return path


def render_comparison(doc: dict[str, Any], runs: list[RunRecord], out_dir: Path) -> Path:
    """``out_dir/index.html``: the comparison first, then the matrix of the sides' ``runs``."""
    return render_report(runs, out_dir, comparison=upgrade.comparison_view(doc))
