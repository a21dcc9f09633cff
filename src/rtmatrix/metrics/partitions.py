"""Heterogeneous partitions: where a delegate (an accelerator execution provider) split the graph,
which tensors cross each boundary and how many bytes per token, and how long each partition ran.

Pure functions over a light graph description, unit-tested on hand-built graphs without a runtime
(what a runtime reports is read, and its graph format parsed, in that runtime's home, e.g.
:mod:`rtmatrix.runtimes.onnxruntime.graph_partitions` and
:mod:`rtmatrix.runtimes.onnxruntime.profile`):

- ``Graph``: the nodes (name, op, inputs, outputs) of the graph the runtime partitioned, its
  inputs, outputs and initializers (constants: never counted as traffic).
- ``build_partitions``: partitions from the runtime's assignment record, a list of
  ``(execution provider, node names)`` entries. A compiling delegate reports one entry per fused
  subgraph, and each is one partition; a provider that reports nodes one by one (``merge_eps``,
  e.g. the fallback provider) has its nodes grouped into connected components (nodes joined by a
  tensor one produces and the other consumes). Nodes the record does not name are grouped the same
  way under ``"unassigned"``.
- ``crossings``: every (tensor, producer partition, consumer partition) where the two differ, plus
  graph inputs into and graph outputs out of a partition; a tensor read by two other partitions
  crosses twice. ``tensor_bytes`` turns measured shapes (``{tensor: (dtype, shape)}``) into bytes.
- ``summarize``: the evidence block (partitions, nodes and ops per partition, boundary tensors with
  bytes per phase and per token, time per partition, node coverage of the delegate).
- ``delegate_vs_control``: pairs a delegate-on cell with the delegate-off control cell of the same
  fixture and parameters in a run record; PP/TG ratios, and ``delegate_slower`` flagged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.names import M

GRAPH_INPUT = "graph-input"
GRAPH_OUTPUT = "graph-output"
UNASSIGNED = "unassigned"
# bytes per element by numpy / graph-format type name
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "double": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "uint16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
_MAX_LISTED = 200

Shape = tuple[str, tuple[int, ...]]  # (dtype, dims)


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    domain: str = ""


@dataclass(frozen=True)
class Graph:
    """Nodes in topological order (as ONNX stores them), graph inputs (initializers excluded),
    graph outputs, and the names of initializers (weights, constants)."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    initializers: frozenset[str] = frozenset()

    def producers(self) -> dict[str, str]:
        return {out: n.name for n in self.nodes for out in n.outputs if out}


@dataclass
class Partition:
    id: str
    ep: str
    nodes: list[str]
    #: the delegate's own name for a fused subgraph (from profiling), when known
    subgraph: str | None = None
    #: index among the subgraphs this EP reported (the ``k`` of its profiling events)
    ep_index: int | None = None
    ops: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Crossing:
    tensor: str
    src: str  # partition id or GRAPH_INPUT
    dst: str  # partition id or GRAPH_OUTPUT

    @property
    def kind(self) -> str:
        if self.src == GRAPH_INPUT:
            return GRAPH_INPUT
        if self.dst == GRAPH_OUTPUT:
            return GRAPH_OUTPUT
        return "partition"


def _components(graph: Graph, members: set[str]) -> list[list[str]]:
    """Connected components of ``members`` (node names), joined by tensors produced by one member
    and consumed by another; each in graph order, components ordered by their first node."""
    parent = {m: m for m in members}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    prod = graph.producers()
    for n in graph.nodes:
        if n.name not in members:
            continue
        for t in n.inputs:
            p = prod.get(t)
            if p is not None and p in members:
                a, b = find(p), find(n.name)
                if a != b:
                    parent[a] = b
    groups: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.name in members:
            groups.setdefault(find(n.name), []).append(n.name)
    return list(groups.values())


def build_partitions(
    graph: Graph,
    assignment: Sequence[tuple[str, Sequence[str]]],
    merge_eps: Iterable[str],
) -> list[Partition]:
    """Partitions in graph order (by first node), ids ``P0``, ``P1``, ...; the nodes of the
    providers in ``merge_eps`` grouped into connected components; see the module doc."""
    merge = set(merge_eps)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    known = set(order)
    raw: list[tuple[str, list[str], int | None]] = []
    merged: dict[str, set[str]] = {}
    per_ep_index: dict[str, int] = {}
    seen: set[str] = set()
    for ep, names in assignment:
        inside = [n for n in names if n in known]
        seen.update(inside)
        if ep in merge:
            merged.setdefault(ep, set()).update(inside)
            continue
        k = per_ep_index.get(ep, 0)
        per_ep_index[ep] = k + 1
        if inside:
            raw.append((ep, sorted(inside, key=order.__getitem__), k))
    rest = known - seen
    if rest:
        merged.setdefault(UNASSIGNED, set()).update(rest)
    for ep, members in merged.items():
        raw.extend((ep, comp, None) for comp in _components(graph, members))
    raw.sort(key=lambda r: order[r[1][0]])
    ops_of = {n.name: n.op_type for n in graph.nodes}
    out = []
    for i, (ep, names, index) in enumerate(raw):
        ops: dict[str, int] = {}
        for n in names:
            ops[ops_of[n]] = ops.get(ops_of[n], 0) + 1
        out.append(Partition(f"P{i}", ep, names, ep_index=index, ops=ops))
    return out


def crossings(graph: Graph, partitions: Sequence[Partition]) -> list[Crossing]:
    """Every tensor hand-off between partitions, and graph I/O into and out of them, in graph
    order. Initializers and empty (omitted optional) inputs are not traffic."""
    part_of = {n: p.id for p in partitions for n in p.nodes}
    prod = graph.producers()
    graph_inputs, graph_outputs = set(graph.inputs), set(graph.outputs)
    out: list[Crossing] = []
    seen: set[tuple[str, str, str]] = set()

    def add(t: str, src: str, dst: str) -> None:
        if (t, src, dst) not in seen:
            seen.add((t, src, dst))
            out.append(Crossing(t, src, dst))

    for n in graph.nodes:
        dst = part_of.get(n.name)
        if dst is None:
            continue
        for t in n.inputs:
            if not t or t in graph.initializers:
                continue
            if t in prod:
                src = part_of.get(prod[t])
                if src is not None and src != dst:
                    add(t, src, dst)
            elif t in graph_inputs:
                add(t, GRAPH_INPUT, dst)
    for t in graph.outputs:
        if t in prod and prod[t] in part_of:
            add(t, part_of[prod[t]], GRAPH_OUTPUT)
        elif t in graph_outputs and t in graph_inputs:  # pass-through
            add(t, GRAPH_INPUT, GRAPH_OUTPUT)
    return out


def boundary_tensors(cross: Sequence[Crossing]) -> list[str]:
    """Tensors handed from one partition to another (graph I/O excluded), first-seen order."""
    return list(dict.fromkeys(c.tensor for c in cross if c.kind == "partition"))


def tensor_bytes(shape: Shape) -> int | None:
    dtype, dims = shape
    size = DTYPE_BYTES.get(str(dtype))
    if size is None:
        return None
    return size * math.prod(int(d) for d in dims)


# -- the evidence block ------------------------------------------------------------------------
def _phase_bytes(
    cross: Sequence[Crossing], shapes: Mapping[str, Shape]
) -> dict[Crossing, int | None]:
    return {c: (tensor_bytes(shapes[c.tensor]) if c.tensor in shapes else None) for c in cross}


def _per(value: int | None, n: int) -> float | None:
    return None if value is None else round(value / n, 2)


def _side(b: Mapping[Crossing, int | None], side: str, pid: str, kind: str) -> int | None:
    """Bytes of the crossings of ``kind`` whose ``side`` (src/dst) is partition ``pid``."""
    return _sum(v for c, v in b.items() if getattr(c, side) == pid and c.kind == kind)


def _sum(values: Iterable[int | None]) -> int | None:
    vals = list(values)
    return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)


def summarize(
    graph: Graph,
    partitions: Sequence[Partition],
    delegate: str | None,
    shapes: Mapping[str, Mapping[str, Shape]],
    tokens: Mapping[str, int],
    times: Mapping[str, Mapping[str, float]] | None = None,
    run_us: Mapping[str, float] | None = None,
    unattributed_us: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The evidence block. ``shapes`` and ``tokens`` are per phase (``prefill``: the prompt,
    ``decode``: one token after it); ``times`` per phase and partition id (microseconds)."""
    cross = crossings(graph, partitions)
    phases = list(shapes)
    pbytes = {ph: _phase_bytes(cross, shapes[ph]) for ph in phases}
    per_token = {ph: max(int(tokens.get(ph, 1)), 1) for ph in phases}
    n_total = sum(len(p.nodes) for p in partitions)
    on_delegate = sum(len(p.nodes) for p in partitions if delegate and p.ep == delegate)
    parts_out = []
    for p in partitions:
        entry: dict[str, Any] = {
            "id": p.id,
            "ep": p.ep,
            "subgraph": p.subgraph,
            "nodes": len(p.nodes),
            "ops": dict(sorted(p.ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "first_node": p.nodes[0],
            "last_node": p.nodes[-1],
        }
        if len(p.nodes) <= 8:
            entry["node_names"] = list(p.nodes)
        for ph in phases:
            b = pbytes[ph]

            entry.setdefault("in_bytes", {})[ph] = {
                "from_partitions": _side(b, "dst", p.id, "partition"),
                "from_graph_inputs": _side(b, "dst", p.id, GRAPH_INPUT),
            }
            entry.setdefault("out_bytes", {})[ph] = {
                "to_partitions": _side(b, "src", p.id, "partition"),
                "to_graph_outputs": _side(b, "src", p.id, GRAPH_OUTPUT),
            }
            if times is not None and ph in times:
                entry.setdefault("time_us", {})[ph] = round(float(times[ph].get(p.id, 0.0)), 1)
        parts_out.append(entry)
    tensors: dict[str, dict[str, Any]] = {}
    for c in cross:
        if c.kind != "partition":
            continue
        t = tensors.setdefault(c.tensor, {"tensor": c.tensor, "from": c.src, "to": []})
        t["to"].append(c.dst)
    for t in tensors.values():
        for ph in phases:
            s = shapes[ph].get(t["tensor"])
            t.setdefault("dtype", s[0] if s else None)
            t.setdefault("shape", {})[ph] = list(s[1]) if s else None
            one = tensor_bytes(s) if s else None
            crossed = None if one is None else one * len(t["to"])
            t.setdefault("bytes", {})[ph] = crossed
            t.setdefault("bytes_per_token", {})[ph] = _per(crossed, per_token[ph])
    total = {ph: _sum(v for c, v in pbytes[ph].items() if c.kind == "partition") for ph in phases}
    io = {ph: _sum(v for c, v in pbytes[ph].items() if c.kind != "partition") for ph in phases}
    out: dict[str, Any] = {
        "role": "delegate" if delegate else "control",
        "delegate": delegate,
        "partitions": len(partitions),
        "delegate_partitions": sum(1 for p in partitions if delegate and p.ep == delegate),
        "coverage": {
            "nodes_total": n_total,
            "nodes_on_delegate": on_delegate,
            "pct": round(100.0 * on_delegate / n_total, 2) if n_total else None,
        },
        "nodes_by_ep": _count_by_ep(partitions),
        "tokens": dict(tokens),
        "boundary_tensors": len(tensors),
        "crossings": sum(len(t["to"]) for t in tensors.values()),
        "boundary_bytes": total,
        "boundary_bytes_per_token": {ph: _per(total[ph], per_token[ph]) for ph in phases},
        "graph_io_bytes": io,
        "per_partition": parts_out,
        "tensors": list(tensors.values())[:_MAX_LISTED],
    }
    if len(tensors) > _MAX_LISTED:
        out["tensors_left_out"] = len(tensors) - _MAX_LISTED
    if times is not None:
        out["time_us"] = {}
        for ph, per in times.items():
            in_parts = sum(per.values())
            entry_t: dict[str, Any] = {"in_partitions": round(in_parts, 1)}
            if delegate:
                entry_t["on_delegate"] = round(
                    sum(v for pid, v in per.items() if _ep_of(partitions, pid) == delegate), 1
                )
            if run_us and ph in run_us:
                entry_t["run"] = round(run_us[ph], 1)
                entry_t["outside_partitions"] = round(run_us[ph] - in_parts, 1)
            if unattributed_us and ph in unattributed_us:
                entry_t["unattributed_events"] = round(unattributed_us[ph], 1)
            out["time_us"][ph] = entry_t
    return out


def _ep_of(partitions: Sequence[Partition], pid: str) -> str | None:
    return next((p.ep for p in partitions if p.id == pid), None)


def _count_by_ep(partitions: Sequence[Partition]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in partitions:
        out[p.ep] = out.get(p.ep, 0) + len(p.nodes)
    return out


# -- delegate on vs off, across cells ----------------------------------------------------------
def _pairing_key(cell: Mapping[str, Any]) -> str:
    """The same model file (its sha256, else name/dtype/variant) with the same parameters."""
    fx = cell.get("fixture") or {}
    what = fx.get("sha256") or [fx.get("name"), fx.get("dtype"), fx.get("variant")]
    return json.dumps([what, cell.get("params")], sort_keys=True)


def _metric(cell: Mapping[str, Any], key: str) -> float | None:
    m = (cell.get("metrics") or {}).get(key) or {}
    v = m.get("value")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _range(cell: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    stats = ((cell.get("metrics") or {}).get(key) or {}).get("stats") or {}
    lo, hi = stats.get("min"), stats.get("max")
    return (float(lo), float(hi)) if lo is not None and hi is not None else None


def delegate_vs_control(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each delegate-on cell beside the delegate-off control cell of the same fixture and
    parameters (cells whose ``evidence.partitions.role`` says which), with PP/TG ratios
    (delegate / control medians; < 1 = the delegate is slower), ``delegate_slower`` flags and
    ``slower_beyond_spread`` (every delegate sample below every control sample)."""
    controls: dict[str, Mapping[str, Any]] = {}
    for c in cells:
        part = (c.get("evidence") or {}).get("partitions") or {}
        if part.get("role") == "control" and c.get("outcome", {}).get("status") == "ok":
            controls.setdefault(_pairing_key(c), c)
    rows = []
    for c in cells:
        part = (c.get("evidence") or {}).get("partitions") or {}
        if part.get("role") != "delegate":
            continue
        ctl = controls.get(_pairing_key(c))
        row: dict[str, Any] = {
            "fixture": (c.get("fixture") or {}).get("name"),
            "variant": (c.get("fixture") or {}).get("variant"),
            "delegate_runtime": c.get("runtime"),
            "delegate_outcome": (c.get("outcome") or {}).get("status"),
            "control_runtime": ctl.get("runtime") if ctl else None,
            "partitions": part.get("partitions"),
            "coverage_pct": (part.get("coverage") or {}).get("pct"),
            "boundary_tensors": part.get("boundary_tensors"),
            "boundary_bytes_per_token": part.get("boundary_bytes_per_token"),
            "time_us": part.get("time_us"),
        }
        for key, label in ((M.PP_TPS, "pp"), (M.TG_TPS, "tg")):
            on = _metric(c, key)
            off = _metric(ctl, key) if ctl else None
            ratio = on / off if on and off else None
            row[f"{label}_tps"] = {"delegate": on, "control": off}
            row[f"{label}_ratio"] = round(ratio, 3) if ratio is not None else None
            row.setdefault("delegate_slower", {})[label] = (
                None if ratio is None else bool(ratio < 1.0)
            )
            r_on, r_off = _range(c, key), (_range(ctl, key) if ctl else None)
            row.setdefault("slower_beyond_spread", {})[label] = (
                None if r_on is None or r_off is None else bool(r_on[1] < r_off[0])
            )
        paired = part.get("paired_control") or {}
        if "pp_ratio_median" in paired:
            row["paired"] = {
                k: paired.get(k)
                for k in ("pp_ratio_median", "tg_ratio_median", "delegate_slower", "rounds")
            }
        if ctl is None:
            row["reason"] = "no ok control cell (delegate disabled) with this fixture and params"
        rows.append(row)
    return rows
