"""The partitions panel: node coverage next to boundary traffic and time, and delegate on vs off.

A delegate is an execution provider besides the CPU one (OpenVINO, CUDA, ...). Its cells carry
``evidence.partitions`` (``rtmatrix.metrics.partitions.summarize``: partitions, coverage, boundary
tensors with bytes per phase and per token, time per partition from profiling; ``role`` says
delegate or control) where the adapter analyses partitions, else only ``evidence.placement``
(``nodes_by_provider``, ``partitions``), from which the panel shows coverage and partition count
and says the rest is unavailable. Each delegate cell is paired with the control cell (delegate
off: CPU EP only) of the same run, fixture and parameters, and their PP/TG compared; a delegate
slower than its control is flagged. Odd-typed or missing entries never raise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.report.views import (
    Notes,
    Table,
    TableRow,
    Value,
    fmt_bytes,
    metric_value,
    text,
    unavailable,
)
from rtmatrix.results.columns import (
    Column,
    as_dict,
    as_list,
    fixture_label,
    params_label,
    varying_params,
)
from rtmatrix.results.records import CellRecord
from rtmatrix.runtimes.onnxruntime import records as ort

PHASES = ("prefill", "decode")
MAX_ROWS = 40  # partitions and boundary tensors listed per cell; the rest stay in the evidence
TOP_OPS = 4


@dataclass
class Entry:
    """One cell with placement evidence: its role and where its numbers come from."""

    anchor: str
    col: Column
    cell: CellRecord
    role: str | None  # "delegate" | "control" | None (placement says neither)
    delegate: str | None
    part: dict[str, Any]  # evidence.partitions when it holds an analysis, else {}
    placement: dict[str, Any]
    why_no_analysis: str

    @property
    def label(self) -> str:
        return fixture_label(self.cell)


@dataclass(frozen=True)
class Detail:
    anchor: str
    title: str
    partitions: Table | None
    tensors: Table | None
    left_out: str = ""


@dataclass
class Panel:
    coverage: Table | None = None
    versus: Table | None = None
    details: list[Detail] = field(default_factory=list)
    note: str | None = None
    slower: list[str] = field(default_factory=list)  # "fixture: PP, TG" where the delegate lost


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def role_of(cell: CellRecord) -> tuple[str | None, str | None]:
    """(role, delegate): as ``evidence.partitions`` or ``evidence.placement`` says it (``role``,
    ``delegate``), else from the providers an ONNX Runtime cell requested (older records)."""
    ev = as_dict(cell.get("evidence"))
    placement = as_dict(ev.get("placement"))
    for said in (as_dict(ev.get("partitions")), placement):
        if said.get("role") in ("delegate", "control"):
            delegate = said.get("delegate")
            return str(said["role"]), str(delegate) if delegate else None
    requested = [
        str(p[0] if isinstance(p, list | tuple) and p else p)
        for p in as_list(placement.get("requested"))
    ]
    accel = ort.delegates(requested)
    if accel:
        return "delegate", accel[0]
    return ("control", None) if requested else (None, None)


def _entry(col: Column, anchor: str, cell: CellRecord) -> Entry | None:
    ev = as_dict(cell.get("evidence"))
    raw = ev.get("partitions")
    placement = as_dict(ev.get("placement"))
    node_info = "nodes_by_provider" in placement or "partitions" in placement
    if not isinstance(raw, dict) and not node_info:
        return None  # placement without node counts (requested/used only): nothing to show here
    part = as_dict(raw)
    why = ""
    if not part:
        why = f"the {col.runtime} adapter reports no partition analysis (evidence.partitions)"
    elif "partitions" not in part:
        why = str(part.get("unavailable") or part.get("error") or "partition analysis empty")
        why = f"partition analysis unavailable: {why}"
        part = {}
    role, delegate = role_of(cell)
    return Entry(anchor, col, cell, role, delegate, part, placement, why)


def _pair_key(run_index: int, cell: CellRecord) -> str:
    fx = as_dict(cell.get("fixture"))
    return json.dumps(
        [run_index, fx.get("name"), fx.get("dtype"), fx.get("variant"), cell.get("params")],
        sort_keys=True,
        default=str,
    )


def _status(cell: CellRecord) -> str:
    return str(as_dict(cell.get("outcome")).get("status") or "?")


# --- values ---------------------------------------------------------------------------------


def _sources(e: Entry, kind: str) -> str:
    return str(as_dict(e.part.get("sources")).get(kind) or "")


def _na(e: Entry, notes: Notes, what: str) -> Value:
    if _status(e.cell) != "ok" and not e.part:
        return unavailable(f"the cell ended with outcome {_status(e.cell)}: no {what}", notes)
    return unavailable(e.why_no_analysis or f"evidence.partitions has no {what}", notes)


def _partitions(e: Entry, notes: Notes) -> Value:
    n = _num(e.part.get("partitions"))
    if n is not None:
        on = _num(e.part.get("delegate_partitions"))
        by_ep: dict[str, int] = {}
        for p in as_list(e.part.get("per_partition")):
            ep = ort.short_name(as_dict(p).get("ep"))
            by_ep[ep] = by_ep.get(ep, 0) + 1
        title = ", ".join(f"{k} ×{v}" for k, v in by_ep.items()) or _sources(
            e, "partition_definition"
        )
        words = f"{n:g}" + (f" ({on:g} on the delegate)" if on is not None and e.delegate else "")
        return Value(words, "analysis", title)
    n = _num(e.placement.get("partitions"))
    if n is not None:
        return Value(f"{n:g}", "evidence", str(e.placement.get("source") or "placement"))
    why = str(e.placement.get("partitions_reason") or "")
    return unavailable(why or e.why_no_analysis or "no partition count recorded", notes)


def _coverage(e: Entry, notes: Notes) -> Value:
    cov = as_dict(e.part.get("coverage"))
    total, on, pct = _num(cov.get("nodes_total")), _num(cov.get("nodes_on_delegate")), None
    source, how = "analysis", _sources(e, "assignment")
    if total is None:
        counts = {
            str(k): int(v)
            for k, v in as_dict(e.placement.get("nodes_by_provider")).items()
            if _num(v) is not None
        }
        if not counts:
            why = as_dict(e.placement.get("not_used"))
            reason = "; ".join(f"{k}: {v}" for k, v in why.items()) or "no node counts recorded"
            if _status(e.cell) != "ok":
                reason = f"the cell ended with outcome {_status(e.cell)}; {reason}"
            return unavailable(f"nodes per provider: {reason}", notes)
        total = float(sum(counts.values()))
        on = float(counts.get(e.delegate or "", 0)) if e.delegate else 0.0
        source, how = "evidence", str(e.placement.get("source") or "placement.nodes_by_provider")
    if not e.delegate:
        nodes = f"{total:g} node{'s' if total != 1 else ''}"
        return Value(f"none ({nodes} on CPU)" if total else "none", source, how)
    pct = _num(cov.get("pct"))
    if pct is None and total:
        pct = 100.0 * (on or 0.0) / total
    if pct is None:
        return unavailable("no nodes in the graph", notes)
    return Value(f"{pct:.1f} % ({on or 0:g} of {total:g} nodes)", source, how)


def _boundary(e: Entry, notes: Notes) -> Value:
    n = _num(e.part.get("boundary_tensors"))
    if n is None:
        return _na(e, notes, "boundary tensors")
    crossings = _num(e.part.get("crossings"))
    words = f"{n:g}" + (f" ({crossings:g} crossings)" if crossings and crossings != n else "")
    return Value(words, "analysis", "tensors handed from one partition to another")


def _bytes_per_token(e: Entry, phase: str, notes: Notes) -> Value:
    per = _num(as_dict(e.part.get("boundary_bytes_per_token")).get(phase))
    if per is None:
        return _na(e, notes, f"{phase} boundary bytes")
    total = _num(as_dict(e.part.get("boundary_bytes")).get(phase))
    tokens = _num(as_dict(e.part.get("tokens")).get(phase))
    title = f"{fmt_bytes(total)} per {phase} run" if total is not None else ""
    title += f" of {tokens:g} token(s)" if tokens is not None and title else ""
    title += f"; {_sources(e, 'shapes')}" if _sources(e, "shapes") else ""
    return Value(fmt_bytes(per), "analysis", title)


def fmt_us(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us < 1e6 else f"{us / 1e6:.2f} s"


def _time(e: Entry, phase: str, notes: Notes) -> tuple[Value, Value]:
    t = as_dict(as_dict(e.part.get("time_us")).get(phase))
    run, inside = _num(t.get("run")), _num(t.get("in_partitions"))
    total = run if run is not None else inside
    if total is None:
        na = _na(e, notes, f"{phase} time per partition")
        return na, na
    on = _num(t.get("on_delegate"))
    parts = [f"in partitions {fmt_us(inside)}" if inside is not None else ""]
    if on is not None:
        parts.append(f"on the delegate {fmt_us(on)}")
        if inside is not None:
            parts.append(f"other partitions {fmt_us(inside - on)}")
    for key, label in (("outside_partitions", "outside"), ("unattributed_events", "unattributed")):
        if _num(t.get(key)) is not None:
            parts.append(f"{label} {fmt_us(_num(t.get(key)) or 0.0)}")
    title = "; ".join(p for p in parts if p) + (
        f" — {_sources(e, 'time')}" if _sources(e, "time") else ""
    )
    time_v = Value(fmt_us(total), "analysis", title)
    if not e.delegate:
        return time_v, text("—", "no delegate")
    if on is None or not total:
        return time_v, _na(e, notes, f"{phase} time on the delegate")
    return time_v, Value(f"{100 * on / total:.0f} %", "analysis", title)


def _coverage_row(e: Entry, notes: Notes, label: str, first: bool) -> TableRow:
    t_pre, share_pre = _time(e, "prefill", notes)
    t_dec, share_dec = _time(e, "decode", notes)
    role = e.role or "?"
    help_ = f"{e.col.label} · {role}" + (f" {ort.short_name(e.delegate)}" if e.delegate else "")
    if e.placement.get("fallback"):
        help_ += " · fell back"
    if _status(e.cell) != "ok":
        help_ += f" · {_status(e.cell)}"
    return TableRow(
        label,
        (
            _partitions(e, notes),
            _coverage(e, notes),
            _boundary(e, notes),
            _bytes_per_token(e, "prefill", notes),
            _bytes_per_token(e, "decode", notes),
            t_pre,
            share_pre,
            t_dec,
            share_dec,
        ),
        help_,
        " ".join(
            c for c, on in (("role-delegate", role == "delegate"), ("group-start", first)) if on
        ),
        data=e.anchor,
    )


# --- delegate on vs off ---------------------------------------------------------------------


def _samples(metric: dict[str, Any] | None) -> list[float]:
    return [v for x in as_list((metric or {}).get("samples")) if (v := _num(x)) is not None]


def _ratio(
    on_m: dict[str, Any] | None, off_m: dict[str, Any] | None, what: str, notes: Notes
) -> tuple[Value, bool | None]:
    on, off = _num((on_m or {}).get("value")), _num((off_m or {}).get("value"))
    if on is None or off is None or off == 0:
        side = "delegate" if on is None else "control"
        return unavailable(f"{what}: the {side} cell measured no value to compare", notes), None
    r = on / off
    s_on, s_off = _samples(on_m), _samples(off_m)
    spread = ""
    if s_on and s_off:
        if max(s_on) < min(s_off):
            spread = "every delegate sample below every control sample"
        elif min(s_on) > max(s_off):
            spread = "every delegate sample above every control sample"
        else:
            spread = "the samples overlap: within noise"
    title = f"delegate / control medians ({on:,.1f} / {off:,.1f} tokens/s)"
    title += f"; {spread}" if spread else ""
    css = "v-FAIL" if r < 1 else "v-PASS"
    return Value(f"{r:.2f}×", "matrix", title, None, css), r < 1


def _tps(cell: CellRecord | None, key: str) -> dict[str, Any] | None:
    m = as_dict(as_dict(as_dict(cell).get("metrics")).get(key))
    return m or None


def _versus_row(
    e: Entry, ctl: Entry | None, why: str, notes: Notes, label: str
) -> tuple[TableRow, list[str]]:
    cells: list[Value] = [_partitions(e, notes), _coverage(e, notes)]
    slower: list[str] = []
    for key, what in (("pp_tps", "PP"), ("tg_tps", "TG")):
        on = _tps(e.cell, key)
        cells.append(metric_value(on, notes, key))
        if ctl is None:
            cells += [unavailable(why, notes), unavailable(why, notes)]
            continue
        off = _tps(ctl.cell, key)
        cells.append(metric_value(off, notes, key))
        ratio, worse = _ratio(on, off, what, notes)
        cells.append(ratio)
        if worse:
            slower.append(what)
    if ctl is None:
        flag = text("no control", why, "na")
    elif slower:
        flag = text(
            f"delegate slower: {', '.join(slower)}",
            "delegate-on median below the delegate-off control's",
            "v-FAIL",
        )
    elif _status(e.cell) != "ok":
        flag = text(f"delegate cell {_status(e.cell)}", "", "v-FAIL")
    else:
        flag = text("delegate not slower", "", "v-PASS")
    cells.append(flag)
    help_ = f"{e.col.label} on · " + (f"{ctl.col.label} off" if ctl else "no control")
    return TableRow(label, tuple(cells), help_, "slower" if slower else "", data=e.anchor), slower


# --- per-partition details ------------------------------------------------------------------


def _phase_bytes(d: dict[str, Any], key: str, sub: str) -> Value:
    vals = [_num(as_dict(as_dict(d.get(key)).get(ph)).get(sub)) for ph in PHASES]
    if all(v is None for v in vals):
        return text("—", f"no {key} recorded")
    return Value(
        " / ".join("?" if v is None else fmt_bytes(v) for v in vals),
        "analysis",
        f"{sub.replace('_', ' ')}: prefill / decode run",
    )


def _ops_text(p: dict[str, Any]) -> Value:
    """A partition's most frequent ops (all of them on hover)."""
    ops = sorted(
        ((str(k), int(v)) for k, v in as_dict(p.get("ops")).items() if _num(v) is not None),
        key=lambda kv: -kv[1],
    )
    op_text = ", ".join(f"{k} ×{v}" for k, v in ops[:TOP_OPS])
    op_text += f", +{len(ops) - TOP_OPS} more" if len(ops) > TOP_OPS else ""
    return text(op_text, ", ".join(f"{k} ×{v}" for k, v in ops))


def _partition_row(e: Entry, p: dict[str, Any]) -> TableRow:
    times = [_num(as_dict(p.get("time_us")).get(ph)) for ph in PHASES]
    return TableRow(
        str(p.get("id", "?")),
        (
            text(ort.short_name(p.get("ep"))),
            text(str(p.get("subgraph") or "")),
            Value(
                f"{_num(p.get('nodes')) or 0:g}",
                "analysis",
                f"{p.get('first_node')} … {p.get('last_node')}",
            ),
            _ops_text(p),
            _phase_bytes(p, "in_bytes", "from_partitions"),
            _phase_bytes(p, "out_bytes", "to_partitions"),
            *(
                Value(fmt_us(t), "analysis", f"{ph}: profiling")
                if t is not None
                else text("—", f"no {ph} time")
                for ph, t in zip(PHASES, times, strict=True)
            ),
        ),
        css="role-delegate" if e.delegate and p.get("ep") == e.delegate else "",
    )


def _tensor_row(t: dict[str, Any]) -> TableRow:
    shapes = as_dict(t.get("shape"))
    per = as_dict(t.get("bytes_per_token"))
    return TableRow(
        str(t.get("tensor", "?")),
        (
            text(f"{t.get('from')} → {', '.join(str(x) for x in as_list(t.get('to')))}"),
            text(str(t.get("dtype") or "?")),
            *(text("×".join(str(d) for d in as_list(shapes.get(ph))) or "?") for ph in PHASES),
            *(
                Value(fmt_bytes(v), "analysis", f"{ph}: bytes crossing per token")
                if (v := _num(per.get(ph))) is not None
                else text("?", "shape unknown")
                for ph in PHASES
            ),
        ),
    )


_PARTITION_HEADS = (
    "partition",
    "EP",
    "subgraph",
    "nodes",
    "ops",
    "in from partitions",
    "out to partitions",
    "prefill time",
    "decode time",
)
_TENSOR_HEADS = (
    "tensor",
    "from → to",
    "dtype",
    "shape prefill",
    "shape decode",
    "bytes/token prefill",
    "bytes/token decode",
)


def _left_out(e: Entry, parts: int, tensors: int) -> str:
    """What the tables leave to the cell's evidence ("" when nothing)."""
    left = []
    if parts > MAX_ROWS:
        left.append(f"{parts - MAX_ROWS} more partitions")
    more_t = tensors - MAX_ROWS + int(_num(e.part.get("tensors_left_out")) or 0)
    if more_t > 0:
        left.append(f"{more_t} more boundary tensors")
    return "; ".join(left) + (" in the cell's evidence" if left else "")


def _detail(e: Entry, title: str) -> Detail | None:
    parts = [as_dict(p) for p in as_list(e.part.get("per_partition"))]
    tensors = [as_dict(t) for t in as_list(e.part.get("tensors"))]
    if not parts and not tensors:
        return None
    prow = tuple(_partition_row(e, p) for p in parts[:MAX_ROWS])
    trow = tuple(_tensor_row(t) for t in tensors[:MAX_ROWS])
    return Detail(
        e.anchor,
        title,
        Table("partitions", _PARTITION_HEADS, prow, "bytes: prefill run / decode run")
        if prow
        else None,
        Table("boundary tensors", _TENSOR_HEADS, trow) if trow else None,
        _left_out(e, len(parts), len(tensors)),
    )


# --- the panel ------------------------------------------------------------------------------

_COVERAGE_HEADS = (
    "fixture",
    "partitions",
    "nodes on the delegate",
    "boundary tensors",
    "boundary bytes/token prefill",
    "boundary bytes/token decode",
    "prefill run",
    "share on delegate",
    "decode run",
    "share on delegate",
)
_VERSUS_HEADS = (
    "fixture",
    "partitions",
    "nodes on the delegate",
    "PP on",
    "PP off",
    "PP on/off",
    "TG on",
    "TG off",
    "TG on/off",
    "verdict",
)


@dataclass(frozen=True)
class _Pairing:
    """The panel's cells in order: groups of one fixture and parameters, delegate cells first,
    and the control cell each delegate cell is compared with (ok ones first)."""

    groups: list[list[Entry]]
    controls: dict[str, Entry]  # the first ok control cell per pair key
    all_controls: dict[str, Entry]  # the first control cell per pair key, whatever its outcome
    vary: list[str]

    @property
    def shown(self) -> list[Entry]:
        return [e for g in self.groups for e in g]

    def label(self, e: Entry) -> str:
        return e.label + (f" {params_label(e.cell, self.vary)}" if self.vary else "")


def _pairing(entries: list[Entry]) -> _Pairing:
    controls: dict[str, Entry] = {}
    all_controls: dict[str, Entry] = {}
    for e in entries:
        if e.role == "control":
            key = _pair_key(e.col.run_index, e.cell)
            all_controls.setdefault(key, e)
            if _status(e.cell) == "ok":
                controls.setdefault(key, e)
    # fixture order as first seen, delegate cells then their controls
    order: dict[str, list[Entry]] = {}
    for e in entries:
        if e.role in ("delegate", "control"):
            order.setdefault(_pair_key(e.col.run_index, e.cell), []).append(e)
    # a group with no delegate cell shows only if the adapter analysed its partitions
    groups = [
        sorted(g, key=lambda e: e.role != "delegate")
        for g in order.values()
        if any(e.role == "delegate" or e.part for e in g)
    ]
    vary = varying_params([e.cell for g in groups for e in g])
    return _Pairing(groups, controls, all_controls, vary)


def _coverage_table(pairing: _Pairing, notes: Notes) -> Table:
    starts = {id(g[0]) for g in pairing.groups}
    return Table(
        "coverage vs boundaries",
        _COVERAGE_HEADS,
        tuple(_coverage_row(e, notes, pairing.label(e), id(e) in starts) for e in pairing.shown),
        "time: one profiled run per phase (prefill of the prompt, one decode step); "
        "hover a time for its split over partitions",
    )


def _no_control(pairing: _Pairing, key: str) -> str:
    """Why a delegate cell has no control to compare with."""
    other = pairing.all_controls.get(key)
    if other:
        return f"the control cell ({other.col.label}) ended with outcome {_status(other.cell)}"
    return "no control cell (delegate off: CPU EP only) with this fixture and params in this run"


def _versus_table(
    pairing: _Pairing, delegates: list[Entry], notes: Notes
) -> tuple[Table, list[str]]:
    """Each delegate cell against its control; and "fixture (column): PP, TG" where it lost."""
    rows, slower = [], []
    for e in delegates:
        key = _pair_key(e.col.run_index, e.cell)
        ctl = pairing.controls.get(key)
        why = "" if ctl is not None else _no_control(pairing, key)
        row, worse = _versus_row(e, ctl, why, notes, pairing.label(e))
        rows.append(row)
        if worse:
            slower.append(f"{pairing.label(e)} ({e.col.label}): {', '.join(worse)}")
    versus = Table(
        "delegate on vs off",
        _VERSUS_HEADS,
        tuple(rows),
        "PP/TG: harness clock, median; ratio < 1: the delegate is slower than its control",
    )
    return versus, slower


def panel(cols: list[Column], notes: Notes) -> Panel:
    entries = [e for col in cols for a, c in col.cells if (e := _entry(col, a, c)) is not None]
    delegates = [e for e in entries if e.role == "delegate"]
    if not delegates:
        why = (
            "no cell asked for a delegate (an execution provider besides the CPU one)"
            if entries
            else "no cell carries placement evidence (the ONNX Runtime rows report it)"
        )
        return Panel(note=f"no data: {why}; see matrix/openvino.toml and matrix/placement.toml")
    pairing = _pairing(entries)
    coverage = _coverage_table(pairing, notes)
    versus, slower = _versus_table(pairing, delegates, notes)
    details = [
        d
        for e in pairing.shown
        if e.part
        and (d := _detail(e, f"{pairing.label(e)} · {e.col.label} · {e.role}")) is not None
        and len(as_list(e.part.get("per_partition"))) > 1
    ]
    return Panel(coverage, versus, details, None, slower)
