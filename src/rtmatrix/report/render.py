"""Render one or more run records into a self-contained ``index.html``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

COLUMNS: list[tuple[str, str]] = [
    ("pp_tps", "PP tok/s"),
    ("pp_tps_counter", "PP tok/s (counter)"),
    ("tg_tps", "TG tok/s"),
    ("tg_tps_counter", "TG tok/s (counter)"),
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT"),
    ("token_latency_p90_s", "token p90"),
    ("cold_start_total_s", "cold start"),
    ("peak_rss_sampled_bytes", "peak RSS (sampled)"),
    ("peak_rss_os_bytes", "peak RSS (OS)"),
    ("package_size_bytes", "package"),
    ("license", "license"),
    ("power_w", "power"),
]
SOURCE_MARK = {
    "runtime-counter": "rc",
    "harness-clock": "hc",
    "os-accounting": "os",
    "package-metadata": "pkg",
    "modelled": "model",
    "unavailable": "n/a",
}


def fmt_value(metric: dict[str, Any]) -> str:
    value, unit = metric.get("value"), metric.get("unit", "")
    if value is None:
        return "unavailable"
    if isinstance(value, str):
        return value
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "s":
        return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "tokens/s":
        return f"{value:,.0f}"
    return f"{value:g} {unit}"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rtmatrix.report", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["metric"] = fmt_value
    return env


def render_report(runs: list[dict[str, Any]], out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (newest last); returns its path."""
    html = (
        _env()
        .get_template("index.html.j2")
        .render(runs=runs, columns=COLUMNS, source_mark=SOURCE_MARK)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html, "utf-8")
    tmp.replace(path)
    return path
