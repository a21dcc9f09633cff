"""Static plots for the report: matplotlib figures saved as SVG and inlined in the page.

matplotlib renders offline with no browser, no JavaScript and no network, its SVG keeps text as
text (``svg.fonttype = none``: searchable, small, crisp at any zoom), and it is the most widely
maintained Python plotting library. Each plot gets its own ``svg.hashsalt`` so the ids of several
inline SVGs never collide. A plot with nothing to show returns a note saying why, never raises.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtmatrix.metrics import registry
from rtmatrix.names import M, Scenario
from rtmatrix.report.views import distinct_labels, fmt_bytes
from rtmatrix.results.columns import (
    Column,
    as_dict,
    as_list,
    common_params,
    fixture_label,
    normal_cells,
    params_text,
    scenario_of,
)
from rtmatrix.results.records import CellRecord
from rtmatrix.scenarios import family
from rtmatrix.selection import Candidate, Constraints, ModelSelection

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'matplotlib>=3.8'"
PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")
PHASE_COLOURS = ("#88ccee", "#44aa99", "#ddcc77", "#cc6677")
CONTENDED_COLOUR = "#c0392b"
CLASS_COLOURS = {
    "!": "#c0392b",
    "-": "#e67e22",
    "x": "#7f8c8d",
    "~": "#95a5a6",
    "=": "#bdc3c7",
    "+": "#27ae60",
    "*": "#2e86c1",
}
MAX_BARS = 40
DEPTH_KEYS = ("prompt_tokens", "n_ctx")  # context depth: tokens in context, else its size
RATIO_TICKS = (0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
RATIO_TICKS_WIDE = (0.001, 0.01, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0, 1000.0)
# labels, units and scales of the metrics come from the metric registry; a plot names which
# metrics it draws: the PP/TG figure its group's members (dots: the runtime's counters), the
# cold-start split its group's parts, the context figure and the history these panels
THROUGHPUT_PANELS = registry.in_group(registry.GROUP_THROUGHPUT)
COUNTER_OF = {M.PP_TPS: M.PP_TPS_COUNTER, M.TG_TPS: M.TG_TPS_COUNTER}
COLD_START_PARTS = registry.in_group(registry.GROUP_COLD_START)
CONTEXT_PANELS = (M.PEAK_RSS_OS, M.PP_TPS, M.TG_TPS)


@dataclass(frozen=True)
class Plot:
    """One figure: inline SVG markup, or a note saying why there is none."""

    id: str
    title: str
    caption: str
    svg: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Ratio:
    """One compared value of the upgrade view, for the baseline-vs-candidate chart."""

    label: str
    ratio: float
    cls: str


def _figure(width: float, height: float) -> tuple[Figure, Any] | str:
    """A blank figure (pyplot-free: no global state, no GUI backend), or why there is none."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        return f"plots need matplotlib ({exc}); install it with: {INSTALL_HINT}"
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig


def _svg(fig: Figure, plot_id: str, title: str) -> str:
    import matplotlib as mpl

    buf = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": plot_id}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = _scope_ids(text[text.index("<svg") :], plot_id)
    attrs = f'<svg class="plot" role="img" aria-label="{_attr(title)}" data-plot="{plot_id}" '
    return attrs + text[len("<svg ") :]


def _scope_ids(svg: str, prefix: str) -> str:
    """Prefix every id and reference to one, so several inline SVGs share a page safely."""
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _value(metric: Mapping[str, Any] | None) -> float | None:
    if not metric or not isinstance(metric.get("value"), int | float):
        return None
    value = float(metric["value"])
    return value if math.isfinite(value) else None


def _normal_cells(col: Column) -> list[CellRecord]:
    return normal_cells(c for _, c in col.cells)


def _style(ax: Axes) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)


def throughput_by_quant(cols: Sequence[Column]) -> Plot:
    """PP and TG per runtime and quantization: bars from the harness clock, dots from counters."""
    title = "Prompt processing and token generation per runtime and quantization"
    base = common_params(c for col in cols for c in _normal_cells(col))
    caption = (
        "Bars: harness clock (median, whiskers min–max); dots: the runtime's own counters; "
        "hatched red: the cell ran contended (the host was busy), not comparable."
    )
    if base:
        caption += f" At {params_text(base)}."
    series: list[tuple[str, dict[str, CellRecord]]] = []
    cats: list[str] = []
    for col in cols:
        cells = {fixture_label(c): c for c in _normal_cells(col) if c["params"] == base}
        cells = {k: c for k, c in cells.items() if _value(c["metrics"].get(M.PP_TPS)) is not None}
        if cells:
            series.append((col.label, cells))
            cats += [k for k in cells if k not in cats]
    if not series:
        return Plot("pp-tg", title, caption, note="no data: no cell measured PP/TG throughput")
    made = _figure(max(6.0, 1.1 * len(cats) * max(1, len(series)) ** 0.5 + 3), 3.4)
    if isinstance(made, str):
        return Plot("pp-tg", title, caption, note=made)
    fig, _ = made
    axes = fig.subplots(1, len(THROUGHPUT_PANELS), squeeze=False)[0]
    width = 0.8 / len(series)
    for ax, panel in zip(axes, THROUGHPUT_PANELS, strict=True):
        for si, (name, cells) in enumerate(series):
            xs, ys, lo, hi, cx, cy = [], [], [], [], [], []
            busy: list[bool] = []
            for ci, cat in enumerate(cats):
                cell = cells.get(cat)
                m = cell["metrics"].get(panel.name) if cell else None
                v = _value(m)
                if v is None or m is None:
                    continue
                x = ci - 0.4 + width * (si + 0.5)
                stats = m.get("stats") or {}
                xs.append(x)
                ys.append(v)
                busy.append(bool(cell and cell.get("contended")))
                lo.append(max(0.0, v - float(stats.get("min", v))))
                hi.append(max(0.0, float(stats.get("max", v)) - v))
                counter = _value(cell["metrics"].get(COUNTER_OF[panel.name])) if cell else None
                if counter is not None:
                    cx.append(x)
                    cy.append(counter)
            colour = PALETTE[si % len(PALETTE)]
            bars = ax.bar(
                xs,
                ys,
                width * 0.92,
                color=colour,
                label=name,
                yerr=[lo, hi],
                error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333"},
            )
            _mark_contended(bars.patches, busy)
            if cx:
                ax.plot(
                    cx,
                    cy,
                    "o",
                    color="#222",
                    markersize=3.5,
                    label="runtime counter" if si == 0 else "_nolegend_",
                )
        ax.set_xticks(
            range(len(cats)),
            cats,
            rotation=30 if len(cats) > 3 else 0,
            ha="right" if len(cats) > 3 else "center",
        )
        ax.set_ylabel(registry.axis_of(panel.name).label)
        ax.set_title(panel.label)
        _style(ax)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, fontsize=8, frameon=False, loc="outside lower center", ncols=len(labels)
    )
    return Plot("pp-tg", title, caption, _svg(fig, "pp-tg", title))


def _mark_contended(patches: Sequence[Any], busy: Sequence[bool]) -> None:
    """Hatch and outline in red the bars of cells that ran contended (not comparable)."""
    for patch, contended in zip(patches, busy, strict=True):
        if contended:
            patch.set_hatch("///")
            patch.set_edgecolor(CONTENDED_COLOUR)
            patch.set_linewidth(1.2)


def _depth_lines(cols: Sequence[Column], depth: str) -> list[tuple[str, list[CellRecord]]]:
    """Cells that ran ok, pooled per runtime, model and dtype (across fixture names), by depth."""
    lines: list[tuple[str, list[CellRecord]]] = []
    for col in cols:
        groups: dict[tuple[str, str], list[CellRecord]] = {}
        for c in _normal_cells(col):
            if c["outcome"]["status"] != "ok":
                continue
            fx = c["fixture"]
            rest = {k: v for k, v in c["params"].items() if k not in DEPTH_KEYS}
            model = f"{fx.get('model') or fx['name']}" + (
                f"/{fx['dtype']}" if fx.get("dtype") else ""
            )
            model += f" +{fx['variant']}" if fx.get("variant") else ""
            groups.setdefault((model, params_text(rest)), []).append(c)
        models = [m for m, _ in groups]
        for (model, rest_text), cells in groups.items():
            if len({c["params"].get(depth) for c in cells}) > 1:
                name = f"{col.label} {model}" + (f" {rest_text}" if models.count(model) > 1 else "")
                lines.append((name, sorted(cells, key=lambda c: float(c["params"][depth]))))
    return lines


def _ring_contended(
    ax: Axes, cells: Sequence[CellRecord], depth: str, key: str, scale: float
) -> None:
    """A red ring around the points of cells that ran contended."""
    pts = [
        (float(c["params"][depth]), v * scale)
        for c in cells
        if c.get("contended") and (v := _value(c["metrics"].get(key))) is not None
    ]
    if pts:
        xs, ys = zip(*pts, strict=True)
        (ring,) = ax.plot(xs, ys, "o", label="contended (not comparable)", markersize=9)
        ring.set(markerfacecolor="none", markeredgecolor=CONTENDED_COLOUR, markeredgewidth=1.4)


def _bandwidth_limit(ax: Axes, cells: Sequence[CellRecord], depth: str, colour: str) -> None:
    """The decode's bandwidth limit at each depth (tok/s = bandwidth ÷ bytes per token), dashed."""
    pts = [
        (float(c["params"][depth]), float(limit))
        for c in cells
        if isinstance(limit := as_dict(c["metrics"].get(M.TG_BANDWIDTH_UTIL)).get("limit_tps"),
                      int | float)
    ]  # fmt: skip
    if pts:
        ax.plot(*zip(*pts, strict=True), "--", color=colour, linewidth=1.0, alpha=0.8)


def context_scaling(cols: Sequence[Column]) -> Plot:
    """Peak memory, PP and TG against context depth (prompt tokens, else n_ctx)."""
    title = "Memory and throughput against context depth"
    cells = [c for col in cols for c in _normal_cells(col) if c["outcome"]["status"] == "ok"]
    depth = next((k for k in DEPTH_KEYS if len({c["params"].get(k) for c in cells}) > 1), None)
    if depth is None:
        seen = sorted({(c["params"].get("n_ctx"), c["params"].get("prompt_tokens")) for c in cells})
        note = (
            "no data: every cell that ran ok ran at one context depth "
            f"(n_ctx, prompt_tokens = {seen[0] if seen else 'none'}); give [params] n_ctx or "
            "prompt_tokens a list to see scaling"
        )
        return Plot("context", title, "", note=note)
    caption = (
        f"x: {depth} (log scale); one line per runtime, model and dtype, over every fixture that "
        "ran ok (their n_ctx may differ: memory grows with it); peak RSS from the OS. Dashed "
        "in the TG panel: this host's bandwidth limit, its measured read bandwidth ÷ the bytes "
        "a decode token reads at that depth (weights + KV cache; tg_bandwidth_util)."
    )
    lines = _depth_lines(cols, depth)
    if not lines:
        return Plot(
            "context",
            title,
            caption,
            note="no data: no runtime, model and dtype ran ok at two or more context depths",
        )
    made = _figure(10.0, 3.4)
    if isinstance(made, str):
        return Plot("context", title, caption, note=made)
    fig, _ = made
    axes = fig.subplots(1, 3)
    for ax, key in zip(axes, CONTEXT_PANELS, strict=True):
        ylabel, scale = registry.axis_of(key).label, registry.axis_of(key).scale
        drawn = 0
        for li, (label, cells) in enumerate(lines):
            pts = [
                (float(c["params"][depth]), v * scale)
                for c in cells
                if (v := _value(c["metrics"].get(key))) is not None
            ]
            if pts:
                drawn += 1
                ax.plot(
                    *zip(*pts, strict=True),
                    "o-",
                    color=PALETTE[li % len(PALETTE)],
                    label=label,
                    markersize=4,
                    linewidth=1.4,
                )
                _ring_contended(ax, cells, depth, key, scale)
            if key == M.TG_TPS:
                _bandwidth_limit(ax, cells, depth, PALETTE[li % len(PALETTE)])
        ax.set_xscale("log", base=2)
        ax.set_xlabel(depth)
        ax.set_ylabel(ylabel)
        if not drawn:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#888")
        _style(ax)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncols=min(3, len(labels)),
            fontsize=8,
            frameon=False,
        )
    return Plot("context", title, caption, _svg(fig, "context", title))


def cold_start_split(cols: Sequence[Column]) -> Plot:
    """Cold start per cell as stacked bars: process start, import, load, first token."""
    title = "Cold start, split"
    caption = (
        "Parent spawn → worker running → runtime imported → model loaded → first token "
        "(harness clock)."
    )
    cells, prefixes, splits = [], [], []
    for col in cols:
        for c in _normal_cells(col):
            parts = [_value(c["metrics"].get(part.name)) for part in COLD_START_PARTS]
            if any(p is not None for p in parts):
                cells.append(c)
                busy = " (contended)" if c.get("contended") else ""
                prefixes.append(f"{col.label}{busy} · ")
                splits.append([p or 0.0 for p in parts])
    bars = list(zip(distinct_labels(cells, prefixes), splits, strict=True))
    if not bars:
        return Plot("cold-start", title, caption, note="no data: no cell recorded a cold start")
    if len(bars) > MAX_BARS:
        caption += f" First {MAX_BARS} of {len(bars)} cells."
        bars = bars[:MAX_BARS]
    made = _figure(8.0, 1.2 + 0.32 * len(bars))
    if isinstance(made, str):
        return Plot("cold-start", title, caption, note=made)
    fig, _ = made
    ax = fig.subplots()
    ys = list(range(len(bars)))[::-1]
    left = [0.0] * len(bars)
    for pi, part in enumerate(COLD_START_PARTS):
        widths = [b[1][pi] * 1e3 for b in bars]
        ax.barh(ys, widths, 0.7, left=left, color=PHASE_COLOURS[pi], label=part.label)
        left = [lft + w for lft, w in zip(left, widths, strict=True)]
    ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
    ax.set_xlabel("ms")
    fig.legend(fontsize=8, frameon=False, ncols=4, loc="outside upper center")
    _style(ax)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    return Plot("cold-start", title, caption, _svg(fig, "cold-start", title))


def upgrade_ratios(ratios: Sequence[Ratio], baseline: str, candidate: str) -> Plot:
    """Candidate / baseline per compared value, log scale, coloured by diff class."""
    title = f"{candidate} against {baseline}"
    caption = (
        "Ratio candidate / baseline per cell and metric (log scale); colour: diff class. "
        "Right of 1 is larger — better for throughput, worse for time and memory."
    )
    pts = [r for r in ratios if math.isfinite(r.ratio) and r.ratio > 0]
    if not pts:
        return Plot("upgrade", title, caption, note="no data: no value measured in both runs")
    if len(pts) > MAX_BARS:
        caption += f" First {MAX_BARS} of {len(pts)} values (regressions first)."
        pts = pts[:MAX_BARS]
    made = _figure(8.0, 1.2 + 0.28 * len(pts))
    if isinstance(made, str):
        return Plot("upgrade", title, caption, note=made)
    fig, _ = made
    ax = fig.subplots()
    ys = list(range(len(pts)))[::-1]
    ax.axvline(1.0, color="#555", linewidth=0.8)
    ax.hlines(ys, 1.0, [p.ratio for p in pts], color="#ccc", linewidth=1.0)
    for cls in dict.fromkeys(p.cls for p in pts):
        sel = [(y, p.ratio) for y, p in zip(ys, pts, strict=True) if p.cls == cls]
        ax.plot(
            [s[1] for s in sel],
            [s[0] for s in sel],
            "o",
            linestyle="none",
            color=CLASS_COLOURS.get(cls, "#555"),
            label=cls,
            markersize=5,
        )
    lo = min(min(p.ratio for p in pts), 0.8)
    hi = max(max(p.ratio for p in pts), 1.25)
    ax.set_xscale("log")
    ax.set_xlim(lo / 1.1, hi * 1.1)
    grid = RATIO_TICKS if hi / lo < 4 else RATIO_TICKS_WIDE
    ticks = [t for t in grid if lo / 1.1 <= t <= hi * 1.1]
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.set_xticks([], minor=True)
    ax.set_yticks(ys, [p.label for p in pts], fontsize=8)
    ax.set_xlabel("candidate / baseline")
    fig.legend(
        fontsize=8,
        frameon=False,
        ncols=7,
        loc="outside upper center",
        title="class",
        title_fontsize=8,
    )
    _style(ax)
    return Plot("upgrade", title, caption, _svg(fig, "upgrade", title))


# --- lifecycle ------------------------------------------------------------------------------

QUANTILE_STYLES = (("p50", "-", "o"), ("p90", "--", "s"), ("p99", ":", "^"))


def _scenario_cells(cols: Sequence[Column], scenario: str) -> list[tuple[str, CellRecord]]:
    """(legend label, cell) of every cell that ran ``scenario``."""
    cells, prefixes = [], []
    for col in cols:
        for _, c in col.cells:
            if scenario_of(c) == scenario:
                cells.append(c)
                prefixes.append(f"{col.label} · ")
    return list(zip(distinct_labels(cells, prefixes), cells, strict=True))


def _levels(metrics: dict[str, Any], prefix: str, suffix: str) -> list[tuple[int, float]]:
    """(concurrency, value) of ``serve_c<N>_<suffix>`` metrics with a value, by concurrency;
    the metric's own ``concurrency`` when it has one, else the N of its name."""
    pts = []
    for key, m in metrics.items():
        found = re.fullmatch(rf"{prefix}c(\d+)_{suffix}", str(key))
        v = _value(m) if isinstance(m, dict) else None
        if not found or v is None:
            continue
        n = m.get("concurrency")
        level = int(n) if isinstance(n, int) and not isinstance(n, bool) else int(found.group(1))
        pts.append((level, v))
    return sorted(pts)


def ttft_vs_concurrency(cols: Sequence[Column]) -> Plot:
    """Server TTFT percentiles and aggregate throughput against concurrent streams."""
    pid, title = "serve-ttft", "Time to first token against concurrency (serve)"
    caption = (
        "The runtime's own server on loopback, client-side clock: TTFT p50 (solid), p90 "
        "(dashed), p99 (dotted) per number of concurrent streaming requests; right: tokens/s "
        "of all streams together (median over rounds, whiskers min–max)."
    )
    series = []
    for label, cell in _scenario_cells(cols, "serve"):
        metrics = as_dict(cell.get("metrics"))
        qs = {q: _levels(metrics, "serve_", f"ttft_{q}_s") for q, _, _ in QUANTILE_STYLES}
        tput = [
            (n, v, as_dict(as_dict(metrics.get(f"serve_c{n}_throughput_tps")).get("stats")))
            for n, v in _levels(metrics, "serve_", "throughput_tps")
        ]
        if any(qs.values()) or tput:
            series.append((label, qs, tput))
    if not series:
        why = "no serve cell measured a TTFT at any concurrency"
        return Plot(pid, title, caption, note=f"no data: {why}")
    made = _figure(9.0, 3.4)
    if isinstance(made, str):
        return Plot(pid, title, caption, note=made)
    fig, _ = made
    ax_t, ax_p = fig.subplots(1, 2)
    levels: set[int] = set()
    for si, (label, qs, tput) in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        for q, line, marker in QUANTILE_STYLES:
            pts = qs[q]
            if pts:
                levels.update(n for n, _ in pts)
                ax_t.plot(
                    [n for n, _ in pts],
                    [v * 1e3 for _, v in pts],
                    linestyle=line,
                    marker=marker,
                    color=colour,
                    markersize=4,
                    linewidth=1.4,
                    label=f"{label} {q}" if len(series) > 1 else q,
                )
        if tput:
            levels.update(n for n, _, _ in tput)
            lo = [max(0.0, v - float(st.get("min", v))) for _, v, st in tput]
            hi = [max(0.0, float(st.get("max", v)) - v) for _, v, st in tput]
            ax_p.errorbar(
                [n for n, _, _ in tput],
                [v for _, v, _ in tput],
                yerr=[lo, hi],
                marker="o",
                color=colour,
                markersize=4,
                linewidth=1.4,
                capsize=2,
                elinewidth=0.8,
                label=label,
            )
    ticks = sorted(levels)
    for ax, ylabel in ((ax_t, "TTFT (ms)"), (ax_p, "tokens/s, all streams")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(n) for n in ticks])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        _style(ax)
    ax_t.set_title("TTFT")
    ax_p.set_title("throughput")
    handles, labels = ax_t.get_legend_handles_labels()
    if handles:
        ax_t.legend(handles, labels, fontsize=7, frameon=False)
    if len(series) > 1:
        fig.legend(
            *ax_p.get_legend_handles_labels(),
            fontsize=8,
            frameon=False,
            loc="outside lower center",
            ncols=min(3, len(series)),
        )
    else:
        fig.suptitle(series[0][0], fontsize=9, color="#444")
    return Plot(pid, title, caption, _svg(fig, pid, title))


def cancel_leak(cols: Sequence[Column]) -> Plot:
    """RSS after each cancel cycle against the first, per cancel mode, with the tolerance."""
    pid, title = "cancel-leak", "Memory over repeated cancels (cancel)"
    caption = (
        "Worker RSS after each counted cancel cycle minus after cycle 1 (OS accounting, gc "
        "collected); the dashed line is the leak tolerance the check holds the last cycle to."
    )
    lines, tolerances = [], set()
    for label, cell in _scenario_cells(cols, "cancel"):
        for key, m in as_dict(cell.get("metrics")).items():
            found = family(Scenario.CANCEL).split(str(key))
            if found is not None and found[1] != "rss_growth_bytes":
                found = None
            series = [
                float(x)
                for x in as_list(as_dict(m).get("rss_after_each"))
                if isinstance(x, int | float) and not isinstance(x, bool)
            ]
            if found and len(series) >= 2:
                lines.append((f"{label} {found[0]}", [x - series[0] for x in series]))
                tol = as_dict(m).get("tolerance_bytes")
                if isinstance(tol, int | float) and not isinstance(tol, bool):
                    tolerances.add(float(tol))
    if not lines:
        why = "no cancel cell recorded RSS after two or more cycles"
        return Plot(pid, title, caption, note=f"no data: {why}")
    made = _figure(7.0, 3.0)
    if isinstance(made, str):
        return Plot(pid, title, caption, note=made)
    fig, _ = made
    ax = fig.subplots()
    top = max(max(ys) for _, ys in lines)
    for li, (label, ys) in enumerate(lines):
        ax.plot(
            range(1, len(ys) + 1),
            [y / 1024 for y in ys],
            "o-",
            color=PALETTE[li % len(PALETTE)],
            markersize=3,
            linewidth=1.2,
            label=label,
        )
    for tol in sorted(tolerances):
        ax.axhline(tol / 1024, color="#c0392b", linestyle="--", linewidth=1.0)
        ax.text(
            1,
            tol / 1024,
            f" tolerance {fmt_bytes(tol)}",
            color="#c0392b",
            fontsize=8,
            va="bottom",
        )
        top = max(top, tol)
    ax.set_ylim(min(0.0, min(min(ys) for _, ys in lines) / 1024) * 1.1, top / 1024 * 1.15)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("cancel cycle")
    ax.set_ylabel("RSS growth vs cycle 1 (KiB)")
    fig.legend(fontsize=8, frameon=False, loc="outside lower center", ncols=min(3, len(lines)))
    _style(ax)
    return Plot(pid, title, caption, _svg(fig, pid, title))


# --- history across runs --------------------------------------------------------------------

STEP_MARKERS = {"-": ("v", "#e67e22"), "+": ("^", "#27ae60"), "!": ("*", "#c0392b")}
STEP_MARKERS["*"] = ("*", "#2e86c1")


@dataclass(frozen=True)
class HistPoint:
    """One run's figure on a history line: median and the min–max of its repetitions."""

    x: int  # the run's place in the series
    median: float
    lo: float
    hi: float
    contended: bool = False
    comparable: bool = True  # with the previous point (fixture content, params, machine)
    mark: str = ""  # the step from the previous run: - + ! * (rtmatrix diff's marks)


@dataclass(frozen=True)
class HistLine:
    label: str
    metric: str
    points: tuple[HistPoint, ...]


@dataclass(frozen=True)
class HistPanel:
    metric: str
    ylabel: str
    scale: float

    @classmethod
    def of(cls, metric: str) -> HistPanel:
        """The panel of a metric, labelled and scaled as the metric registry's plot axis."""
        axis = registry.axis_of(metric)
        return cls(str(metric), axis.label, axis.scale)


HIST_PANELS = tuple(HistPanel.of(m) for m in (M.PP_TPS, M.TG_TPS, M.PEAK_RSS_OS, M.COLD_TOTAL))


def _segments(points: Sequence[HistPoint]) -> list[list[HistPoint]]:
    """Runs of comparable, uncontended points: a line is drawn through each, not across."""
    out: list[list[HistPoint]] = []
    for p in points:
        if p.contended:
            continue
        if not out or not p.comparable:
            out.append([])
        out[-1].append(p)
    return out


def _draw_line(ax: Axes, line: HistLine, colour: str, scale: float) -> None:
    for seg in _segments(line.points):
        xs, ys = [p.x for p in seg], [p.median * scale for p in seg]
        ax.plot(xs, ys, "o-", color=colour, markersize=4, linewidth=1.4)
    for p in line.points:
        y = p.median * scale
        err = [[max(0.0, y - p.lo * scale)], [max(0.0, p.hi * scale - y)]]
        face = "white" if p.contended else colour
        edge = CONTENDED_COLOUR if p.contended else colour
        size = 5 if p.contended else 4
        bar = ax.errorbar([p.x], [y], yerr=err, fmt="o", color=colour, elinewidth=0.8, capsize=2)
        bar.lines[0].set(markerfacecolor=face, markeredgecolor=edge, markersize=size)
        if not p.comparable:
            ax.plot([p.x], [y], "x", color="#555", markersize=9, mew=1.5)
        if p.mark in STEP_MARKERS:
            marker, c = STEP_MARKERS[p.mark]
            ax.plot([p.x], [y], marker, color=c, markersize=11, mfc="none", mew=1.6)


def _history_legend(fig: Figure, lines: Sequence[HistLine]) -> None:
    from matplotlib.lines import Line2D

    labels = list(dict.fromkeys(ln.label for ln in lines))
    handles = [
        Line2D([], [], color=PALETTE[i % len(PALETTE)], marker="o", label=lb)
        for i, lb in enumerate(labels)
    ]
    keys = (
        ("o", CONTENDED_COLOUR, "contended (not comparable)"),
        ("x", "#555", "not comparable with the run before"),
        ("v", STEP_MARKERS["-"][1], "significantly worse"),
        ("^", STEP_MARKERS["+"][1], "significantly better"),
        ("*", STEP_MARKERS["!"][1], "verdict / outcome changed"),
    )
    handles += [
        Line2D([], [], ls="none", marker=m, mfc="none" if m != "x" else c, color=c, label=lb)
        for m, c, lb in keys
    ]
    fig.legend(handles=handles, fontsize=7.5, frameon=False, loc="outside lower center", ncols=4)


MIN_SPAN = 0.10  # a history panel spans at least ±5 % of its level: noise does not look like steps


def _history_ylim(ax: Axes) -> None:
    """Autoscaled (so each run's interval is visible), but never narrower than ``MIN_SPAN``."""
    lo, hi = ax.get_ylim()
    mid = (lo + hi) / 2
    if mid > 0 and hi - lo < MIN_SPAN * mid:
        ax.set_ylim(mid * (1 - MIN_SPAN / 2), mid * (1 + MIN_SPAN / 2))


def history_plot(
    pid: str,
    title: str,
    runs: Sequence[str],
    lines: Sequence[HistLine],
    events: Sequence[tuple[int, str]] = (),
) -> Plot:
    """A row's figures across runs: one panel per metric, one line per fixture; x is the run
    (its runtime version and date), the point the median, the bar the min–max of its
    repetitions. ``events`` (run index, text) draw a dotted line where a verdict changed."""
    caption = (
        "x: runs oldest first, labelled by the row's version and date; points: medians, bars: "
        "min–max of the repetitions. Hollow red: the host was busy (contended), not joined to "
        "the line; ×: not comparable with the run before (the line breaks); ▼/▲: rtmatrix diff "
        "found the step significantly worse/better; ★ and dotted lines: verdict or outcome "
        "changed."
    )
    panels = [p for p in HIST_PANELS if any(ln.metric == p.metric for ln in lines)]
    if not panels:
        return Plot(pid, title, caption, note="no data: no run measured a tracked figure")
    made = _figure(min(12.0, 3.2 * len(panels) + 1.0), 3.6)
    if isinstance(made, str):
        return Plot(pid, title, caption, note=made)
    fig, _ = made
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = list(dict.fromkeys(ln.label for ln in lines))
    for ax, panel in zip(axes, panels, strict=True):
        for ln in (ln for ln in lines if ln.metric == panel.metric):
            colour = PALETTE[labels.index(ln.label) % len(PALETTE)]
            _draw_line(ax, ln, colour, panel.scale)
        for x, _ in events:
            ax.axvline(x, color="#c0392b", linestyle=":", linewidth=0.9)
        # more than three runs: the version/date labels are tilted so they do not overlap
        tilt = {"rotation": 35, "ha": "right"} if len(runs) > 3 else {}
        ax.set_xticks(range(len(runs)), list(runs), fontsize=7, **tilt)
        ax.set_xlim(-0.5, len(runs) - 0.5)
        ax.set_ylabel(panel.ylabel)
        _history_ylim(ax)
        _style(ax)
    for x, text in events:
        where = (x, 1.0)
        style = {"fontsize": 7, "color": "#c0392b", "rotation": 90, "va": "top", "ha": "right"}
        axes[0].annotate(text, where, xycoords=("data", "axes fraction"), **style)
    _history_legend(fig, lines)
    return Plot(pid, title, caption, _svg(fig, pid, title))


# --- the answer's trade-off: quality against speed ------------------------------------------

EXCLUDED_COLOUR = "#b0b0b0"
FRONT_COLOUR = "#222222"


@dataclass(frozen=True)
class Point:
    """One candidate on the quality-vs-speed chart."""

    label: str
    tg: float
    quality: float
    rss_mib: float | None
    eligible: bool
    front: bool
    hover: str


def _quality_metric(cands: Sequence[Candidate]) -> str | None:
    """KLD against the reference where a candidate has it, else same-top %, else none."""
    for metric in (M.KLD_MEAN, M.SAME_TOP):
        if any(c.figures[metric].number is not None for c in cands if metric in c.figures):
            return metric
    return None


def _points(model: ModelSelection, metric: str) -> list[Point]:
    out = []
    for c in (*model.ranked, *model.excluded):
        tg, q = c.figures[M.TG_TPS].number, c.figures[metric].number
        if tg is None or q is None:
            continue
        rss = c.figures[M.PEAK_RSS_OS].number
        mib = rss / 2**20 if rss is not None else None
        why = "; ".join(f.text for f in c.failures)
        place = f"place {c.place}" + (f" (Pareto layer {c.layer})" if c.layer else "")
        hover = f"{c.label}: " + (f"excluded — {why}" if why else place)
        out.append(Point(c.label, tg, q, mib, c.eligible, c.eligible and c.layer == 1, hover))
    return out


def _draw_points(ax: Axes, points: Sequence[Point]) -> None:
    """One artist per candidate (its SVG group gets a ``<title>`` for hover), area ∝ memory."""
    biggest = max((p.rss_mib or 0.0 for p in points), default=0.0) or 1.0
    by_speed = sorted(range(len(points)), key=lambda i: points[i].tg)
    below = {i for n, i in enumerate(by_speed) if n % 2}  # neighbours' labels alternate
    said: set[str] = set()
    for i, p in enumerate(points):
        size = 40.0 + 260.0 * (p.rss_mib or 0.0) / biggest
        colour = PALETTE[i % len(PALETTE)] if p.eligible else EXCLUDED_COLOUR
        edge = FRONT_COLOUR if p.front else "white"
        kind = "on the Pareto front (outlined)" if p.front else (
            "" if p.eligible else "excluded (grey; hover for why)")  # fmt: skip
        label = kind if kind and kind not in said else "_nolegend_"
        said.add(kind)
        ax.scatter([p.tg], [p.quality], s=size, color=colour, edgecolors=edge, linewidths=1.2,
                   alpha=0.9 if p.eligible else 0.6, gid=f"cand-{i}", zorder=3,
                   label=label)  # fmt: skip
        memory = f" · {p.rss_mib:.0f} MiB" if p.rss_mib is not None else ""
        ax.annotate(f"{p.label}{memory}", (p.tg, p.quality), fontsize=7,
                    xytext=(6, -11 if i in below else 5), textcoords="offset points",
                    color="#333" if p.eligible else "#888")  # fmt: skip
    front = sorted((p for p in points if p.front), key=lambda p: p.tg)
    if len(front) > 1:
        ax.plot([p.tg for p in front], [p.quality for p in front], "--", color=FRONT_COLOUR,
                linewidth=1.0, zorder=2, label="the front, joined")  # fmt: skip


def _limits(ax: Axes, metric: str, c: Constraints) -> None:
    """The constraints on the axes: the quality limit, the TG floor, negligible KLD."""
    lim = c.limit("max_kld" if metric == M.KLD_MEAN else "min_same_top_pct")
    if lim is not None and lim.at is None:
        ax.axhline(lim.value, color="#c0392b", linestyle=":", linewidth=1.0,
                   label=f"{'max_kld' if metric == M.KLD_MEAN else 'min_same_top_pct'} "
                   f"{lim.value:g}")  # fmt: skip
    tg = c.limit("min_tg_tps")
    if tg is not None and tg.at is None:
        ax.axvline(tg.value, color="#e67e22", linestyle=":", linewidth=1.0,
                   label=f"min_tg_tps {tg.value:g}")  # fmt: skip
    if metric == M.KLD_MEAN and c.negligible_kld > 0:
        ax.axhspan(0.0, c.negligible_kld, color="#27ae60", alpha=0.08,
                   label=f"negligible KLD (≤ {c.negligible_kld:g}: ties)")  # fmt: skip


def _with_hover(svg: str, pid: str, points: Sequence[Point]) -> str:
    """Each candidate's group gets a ``<title>``: its place, or why it was excluded."""
    for i, p in enumerate(points):
        tag = f'<g id="{pid}-cand-{i}">'
        title = p.hover.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        svg = svg.replace(tag, f"{tag}<title>{title}</title>", 1)
    return svg


def quality_speed(model: ModelSelection, constraints: Constraints, index: int = 0) -> Plot:
    """The answer's trade-off for one model: each candidate's quality (KLD against the
    reference, lower is better; else same-top %) against its decode speed (TG), memory as the
    marker's area, the Pareto front outlined and joined, excluded candidates grey with their
    reason on hover, and the constraints drawn where they bound an axis."""
    pid = f"answer-{index}"
    title = f"Quality against speed for {model.model}"
    metric = _quality_metric((*model.ranked, *model.excluded))
    caption = ("x: decode speed (TG tok/s, harness clock, higher is better); marker area: peak "
               "memory; black outline and dashed line: the Pareto front over quality × speed × "
               "memory; grey: excluded (hover for why); dotted: the constraints.")  # fmt: skip
    if metric is None:
        return Plot(pid, title, caption, note="no data: no candidate has a quality figure "
                    "(KLD or same-top against a reference)")  # fmt: skip
    points = _points(model, metric)
    if not points:
        return Plot(pid, title, caption, note="no data: no candidate has both TG and quality")
    made = _figure(7.0, 3.8)
    if isinstance(made, str):
        return Plot(pid, title, caption, note=made)
    fig, _ = made
    ax = fig.subplots()
    _limits(ax, metric, constraints)
    _draw_points(ax, points)
    if metric == M.KLD_MEAN:
        ax.set_yscale("symlog", linthresh=max(constraints.negligible_kld, 1e-6))
        ax.set_ylabel("KLD vs reference (nats, lower is better)")
    else:
        ax.set_ylabel("same top token vs reference (%, higher is better)")
    ax.set_xlabel("TG tok/s (higher is better)")
    ax.set_xlim(left=0, right=max(p.tg for p in points) * 1.35)
    _style(ax)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, frameon=False, loc="outside lower center",
                   ncols=min(4, len(labels)))  # fmt: skip
    return Plot(pid, title, caption, _with_hover(_svg(fig, pid, title), pid, points))

