"""The report's stack view: per runtime row, the four layers of its cells (``evidence.stack``:
format, runtime, backend, kernels) in four rows, and which kernels computed the matmuls — with a
kernel-level fallback marked as a placement fallback is. A run whose cells carry no stack has no
such table.

Differences, not repetitions: each distinct value of a layer is shown once per row, naming how
many of the row's cells share it (``all 12 cells``; the cells on hover), and a cell with another
value gets a line of its own. Where the cells that share a line differ in detail, the hover
shows the first one's record and names the others."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from rtmatrix.report.views import Item, Notes, Part, Row, Value, specialized
from rtmatrix.results.columns import Column, as_dict, cell_label
from rtmatrix.results.records import CellRecord

LAYERS = (
    ("format", "the container and its version, the stored tensor types / op types"),
    ("runtime", "the distribution and version that read it"),
    ("backend", "where the work went (device, provider, delegate) and what it says of the ISA"),
    ("kernels", "what computed the matmuls, per op or tensor type, as the runtime reports it"),
    (
        "numerics",
        "the effective numerics: devices, matmul / attention / KV-cache precision, "
        "weight layout, activation quantization, each as the runtime said it (hover)",
    ),
)
#: the numerics facts, in the order they are shown
FACTS = ("matmul", "attention", "kv_cache", "weight_layout", "activation_quantization")


def _short(layer: str, data: dict[str, Any]) -> str:
    if "unavailable" in data:
        return f"unavailable: {data['unavailable']}"
    if layer == "format":
        bits = [str(data.get("container"))]
        for k in ("version", "ir_version", "schema_version", "manifest_version"):
            if data.get(k) is not None:
                bits.append(f"{k.replace('_', ' ')} {data[k]}")
        if data.get("opsets"):
            bits.append("opsets " + ", ".join(f"{d} {v}" for d, v in data["opsets"].items()))
        if data.get("tensor_types"):
            bits.append(", ".join(f"{t}×{n}" for t, n in data["tensor_types"].items()))
        return "; ".join(bits)
    if layer == "runtime":
        return f"{data.get('distribution') or data.get('row')} {data.get('version') or ''}".strip()
    if layer == "numerics":
        bits = [f"on {', '.join(data.get('devices') or ['?'])}"]
        for k in FACTS:
            fact = as_dict(data.get(k))
            if fact:
                mark = " (host default)" if fact.get("host_dependent") else ""
                bits.append(f"{k.replace('_', ' ')} {fact.get('value')}{mark}")
        return "; ".join(bits)
    if layer == "backend":
        for k in ("used", "device", "resolver", "mcpu", "asked", "said"):
            if data.get(k):
                return f"{k}: {data[k]}"[:160]
        return "recorded (hover)"
    for k in ("matmul_kernels", "matmul_primitives", "by_tensor_type", "on_delegate",
              "schedule_rules"):  # fmt: skip
        if data.get(k):
            return json.dumps(data[k], separators=(", ", ": "))[:200]
    return "recorded (hover)"


def _item(cell: CellRecord, layer: str) -> Item | None:
    st = as_dict(as_dict(cell.get("evidence")).get("stack"))
    if not st:
        return None
    data = as_dict(st.get(layer))
    text = _short(layer, data)
    css = ""
    if layer == "kernels" and data.get("fallback"):
        text = f"kernel-level fallback: {data.get('fallback_reason')}"
        css = "v-FAIL"
    if layer == "numerics" and cell.get("numerics_mark"):
        text = f"{text} — {cell.get('numerics_mark')}"
        css = "v-WARN"
    if layer == "numerics" and cell.get("self_check_mark"):  # what the figures measured
        text = f"{text} — {cell.get('self_check_mark')}"
        css = "v-WARN"
    title = json.dumps(data, indent=1, default=str)[:2000]
    value = Value(text, "", title, None, css)
    return Item(cell_label(cell, []), (Part("", value),))


def _distinct(items: list[Item]) -> list[Item]:
    """One line per distinct shown value (text and mark), in first-seen order."""
    groups: dict[tuple[str, str], list[Item]] = {}
    for it in items:
        v = it.parts[0].value
        groups.setdefault((v.text, v.css), []).append(it)
    return [_group(same, len(items)) for same in groups.values()]


def _group(same: list[Item], total: int) -> Item:
    first = same[0]
    if len(same) == 1:
        return first
    names = list(dict.fromkeys(it.label for it in same))
    label = f"all {total} cells" if len(same) == total else f"{len(same)} of {total} cells"
    value = first.parts[0].value
    others = [it.label for it in same[1:] if it.parts[0].value.title != value.title]
    detail = f"; details differ for {', '.join(dict.fromkeys(others))}" if others else ""
    title = f"{value.title}\n— {first.label}{detail}" if value.title else ""
    return Item(label, (Part("", replace(value, title=title)),), ", ".join(names))


def rows(cols: list[Column], notes: Notes) -> list[Row]:
    """Four rows (one per layer), an entry per column listing its cells that carry a stack,
    then the specialized kernels each row used for its matmuls."""
    if not any(
        as_dict(as_dict(c.get("evidence")).get("stack")) for col in cols for _, c in col.cells
    ):
        return []
    out = []
    for layer, help_ in LAYERS:
        entries = [
            _distinct([it for _, c in col.cells if (it := _item(c, layer)) is not None])
            for col in cols
        ]
        out.append(Row(layer, help_, entries))
    out.append(Row("specialized kernels for", "the matmul kernels named across its cells",
                   [specialized(col) for col in cols]))  # fmt: skip
    help_ = ("the runtime's defaults that depend on the host (bf16 compute, u8 KV cache, dynamic "
             "quantization, AMX / CPU_REPACK weight repacking), as its cells recorded them")
    out.append(Row("what this host changed", help_, [host_changed(col) for col in cols]))
    return out


def host_changed(col: Column) -> list[Item]:
    """One line per row: the host-dependent defaults its cells ran with."""
    seen: dict[str, int] = {}
    for _, c in col.cells:
        num = as_dict(as_dict(as_dict(c.get("evidence")).get("stack")).get("numerics"))
        for line in num.get("host_changed") or []:
            seen[str(line)] = seen.get(str(line), 0) + 1
    if not seen:
        return [Item("", (Part("", Value("nothing recorded as host-dependent", "")),))]
    text = "; ".join(f"{line} ({n} cell{'s' if n > 1 else ''})" for line, n in seen.items())
    return [Item("", (Part("", Value(text[:600], "", text, None, "v-WARN")),))]
