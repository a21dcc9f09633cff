"""Render run records into one self-contained ``index.html``.

The page holds everything it shows: CSS and the few lines of JavaScript inline, plots as inline
SVG, no network. Its Content-Security-Policy allows no fetches at all and only the one script
whose hash it names, so even text that slipped past autoescaping could not run.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from rtmatrix.report import lifecycle, partitions, plots, upgrade, views
from rtmatrix.report.views import fmt_value

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
    return env


def _plots(cols: list[views.Column]) -> list[plots.Plot]:
    return [
        plots.throughput_by_quant(cols),
        plots.context_scaling(cols),
        plots.cold_start_split(cols),
    ]


def render_html(
    runs: list[dict[str, Any]],
    baseline: dict[str, Any] | None = None,
    comparison: upgrade.ComparisonView | None = None,
) -> str:
    """The page for ``runs`` (newest last), with an upgrade view against ``baseline`` and/or a
    paired comparison first; upgrade pages leave out runtime rows that did not run."""
    notes = views.Notes()
    cols = views.columns(runs, ran_only=bool(baseline or comparison))
    script = _asset("report.js")
    context = {
        "runs": runs,
        "cols": cols,
        "summary": views.summary(runs, cols),
        "selection": views.selection(cols, notes),
        "grid": views.grid(cols),
        "plots": _plots(cols),
        "lifecycle": lifecycle.panel(cols, notes),
        "partitions": partitions.panel(cols, notes),
        "upgrades": [upgrade.view(baseline, run) for run in runs] if baseline else [],
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
    runs: list[dict[str, Any]],
    out_dir: Path,
    baseline: dict[str, Any] | None = None,
    comparison: upgrade.ComparisonView | None = None,
) -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (newest last); returns its path."""
    html = render_html(runs, baseline, comparison)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html, "utf-8")
    tmp.replace(path)
    return path
