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

from rtmatrix.report import (
    architectures,
    cellmarks,
    history,
    lifecycle,
    partitions,
    plots,
    ranking,
    realmodel,
    stack,
    upgrade,
    views,
)
from rtmatrix.report.views import fmt_value
from rtmatrix.results.records import RunRecord

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
    env.filters["metric"] = lambda m, name="": views.metric_value(m, notes, name)
    env.filters["parity"] = lambda p: views.parity_value(p, notes)
    env.filters["fmt"] = fmt_value
    env.filters["flat"] = views.flat_items
    env.filters["other_evidence"] = views.other_evidence
    env.filters["as_dict"] = views.as_dict
    env.filters["as_list"] = views.as_list
    env.filters["figure"] = lambda m, cell, name="": views.marked_metric(m, notes, name, cell)
    env.filters["marks"] = lambda cell: cellmarks.marks(cell, notes)
    env.filters["cmdline"] = cellmarks.command_line
    return env


def _plots(cols: list[views.Column]) -> list[plots.Plot]:
    return [
        plots.throughput_by_quant(cols),
        plots.context_scaling(cols),
        plots.cold_start_split(cols),
    ]


def _shown(cols: list[views.Column], by_matrix: bool = True) -> list[views.Column]:
    """One column per matrix and runtime row (the newest run's), with picks, spreads, ranks;
    without ``by_matrix`` (a paired comparison's two sides), each run's rows side by side."""
    shown = history.shown_columns(cols) if by_matrix else [c for c in cols if c.cells]
    history.attach(shown)
    ranking.attach(shown)
    return shown


def _upgrades(runs: list[RunRecord], baseline: RunRecord | None) -> list[upgrade.Upgrade]:
    """Each run against the baseline (a results folder may hold the baseline itself)."""
    if baseline is None:
        return []
    return [upgrade.view(baseline, run) for run in runs if run["run_id"] != baseline["run_id"]]


def _answer(runs: list[RunRecord]) -> Any:
    """The selection verdict the page opens with (``rtmatrix select`` on the same runs, under
    the newest run's ``[selection]`` table and the defaults); None when it cannot be given."""
    from rtmatrix.selection import SelectionError, constraints_for, select  # select reads
    # the report's views: imported here, not at the top, so neither module needs the other first

    try:
        return select(runs, constraints_for(runs, []))
    except (SelectionError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # records this release cannot read for a verdict: the page says so and goes on
        return {"unavailable": f"no selection verdict: {type(exc).__name__}: {exc}"}


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
    runs = history.by_time(runs)
    notes = views.Notes()
    every = views.columns(runs, ran_only=bool(baseline or comparison))
    cols = _shown(every, by_matrix=comparison is None)
    script = _asset("report.js")
    context = {
        "runs": runs,
        "cols": cols,
        "every": every,
        "left_out": history.left_out(every, cols),
        "history": history.views(cols, paired),
        "summary": views.summary(runs, cols),
        "real_model": realmodel.rows(cols, notes),
        "stack_rows": stack.rows(cols, notes),
        "real_sources": realmodel.sources(cols),
        "architectures": architectures.view(cols),
        # an upgrade or comparison page answers "what changed" first: its own view leads
        "answer": None if baseline or comparison else _answer(runs),
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
