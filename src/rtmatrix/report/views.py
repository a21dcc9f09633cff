"""View models for the report: plain data the template lays out, built from run records.

Nothing here formats HTML; every string is escaped by the template. Each value carries its
source (the metric's own ``source``, or ``machine`` / ``matrix`` / ``evidence`` for values the
report summarises from the run's provenance, its cells' outcomes or the runtime's own evidence),
and an unavailable value carries its reason as a numbered footnote.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from rtmatrix.metrics import registry
from rtmatrix.names import M, Scenario
from rtmatrix.options import options_text
from rtmatrix.outcome import Source, Verdict
from rtmatrix.report.architectures import cell_state
from rtmatrix.results.columns import (
    Column,
    Rank,
    Spread,
    as_dict,
    as_list,
    cell_label,
    fixture_label,
    headline_cells,
    normal_of,
    params_label,
    row_key,
    scenario_of,
    varying_params,
)
from rtmatrix.results.records import CellRecord, MetricRecord, ParityRecord, RunRecord, value_of
from rtmatrix.runtimes.llama_cpp.records import legacy_reference_tool
from rtmatrix.scenarios import SPECS, family

# Where a shown value came from: the metric sources, plus what the report derives itself.
SOURCES: dict[str, tuple[str, str]] = {
    Source.RUNTIME_COUNTER: ("rc", "the runtime's own counters"),
    Source.HARNESS_CLOCK: ("hc", "rtmatrix's clock around the runtime call"),
    Source.OS_ACCOUNTING: ("os", "operating-system accounting (RSS, ru_maxrss)"),
    Source.PACKAGE_METADATA: ("pkg", "the installed distribution's metadata"),
    Source.MODELLED: ("≈", "modelled, not measured"),
    Source.HARNESS_COMPARISON: (
        "cmp",
        "computed by rtmatrix from the runtime's logits against the numpy reference",
    ),
    Source.DERIVED: (
        "drv",
        "derived by rtmatrix from the cell's figures and this host's measured limits",
    ),
    Source.UNAVAILABLE: ("n/a", "unavailable: the reason is on hover and in the notes"),
    "machine": ("host", "the host probe of the run (platform, /proc/cpuinfo)"),
    "matrix": ("mx", "summarised from the cells' outcomes and parameters"),
    "evidence": ("ev", "reported by the runtime (log lines, device lists, placement)"),
    "reference-tool": (
        "ref",
        "the runtime's own benchmark and quality tools, same file and settings",
    ),
    "analysis": (
        "an",
        "rtmatrix's partition analysis of the runtime's graph, EP assignment, measured tensor "
        "shapes and profiling (evidence.partitions)",
    ),
}
# The canonical fixture family is one llama-architecture decoder (fixtures/model.py).
FIXTURE_ARCH = "llama"
MAX_LISTED = 6  # per-cell values listed in a selection entry before it shows a range instead
# the cold-start split's parts and labels, from the metric registry
COLD_START = tuple((s.name, s.label) for s in registry.in_group(registry.GROUP_COLD_START))
VERDICT_ORDER = (Verdict.FAIL, Verdict.WARN, Verdict.PASS, Verdict.UNAVAILABLE)


COUNTED = {"tokens", "chunks", "streams", "requests", "cycles"}  # "1 token", "2 tokens"


def fmt_bytes(value: float) -> str:
    """Bytes for people: MiB from 1 MiB up, KiB from 1 KiB, else bytes."""
    if abs(value) >= 2**20:
        return f"{value / 2**20:.1f} MiB"
    if abs(value) >= 2**10:
        return f"{value / 2**10:.1f} KiB"
    return f"{value:.0f} B"


def fmt_value(metric: Mapping[str, Any]) -> str:
    """A metric's value in its unit, for people."""
    value, unit = metric.get("value"), str(metric.get("unit") or "")
    if value is None:
        return "unavailable"
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)  # free-form: shown as it came, never a crash
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if unit == "bytes":
        return fmt_bytes(value)
    if unit == "bytes/cycle":
        return f"{fmt_bytes(value)}/cycle"
    if unit == "s":
        if value and abs(value) < 1e-3:
            return f"{value * 1e6:.1f} µs"
        return f"{value * 1e3:.2f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "tokens/s":
        return f"{value:,.0f}"
    if unit == "http-status":
        return f"HTTP {value:g}"
    if unit in COUNTED and value == 1:
        unit = unit[:-1]
    return f"{value:g} {unit}".strip()


class Notes:
    """Numbered footnotes, one per distinct reason."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def number(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1


@dataclass(frozen=True)
class Badge:
    """A small mark after a value: contended, best, within noise, spread."""

    text: str
    css: str
    title: str = ""


@dataclass(frozen=True)
class Value:
    """One shown value: text, source marker, hover text, footnote number when unavailable."""

    text: str
    source: str
    title: str = ""
    note: int | None = None
    css: str = ""
    badges: tuple[Badge, ...] = ()

    @property
    def mark(self) -> str:
        return SOURCES.get(self.source, (self.source, ""))[0]

    @property
    def unavailable(self) -> bool:
        return self.note is not None


@dataclass(frozen=True)
class Part:
    name: str
    value: Value
    detail: bool = False  # shown on demand only (the matrix's "all figures" switch)


@dataclass(frozen=True)
class Item:
    """One line of a selection entry: an optional label (which cell) and its values."""

    label: str
    parts: tuple[Part, ...]
    title: str = ""  # hover on the label: e.g. why the figures come from an older run


@dataclass(frozen=True)
class TableRow:
    """One row of a panel table: a label (with optional help under it) and one value a column."""

    label: str
    cells: tuple[Value, ...]
    help: str = ""
    css: str = ""
    data: str = ""  # a data-row attribute, for tests and readers' tools


@dataclass(frozen=True)
class Table:
    """A small table of values for the lifecycle and partition panels."""

    name: str
    head: tuple[str, ...]  # the label column's heading first
    rows: tuple[TableRow, ...]
    caption: str = ""


def text(value: str, title: str = "", css: str = "") -> Value:
    """A plain label or word in a table: no source marker."""
    return Value(value, "", title, None, css)


@dataclass(frozen=True)
class Row:
    label: str
    help: str
    entries: list[list[Item]]  # one per column


@dataclass(frozen=True)
class GridRow:
    key: str
    label: str
    detail: str
    cells: list[tuple[str, CellRecord] | None]  # one per column


def unavailable(reason: str, notes: Notes, text: str = "unavailable") -> Value:
    return Value(text, Source.UNAVAILABLE, reason, notes.number(reason), "na")


def metric_value(
    metric: MetricRecord | Mapping[str, Any] | None, notes: Notes, name: str = ""
) -> Value:
    """A metric dict -> Value with its source; hover shows method and spread. (The panels also
    show figures they derive in the shape of a metric record: hence any mapping.)"""
    if metric is None:
        return unavailable(f"the cell recorded no {name or 'value'}", notes, "—")
    if not isinstance(metric, dict):
        return Value(str(metric), "", f"{name}: not a metric record")
    if metric.get("value") is None:
        return unavailable(str(metric.get("reason") or "no reason recorded"), notes)
    hover = [str(metric[k]) for k in ("method", "field") if metric.get(k)]
    stats = metric.get("stats")
    if isinstance(stats, dict) and stats.get("n") and "min" in stats and "max" in stats:
        lo, hi = (
            fmt_value(metric | {"value": stats["min"]}),
            fmt_value(metric | {"value": stats["max"]}),
        )
        hover.append(f"median of n={stats['n']} (min {lo}, max {hi})")
    source = str(metric.get("source"))
    css = "modelled" if source == Source.MODELLED else ""
    return Value(fmt_value(metric), source, "; ".join(hover), None, css)


# --- figures of a cell: contention, rank, spread -------------------------------------------

#: rtmatrix ÷ the reference tool per llama.cpp cell (issue 14); not in ``names.M`` yet
PP_REFERENCE_RATIO = M.PP_REFERENCE_RATIO
TG_REFERENCE_RATIO = M.TG_REFERENCE_RATIO
#: figures that do not depend on how busy the host was (read from the package's metadata)
LOAD_FREE = {Source.PACKAGE_METADATA}


def contention_badge(cell: CellRecord) -> Badge | None:
    """The mark every figure of a contended cell carries: the host was busy outside it."""
    if not cell.get("contended"):
        return None
    busy = as_dict(cell["metrics"].get(M.HOST_BUSY_CORES))
    cores, limit = busy.get("value"), busy.get("threshold_cores")
    said = f"{cores:.2f} cores" if isinstance(cores, int | float) else "CPU"
    text = f"contended · {said} busy" if isinstance(cores, int | float) else "contended"
    title = (
        f"the host kept {said} busy outside this cell during its counted repetitions"
        + (f" (threshold {limit:g} cores)" if isinstance(limit, int | float) else "")
        + ": its figures are not comparable and not ranked"
    )
    return Badge(text, "contended", title)


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def spread_badge(spread: Spread | None) -> Badge | None:
    """The coefficient of variation beside a median: repetitions, and runs where known."""
    if spread is None or (spread.within_cv is None and spread.between_cv is None):
        return None
    texts, said = [], []
    if spread.within_cv is not None:
        texts.append(f"±{_pct(spread.within_cv)}")
        said.append(f"{_pct(spread.within_cv)} over {spread.n_samples} repetitions in one process")
    if spread.between_cv is not None:
        texts.append(f"runs ±{_pct(spread.between_cv)}")
        said.append(
            f"{_pct(spread.between_cv)} run to run over the medians of {spread.n_runs} "
            "comparable runs that were not contended"
        )
    title = "coefficient of variation (sd / mean): " + "; ".join(said)
    return Badge(" · ".join(texts), "cv", title)


def rank_badges(rank: Rank | None) -> list[Badge]:
    """Best, within noise of the best, or its place; and a swing larger than its lead."""
    if rank is None:
        return []
    if rank.best:
        out = [Badge("best", "best", f"best of {rank.of} rows; {rank.test}")]
    elif rank.tie:
        out = [Badge("≈ best", "tie", f"within noise of the best: {rank.test}")]
    elif rank.untested:
        out = [Badge(f"#{rank.place}?", "untested", f"cannot be told from the best: {rank.test}")]
    else:
        out = [Badge(f"#{rank.place} of {rank.of}", "behind", rank.test)]
    if rank.swings:
        out.append(Badge("swings > lead", "swing", rank.swings))
    return out


def figure_value(col: Column, cell: CellRecord, key: str, notes: Notes) -> Value:
    """A cell's metric as shown in the selection matrix: its value and source, marked when the
    cell ran contended, with its rank among the rows and its spread when known."""
    metric = cell["metrics"].get(key)
    value = metric_value(metric, notes, key)
    badges = [cell_badge(cell, metric)]
    badges += rank_badges(col.ranks.get((row_key(cell), key)))
    badges.append(spread_badge(col.spreads.get((row_key(cell), key))))
    return replace(value, badges=tuple(b for b in badges if b is not None))


def cell_badge(cell: CellRecord, metric: MetricRecord | None) -> Badge | None:
    """The contention mark for one of the cell's figures (none for metadata figures, nor where
    there is no figure: an unavailable value carries its reason instead)."""
    if not isinstance(metric, dict) or metric.get("value") is None:
        return None
    if metric.get("source") in LOAD_FREE:
        return None
    return contention_badge(cell)


def marked_metric(metric: MetricRecord | None, notes: Notes, name: str, cell: CellRecord) -> Value:
    """A metric of the evidence panel, with the contention mark of its cell."""
    value = metric_value(metric if isinstance(metric, dict) else None, notes, name)
    badge = cell_badge(cell, metric)
    return replace(value, badges=(badge,)) if badge else value


def share_value(cell: CellRecord, key: str, notes: Notes) -> Value:
    """A derived utilization as ``41 % of this host's measured bandwidth``, inputs on hover."""
    metric = as_dict(cell["metrics"].get(key))
    value = metric_value(metric or None, notes, key)
    if value.unavailable or not isinstance(metric.get("value"), int | float):
        return value
    hover = [str(metric[k]) for k in ("method", "formula") if metric.get(k)]
    if isinstance(metric.get("limit_tps"), int | float):
        hover.append(f"this host's limit for this cell: {metric['limit_tps']:,.0f} tok/s")
    text = f"{100 * float(metric['value']):.0f} % of {metric.get('versus', 'the host limit')}"
    if metric.get("host_limits_contended"):  # the limit reads low: the share reads high
        text += " (limit measured on a busy host)"
        hover.append(f"{metric.get('host_limits_busy_cores', 0):.2f} cores were busy outside "
                     "the host-limits probe")  # fmt: skip
    return replace(value, text=text, title="; ".join(hover))


def ratio_value(cell: CellRecord, key: str, ref_key: str, own_key: str, notes: Notes) -> Value:
    """rtmatrix ÷ the runtime's own benchmark tool, as ``0.86×``, with both figures on hover."""
    metrics = cell["metrics"]
    metric = metrics.get(key)
    value = metric_value(metric, notes, key)
    if value.unavailable or not isinstance(as_dict(metric).get("value"), int | float):
        return value
    ref, own = as_dict(metrics.get(ref_key)), as_dict(metrics.get(own_key))
    hover = [f"rtmatrix ÷ {reference_tool(cell)}"]
    if ref.get("value") is not None and own.get("value") is not None:
        hover.append(f"{own_key} {fmt_value(own)} ÷ {ref_key} {fmt_value(ref)}")
    hover += [f"{k}: {ref[k]}" for k in ("tool", "tool_version", "command") if ref.get(k)]
    badge = cell_badge(cell, metric)
    return replace(
        value,
        text=f"{float(as_dict(metric)['value']):.2f}×",
        title="; ".join(hover),
        badges=(badge,) if badge else (),
    )


def reference_tool(cell: CellRecord) -> str:
    """The reference tool's name as its figures record it (``tool``); where no figure names it
    (the tool never ran), as the runtime's home knows it for its rows, else "reference tool"."""
    metrics = as_dict(cell.get("metrics"))
    for key in (M.PP_TPS_REFERENCE, M.TG_TPS_REFERENCE):
        tool = as_dict(metrics.get(key)).get("tool")
        if isinstance(tool, str) and tool:
            return tool
    return legacy_reference_tool(str(cell.get("runtime", ""))) or "reference tool"


# --- columns and labels --------------------------------------------------------------------


def distinct_labels(cells: list[CellRecord], prefix: list[str]) -> list[str]:
    """``prefix[i]`` + fixture label, plus the params that tell same-labelled cells apart."""
    base = [f"{p}{fixture_label(c)}" for p, c in zip(prefix, cells, strict=True)]
    out = []
    for label, cell in zip(base, cells, strict=True):
        twins = [c for b, c in zip(base, cells, strict=True) if b == label]
        vary = varying_params(twins)
        out.append(f"{label} {params_label(cell, vary)}" if vary else label)
    return out


# --- the selection matrix ------------------------------------------------------------------


def pick_item(col: Column, cell: CellRecord, label: str, parts: tuple[Part, ...]) -> Item:
    """An entry line; it names the run its figures come from when that is an older one."""
    pick = col.picks.get(str(cell["key"]))
    if pick is None or not pick.why:
        return Item(label, parts)
    return Item(f"{label} · older run ({pick.version})", parts, pick.why)


def _per_cell(
    col: Column, notes: Notes, parts: Callable[[CellRecord], list[Part]], what: str
) -> list[Item]:
    cells = headline_cells(col)
    if not cells:
        return [Item("", (Part("", _no_cells(col, notes, what)),))]
    vary = varying_params(cells)
    items = [pick_item(col, c, cell_label(c, vary), tuple(parts(c))) for c in cells]
    if len({tuple(p.value for p in it.parts) for it in items}) == 1:
        # the same everywhere (e.g. one unavailable reason); a picked older run stays named
        first = items[0]
        return [Item(first.label if first.title else "", first.parts, first.title)]
    grouped = collapse(items, len(cells))
    if len(grouped) > MAX_LISTED:
        return _ranges(items, len(cells))
    return grouped


def collapse(items: Sequence[Item], total: int) -> list[Item]:
    """Differences, not repetitions: the items that show the same values (from the same run)
    as one line naming how many cells share it — ``all 12 cells`` when every cell does, the
    cells on hover — and each other item as it is, in first-seen order."""
    groups: dict[tuple[tuple[Part, ...], str], list[Item]] = {}
    for it in items:
        groups.setdefault((it.parts, it.title), []).append(it)
    return [_shared_item(same, total) for same in groups.values()]


def _shared_item(same: Sequence[Item], total: int) -> Item:
    first = same[0]
    if len(same) == 1:
        return first
    label = f"all {total} cells" if len(same) == total else f"{len(same)} of {total} cells"
    names = ", ".join(dict.fromkeys(it.label for it in same))
    return Item(label, first.parts, f"{first.title}; {names}" if first.title else names)


def _ranges(items: list[Item], n: int) -> list[Item]:
    """Too many cells to list: the range of each part, naming the cells at either end."""
    out = []
    for i, part in enumerate(items[0].parts):
        shown = [(it.label, it.parts[i].value) for it in items
                 if i < len(it.parts) and not it.parts[i].value.unavailable]  # fmt: skip
        if not shown:
            out.append(Item("", (part,)))
            continue
        text = f"{shown[0][1].text} … {shown[-1][1].text}" if len(shown) > 1 else shown[0][1].text
        title = "; ".join(f"{label}: {v.text}" for label, v in shown)
        value = Value(text, shown[0][1].source, title)
        out.append(Item(f"{len(shown)} of {n} cells", (Part(part.name, value),)))
    return out


def _no_cells(col: Column, notes: Notes, what: str) -> Value:
    if col.info.get("error"):
        return unavailable(f"{col.runtime}: {col.info['error']}", notes)
    if not col.cells:
        return unavailable(f"{col.runtime} has no cells in run {col.run['run_id']}", notes)
    why = "failing-model variants or lifecycle scenarios"
    return unavailable(f"{col.runtime} ran only {why}: no {what}", notes)


def _first_metric(col: Column, key: str, notes: Notes) -> list[Item]:
    """A per-runtime metric (package size, license): the distinct values over its cells."""
    values = list(
        dict.fromkeys(metric_value(c["metrics"].get(key), notes, key) for _, c in col.cells)
    )
    measured = [v for v in values if not v.unavailable]
    if not values:
        return [Item("", (Part("", _no_cells(col, notes, key)),))]
    return [Item("", (Part("", v),)) for v in (measured or values[:1])]


def _os_chip(col: Column, notes: Notes) -> list[Item]:
    m = col.machine
    ram = f"{m['ram_bytes'] / 2**30:.1f} GiB" if m.get("ram_bytes") else "? GiB"
    host = Value(
        f"{m.get('os_release') or m.get('os', '?')} · {m.get('arch', '?')} · "
        f"{m.get('cpu_model') or '?'} · {m.get('cores_logical', '?')} cores · {ram}",
        "machine",
        f"kernel {m.get('kernel')}; ISA features: {', '.join(m.get('cpu_features') or [])}; "
        f"Python {m.get('python')}",
    )
    items = [Item("", (Part("", host),))]
    if isinstance(m.get("gpus"), list):
        names = [str(g.get("name") or g.get("vendor")) for g in m["gpus"] if isinstance(g, dict)]
        how = str(m.get("gpu_detection") or "")
        value = Value(", ".join(names) or "none found", "machine", how)
        items.append(Item("GPUs", (Part("", value),)))
    devices = []
    for _, c in col.cells:
        for d in as_list(c["evidence"].get("devices")):
            if isinstance(d, dict):
                named = d.get("name") or d.get("error")
                if not named and d.get("ep"):  # ONNX Runtime's EP devices
                    named = f"{d['ep']} ({d.get('type') or '?'}, {d.get('vendor') or '?'})"
                text = str(named or d)
                text += f" ({d['description']})" if d.get("description") else ""
                devices.append(text)
            else:
                devices.append(str(d))
    if devices:
        value = Value(", ".join(dict.fromkeys(devices)), "evidence", "devices the runtime lists")
        items.append(Item("devices", (Part("", value),)))
    return items


def _architecture(col: Column, notes: Notes) -> list[Item]:
    archs: dict[str, list[str]] = {}
    for _, c in col.cells:
        fx = c["fixture"]
        if fx.get("architecture"):  # a converted checkpoint: what its conversion made of it
            state = cell_state(c)
            archs.setdefault(str(fx["architecture"]), []).append(
                f"{fixture_label(c)}: {c['verdict']} ({state.state}: {state.text})"
            )
            continue
        arch = c["evidence"].get("architecture")
        if arch is None and fx.get("model") and fx.get("variant") is None:
            arch = FIXTURE_ARCH
        if arch is None or c["verdict"] == Verdict.UNAVAILABLE:
            continue
        archs.setdefault(str(arch), []).append(f"{fixture_label(c)}: {c['verdict']}")
    if not archs:
        return [Item("", (Part("", _no_cells(col, notes, "canonical-fixture cells")),))]
    items = []
    for arch, seen in archs.items():
        ok = sum(1 for s in seen if s.endswith(Verdict.PASS))
        text = f"{arch} ({ok}/{len(seen)} cells PASS)"
        items.append(Item("", (Part("", Value(text, "matrix", "; ".join(seen))),)))
    for _, c in col.cells:
        if c["fixture"].get("variant") == "unknown-arch":
            text = f"unknown architecture → {c['outcome']['status']} ({c['verdict']})"
            value = Value(text, "matrix", str(c["outcome"].get("message", "")))
            items.append(Item("", (Part("", value),)))
    return items


def _max_context(col: Column, notes: Notes) -> list[Item]:
    cells = normal_of(col)
    passed = [c["params"].get("n_ctx") for c in cells if c["verdict"] == Verdict.PASS]
    tried = [c["params"].get("n_ctx") for c in cells]
    ctx_ok = [n for n in passed if isinstance(n, int)]
    ctx_tried = [n for n in tried if isinstance(n, int)]
    if not ctx_ok:
        why = "no cell passed" if ctx_tried else "no cell set n_ctx"
        return [Item("", (Part("", unavailable(f"{col.runtime}: {why}", notes)),))]
    text = f"{max(ctx_ok)} tokens"
    title = f"largest n_ctx that passed; tried {sorted(set(ctx_tried))}"
    if max(ctx_tried) == max(ctx_ok):
        title += " (the limit may be higher: no larger context was tried)"
    return [Item("", (Part("", Value(text, "matrix", title)),))]


def _by_dtype(col: Column) -> dict[str, list[CellRecord]]:
    """The column's ordinary cells grouped by dtype (a user's file: ``native``)."""
    by_dtype: dict[str, list[CellRecord]] = {}
    for c in normal_of(col):
        by_dtype.setdefault(str(c["fixture"].get("dtype") or "native"), []).append(c)
    return by_dtype


def _quant(col: Column, notes: Notes) -> list[Item]:
    by_dtype = _by_dtype(col)
    if not by_dtype:
        return [Item("", (Part("", _no_cells(col, notes, "quantization")),))]
    items = []
    for dtype, cells in by_dtype.items():
        verdicts = [str(c["verdict"]) for c in cells]
        worst = next((v for v in VERDICT_ORDER if v in verdicts), Verdict.UNAVAILABLE)
        detail = "; ".join(
            f"{fixture_label(c)} {params_label(c)}: {c['outcome']['status']}" for c in cells
        )
        value = Value(f"{worst}", "matrix", detail, None, f"v-{worst}")
        items.append(Item(dtype, (Part("", value),)))
    return items


def _dtype_settings(cells: list[CellRecord], row_opts: str) -> Value:
    """What one dtype of a row needed on this host: its row's settings, or a control's."""
    statuses = [str(c["outcome"]["status"]) for c in cells]
    numerics = [c for c in cells if c.get("numerics_control")]
    if numerics:  # the precision the host chose by default, and what forced the requested one
        ctl = as_dict(numerics[0].get("numerics_control"))
        opts = options_text(as_dict(ctl.get("options")))
        title = str(numerics[0].get("verdict_reason") or "")
        held = "holds" if ctl.get("diagnosed") else "does not help"
        default = numerics[0].get("numerics_mark") or "parity failed"
        text = f"{opts} for the requested precision ({held}; default: {default})"[:220]
        css = "v-WARN" if ctl.get("diagnosed") else "v-FAIL"
        return Value(text, "matrix", title, None, css)
    controls = [c for c in cells if c.get("control")]
    rescued = [c for c in controls if c.get("diagnosed")]
    as_set = f"as configured ({row_opts})" if row_opts else "defaults"
    if rescued:
        opts = options_text(as_dict(rescued[0]["control"].get("options")))
        title = str(rescued[0].get("verdict_reason") or "")
        return Value(f"needs {opts} (crashes {'with ' + row_opts if row_opts else 'by default'})",
                     "matrix", title, None, "v-WARN")  # fmt: skip
    if controls:
        opts = options_text(as_dict(controls[0]["control"].get("options")))
        title = str(controls[0].get("verdict_reason") or "")
        return Value(f"crashes; {opts} does not help", "matrix", title, None, "v-FAIL")
    if all(st == "ok" for st in statuses):
        return Value(as_set, "matrix", "every cell of this dtype ran ok with the row's settings")
    worst = ", ".join(sorted(set(statuses) - {"ok"}))
    return Value(f"{worst} with {as_set}", "matrix", "no control setting was tried", None,
                 "v-FAIL")  # fmt: skip


def _settings_needed(col: Column, notes: Notes) -> list[Item]:
    """Per dtype: whether the row's own settings ran it on this host, or which control
    setting (``crash_control``) a crash needed."""
    by_dtype = _by_dtype(col)
    if not by_dtype:
        return [Item("", (Part("", _no_cells(col, notes, "settings")),))]
    row_opts = options_text(as_dict(col.info.get("options")))
    return [Item(d, (Part("", _dtype_settings(cs, row_opts)),)) for d, cs in by_dtype.items()]


def _seconds(metric: MetricRecord) -> float:
    """A cold-start figure's value: a number of seconds (its cell was picked for having one)."""
    return float(cast(float, metric["value"]))


def _cold_start(col: Column, notes: Notes) -> list[Item]:
    cells = [c for c in headline_cells(col) if value_of(c["metrics"].get(M.COLD_TOTAL))]
    if not cells:
        why = "no cell reached its first token"
        total = [c["metrics"].get(M.COLD_TOTAL) for c in headline_cells(col)]
        reasons = [str(m.get("reason")) for m in total if m and m.get("reason")]
        reason = reasons[0] if reasons else why
        return [Item("", (Part("", unavailable(f"{col.runtime}: {reason}", notes)),))]
    ref = cells[0]
    parts = [Part(label, figure_value(col, ref, k, notes), True) for k, label in COLD_START]
    parts.append(Part("total", figure_value(col, ref, M.COLD_TOTAL, notes)))
    items = [pick_item(col, ref, fixture_label(ref), tuple(parts))]
    if len(cells) > 1:
        totals = [c["metrics"][M.COLD_TOTAL] for c in cells]
        lo = min(totals, key=_seconds)
        hi = max(totals, key=_seconds)
        span = f"{fmt_value(lo)} … {fmt_value(hi)}" if lo is not hi else fmt_value(lo)
        value = Value(span, str(lo["source"]))
        items.append(Item(f"total over {len(cells)} cells", (Part("", value),)))
    return items


@dataclass(frozen=True)
class Fig:
    """One figure of a selection row: metric, label, and how it is shown."""

    key: str
    label: str
    detail: bool = False  # on demand only
    optional: bool = False  # shown only where the cell recorded it (reference figures)
    ratio_of: tuple[str, str] | None = None  # (reference, own): shown as own ÷ reference
    share: bool = False  # a utilization: shown as "41 % of this host's measured bandwidth"

    @classmethod
    def of(cls, key: M, *, detail: bool = False, optional: bool = False) -> Fig:
        """A figure labelled as the metric registry labels ``key``."""
        return cls(key, registry.spec(key).label, detail, optional)


def _fig_part(col: Column, cell: CellRecord, fig: Fig, notes: Notes) -> Part | None:
    if fig.optional and fig.key not in cell["metrics"]:
        return None
    if fig.share:
        return Part(fig.label, share_value(cell, fig.key, notes), fig.detail)
    if fig.ratio_of is None:
        return Part(fig.label, figure_value(col, cell, fig.key, notes), fig.detail)
    ref, own = fig.ratio_of
    value = ratio_value(cell, fig.key, ref, own, notes)
    return Part(f"{fig.label} ÷ {reference_tool(cell)}", value, fig.detail)


def _metric_row(*figs: Fig, what: str) -> Callable[[Column, Notes], list[Item]]:
    def entry(col: Column, notes: Notes) -> list[Item]:
        def parts(cell: CellRecord) -> list[Part]:
            found = (_fig_part(col, cell, f, notes) for f in figs)
            return [p for p in found if p is not None]

        return _per_cell(col, notes, parts, what)

    return entry


QUALITY_FIGS = (
    Fig.of(M.KLD_MEAN),
    Fig.of(M.SAME_TOP),
    Fig.of(M.PPL),
    Fig.of(M.KLD_REFERENCE_RATIO, optional=True),
    Fig.of(M.KLD_P99, detail=True),
    Fig.of(M.PPL_REFERENCE, detail=True),
    Fig.of(M.KLD_REFERENCE, detail=True, optional=True),
    Fig.of(M.SAME_TOP_REFERENCE, detail=True, optional=True),
    Fig.of(M.SAME_TOP_REFERENCE_DIFF, detail=True, optional=True),
)


def _quality(col: Column, notes: Notes) -> list[Item]:
    """A real model's teacher-forced figures against the f32 reference, per cell."""
    cells = [c for c in headline_cells(col) if M.KLD_MEAN in c["metrics"]]
    if not cells:
        why = f"{col.runtime} ran no real-model cell (a fixture with a source checkpoint)"
        return [Item("", (Part("", Value("not run", "matrix", why)),))]
    vary = varying_params(cells)
    items = []
    for c in cells:
        found = (_fig_part(col, c, f, notes) for f in QUALITY_FIGS)
        items.append(pick_item(col, c, cell_label(c, vary), tuple(p for p in found if p)))
    return items


def _throughput(
    key: str, counter: str, reference: str, ratio: str, label: str, util: str
) -> Callable[[Column, Notes], list[Item]]:
    return _metric_row(
        Fig(key, label),
        Fig(util, "=", optional=True, share=True),
        Fig(ratio, label, optional=True, ratio_of=(reference, key)),
        Fig(counter, f"{label} ctr", detail=True),
        Fig(reference, f"{label} ref", detail=True, optional=True),
        what="throughput",
    )


def _facilities(col: Column, notes: Notes) -> list[Item]:
    found: list[str] = []
    for _, c in col.cells:
        fac = c["evidence"].get("debug_facilities")
        if isinstance(fac, dict):
            for k, v in fac.items():
                if isinstance(v, dict) and "available" in v:  # {"available": bool, "how": ...}
                    found += [k] if v.get("available") else []
                elif v is not False:
                    found.append(k if v is True else f"{k}: {v}")
        elif isinstance(fac, list | tuple):
            found += [str(f) for f in fac]
        elif fac:
            found.append(str(fac))
    if found:
        value = Value(", ".join(dict.fromkeys(found)), "evidence", "probed by the adapter")
        return [Item("", (Part("", value),))]
    captured = sorted({k for _, c in col.cells for k, v in c["evidence"].items() if v})
    why = f"the {col.runtime} adapter reports no debug_facilities"
    why += f"; evidence captured: {', '.join(captured)}" if captured else ""
    return [Item("", (Part("", unavailable(why, notes, "not reported")),))]


def _placement(col: Column, notes: Notes) -> list[Item]:
    layers: dict[str, int] = {}
    fallbacks, placed = [], []
    for _, c in col.cells:
        ev = c["evidence"]
        for dev, n in as_dict(ev.get("layer_placement")).items():
            if isinstance(n, int | float):
                layers[dev] = max(layers.get(dev, 0), int(n))
        pl = ev.get("placement")
        if isinstance(pl, dict):
            placed.append(c)
            if pl.get("fallback"):
                fallbacks.append(
                    f"{fixture_label(c)}: asked {pl.get('requested')}, "
                    f"used {pl.get('used')}" + (f" ({pl['detail']})" if pl.get("detail") else "")
                )
    items = []
    counts = []
    for _, c in col.cells:
        n = as_dict(c["evidence"].get("partitions")).get("partitions")
        n = as_dict(c["evidence"].get("placement")).get("partitions") if n is None else n
        if isinstance(n, int) and not isinstance(n, bool):
            counts.append((fixture_label(c), n))
    if layers:
        text = ", ".join(f"{dev} ×{n}" for dev, n in layers.items())
        items.append(Item("layers", (Part("", Value(text, "evidence", "from the load log")),)))
    if placed:
        text = f"in {len(fallbacks)} of {len(placed)} cells" if fallbacks else "none"
        css = "v-FAIL" if fallbacks else ""
        value = Value(text, "evidence", "; ".join(fallbacks) or "ran where asked", None, css)
        items.append(Item("fallback", (Part("", value),)))
    if counts:
        lo, hi = min(n for _, n in counts), max(n for _, n in counts)
        value = Value(
            f"{lo} … {hi}" if lo != hi else str(lo),
            "evidence",
            "; ".join(f"{label}: {n}" for label, n in counts) + " (see the partitions panel)",
        )
        items.append(Item("partitions", (Part("", value),)))
    if not items:
        # the worker says which capability is missing (rtmatrix.adapters.capabilities.Placement)
        said = {str(c["evidence"].get("placement_unavailable") or "") for _, c in col.cells}
        why = "; ".join(sorted(said - {""})) or (
            f"the {col.runtime} adapter reports no placement evidence"
        )
        items.append(Item("", (Part("", unavailable(why, notes)),)))
    return items


def _lifecycle(col: Column, notes: Notes) -> list[Item]:
    """Per scenario cell: its checks and one headline figure; the panel has the rest."""
    cells = [(scenario_of(c), c) for _, c in col.cells]
    found = [(sc, c) for sc, c in cells if sc is not None]
    if not found:
        value = Value("not run", "matrix", f"{col.runtime} ran no lifecycle scenario cell")
        return [Item("", (Part("", value),))]
    items = []
    for sc, c in found:
        metrics = c["metrics"]
        lc = metrics.get(M.LIFECYCLE_CHECKS)
        checks = metric_value(lc if isinstance(lc, dict) else None, notes, M.LIFECYCLE_CHECKS)
        passed = str(checks.text).split("/")
        if len(passed) == 2 and passed[0] != passed[1]:
            checks = Value(checks.text, checks.source, checks.title, checks.note, "v-FAIL")
        parts = [Part("checks", checks)]
        spec = SPECS.get(sc)
        headline = spec.hook("headline") if spec is not None else None
        if headline is not None:
            parts += headline(metrics, notes)
        label = sc if [s for s, _ in found].count(sc) == 1 else f"{sc} {fixture_label(c)}"
        items.append(Item(label, tuple(parts)))
    return items


def _outcomes(col: Column, notes: Notes) -> list[Item]:
    if not col.cells:
        return [Item("", (Part("", _no_cells(col, notes, "cells")),))]
    counts: dict[str, int] = {}
    for _, c in col.cells:
        counts[str(c["verdict"])] = counts.get(str(c["verdict"]), 0) + 1
    return [
        Item("", (Part("", Value(f"{counts[v]} {v}", "matrix", "", None, f"v-{v}")),))
        for v in VERDICT_ORDER
        if v in counts
    ]


def _parity(col: Column, notes: Notes) -> list[Item]:
    def parts(cell: CellRecord) -> list[Part]:
        return [Part("", parity_value(cell["parity"], notes))]

    return _per_cell(col, notes, parts, "parity")


def parity_value(par: ParityRecord, notes: Notes) -> Value:
    if par.get("status") != "measured":
        return unavailable(str(par.get("reason") or "no reason recorded"), notes)
    err = par.get("max_abs_logit_err")
    err_text = f"{err:.2g}" if isinstance(err, int | float) else "n/a"
    text = f"{par.get('tokens_agree')}/{par.get('tokens_compared')} tok"
    title = (
        f"tokens agreeing before the first divergence ({par.get('first_divergence')}); "
        f"max|Δlogit| {err_text} (tolerance {par.get('logit_tolerance')})"
    )
    css = "" if par.get("within_tolerance") else "v-FAIL"
    return Value(text, "matrix", title, None, css)


ROWS: tuple[tuple[str, str, Callable[[Column, Notes], list[Item]]], ...] = (
    ("verdicts", "cells by verdict (fixture expectation applied)", _outcomes),
    ("OS / chip", "the run's host and the devices the runtime lists", _os_chip),
    (
        "architecture",
        "model architectures run, and the unknown-architecture fixture",
        _architecture,
    ),
    ("max context", "largest n_ctx that passed", _max_context),
    ("quantization", "formats tried and their worst verdict", _quant),
    (
        "specialized kernels",
        "what computed the matmuls across the row's cells (evidence.stack; the stack view has "
        "each cell); a kernel-level fallback is marked",
        lambda col, n: _specialized_kernels(col),
    ),
    (
        "settings needed",
        "per dtype: ran with the row's settings, or needed a control setting on this host "
        "(a crash rerun with the row's crash_control: e.g. llama.cpp's extra_buffer_types=false; "
        "a numerics control: e.g. OpenVINO's inference_precision=f32 where it computes in bf16 "
        "by default)",
        _settings_needed,
    ),
    (
        "package size",
        "bytes of the distribution's files",
        lambda col, n: _first_metric(col, M.PACKAGE_SIZE, n),
    ),
    ("cold start", "spawn → first token, split (one cell; plot for all)", _cold_start),
    (
        "peak memory",
        "ru_maxrss of the worker (sampled tree RSS in all figures)",
        _metric_row(
            Fig(M.PEAK_RSS_OS, "OS"), Fig(M.PEAK_RSS_SAMPLED, "sampled", True), what="memory"
        ),
    ),
    (
        "PP tok/s",
        "prefill throughput, harness clock; = its share of this host's measured matmul peak "
        "(FLOPs per token); ÷ the runtime's own benchmark tool where it has one (runtime "
        "counters in all figures)",
        _throughput(M.PP_TPS, M.PP_TPS_COUNTER, M.PP_TPS_REFERENCE, PP_REFERENCE_RATIO, "PP",
                    M.PP_COMPUTE_UTIL),
    ),
    (
        "TG tok/s",
        "decode throughput, harness clock; = its share of this host's measured memory bandwidth "
        "(bytes read per token); ÷ the runtime's own benchmark tool where it has one (runtime "
        "counters in all figures)",
        _throughput(M.TG_TPS, M.TG_TPS_COUNTER, M.TG_TPS_REFERENCE, TG_REFERENCE_RATIO, "TG",
                    M.TG_BANDWIDTH_UTIL),
    ),
    (
        "TTFT / TPOT",
        "time to first token; time per output token (p90 in all figures)",
        _metric_row(
            Fig.of(M.TTFT), Fig.of(M.TPOT), Fig.of(M.TOKEN_P90, detail=True), what="latency"
        ),
    ),
    (
        "power",
        "mean power and energy per cell",
        _metric_row(Fig.of(M.POWER), Fig.of(M.ENERGY), what="power"),
    ),
    (
        "license",
        "from the distribution's metadata",
        lambda col, n: _first_metric(col, M.LICENSE, n),
    ),
    ("parity", "greedy tokens agreeing with the numpy reference", _parity),
    (
        "quality (real model)",
        "teacher-forced over rtmatrix's own text: mean KL divergence from the f32 reference "
        "(nats), same top token, perplexity; ÷ the runtime's own quality tool "
        "(llama-perplexity) over the same positions where it has one (KLD p99, the "
        "reference's perplexity and the tool's figures in all figures)",
        _quality,
    ),
    ("debugging", "debug facilities the runtime offers (probed)", _facilities),
    ("placement / fallback", "where layers ran; whether work fell back", _placement),
    (
        "lifecycle",
        "stream / cancel / serve scenario checks; cancel → stopped per mode (panel below)",
        _lifecycle,
    ),
)


def _specialized_kernels(col: Column) -> list[Item]:
    return specialized(col)


def selection(cols: list[Column], notes: Notes) -> list[Row]:
    return [Row(label, help_, [build(col, notes) for col in cols]) for label, help_, build in ROWS]


# --- the fixture grid ----------------------------------------------------------------------


def grid(cols: list[Column]) -> list[GridRow]:
    """Rows: each fixture × params seen in any column; a cell per column (or None)."""
    keys: dict[str, CellRecord] = {}
    for col in cols:
        for _, c in col.cells:
            keys.setdefault(row_key(c), c)
    vary = varying_params(keys.values())
    rows = []
    for key, sample in keys.items():
        by_col = [next(((a, c) for a, c in col.cells if row_key(c) == key), None) for col in cols]
        detail = f"expect {sample.get('expect', 'ok')}"
        rows.append(GridRow(key, cell_label(sample, vary), detail, by_col))
    return rows


# --- evidence ------------------------------------------------------------------------------

KNOWN_EVIDENCE = {
    "stderr_tail",
    "stdout_tail",
    "traceback_tail",
    "log_excerpt",
    "log_tail",
    "warnings",
    "layer_placement",
    "placement",
    "placement_unavailable",
    "devices",
    "system_info",
    "manifest",
    "debug_facilities",
    "leaked_processes",
    "process_tracking",
    "runtime_log_at_crash",
}


def other_evidence(evidence: dict[str, Any]) -> dict[str, str]:
    """Evidence entries without a panel of their own, as readable JSON."""
    return {
        k: v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, default=str)
        for k, v in evidence.items()
        if k not in KNOWN_EVIDENCE and v not in (None, "", [], {})
    }


def flat_items(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A nested manifest as (dotted key, value) rows."""
    if isinstance(data, dict):
        rows = []
        for k, v in data.items():
            rows += flat_items(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        rows = []
        for i, v in enumerate(data):
            rows += flat_items(v, f"{prefix}[{i}]")
        return rows
    return [(prefix or "value", data if isinstance(data, str) else json.dumps(data, default=str))]


@dataclass
class Summary:
    """Counts for the page header."""

    runs: int
    columns: int
    cells: int
    verdicts: dict[str, int] = field(default_factory=dict)


def summary(runs: list[RunRecord], cols: list[Column]) -> Summary:
    out = Summary(len(runs), len(cols), sum(len(r["cells"]) for r in runs))
    for r in runs:
        for c in r["cells"]:
            out.verdicts[str(c["verdict"])] = out.verdicts.get(str(c["verdict"]), 0) + 1
    return out


def specialized(col: Column) -> list[Item]:
    names: set[str] = set()
    fallbacks = 0
    for _, c in col.cells:
        k = as_dict(as_dict(as_dict(c.get("evidence")).get("stack")).get("kernels"))
        fallbacks += bool(k.get("fallback"))
        for key in ("matmul_kernels", "matmul_primitives"):
            for per in as_dict(k.get(key)).values():
                names |= set(as_dict(per))
        names |= {f"{t}: {v}" for t, v in as_dict(k.get("by_tensor_type")).items()}
        names |= {f"{op} (delegate)" for op in as_dict(k.get("on_delegate"))}
    if not any(as_dict(as_dict(c.get("evidence")).get("stack")) for _, c in col.cells):
        return [Item("", (Part("", Value("not recorded: no cell carries evidence.stack", "")),))]
    text = "; ".join(sorted(names)) or "none named (the runtime reports no kernel choice)"
    if fallbacks:
        text += f" — {fallbacks} cell(s) with a kernel-level fallback"
    return [Item("", (Part("", Value(text, "", "", None, "v-FAIL" if fallbacks else "")),))]


def stream_headline(metrics: dict[str, MetricRecord], notes: Notes) -> list[Part]:
    """The stream scenario's headline: its time to first chunk."""
    return [Part("TTFT", metric_value(metrics.get("stream_ttft_s"), notes, "TTFT"))]


def cancel_headline(metrics: dict[str, MetricRecord], notes: Notes) -> list[Part]:
    """The cancel scenario's headline: each mode's stop latency."""
    cancel = family(Scenario.CANCEL)
    return [Part(mode, metric_value(metrics[cancel.name(mode, "stop_latency_s")], notes))
            for mode in cancel.values(metrics, member="stop_latency_s")]  # fmt: skip


def serve_headline(metrics: dict[str, MetricRecord], notes: Notes) -> list[Part]:
    """The serve scenario's headline: TTFT p50 at its highest concurrency."""
    serve = family(Scenario.SERVE)
    levels = sorted(int(v) for v in serve.values(metrics, member="ttft_p50_s"))
    if not levels:
        return []
    key = serve.name(levels[-1], "ttft_p50_s")
    return [Part(f"TTFT p50 ×{levels[-1]}", metric_value(metrics[key], notes))]
