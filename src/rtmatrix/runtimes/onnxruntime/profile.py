"""ONNX Runtime's profiling JSON (``SessionOptions.enable_profiling``), read for placement and
partition evidence: which provider ran each node, runs split by ``model_run``, time per partition,
tensor shapes as ORT reports them, and what ORT hands each fused delegate subgraph.

Pure functions over the parsed JSON (a list of trace events), unit-tested without a runtime; the
partitions themselves are the generic graph arithmetic of :mod:`rtmatrix.metrics.partitions`.

- ``parse_profile``: per-provider node counts and contiguous partitions of the first run.
- ``partition_times``: microseconds per partition per run: fused subgraph events
  (``<EP>_<subgraph>_<k>_kernel_time``; ``k`` = the k-th subgraph of that EP in the assignment
  record) and plain node events (``<node>_kernel_time``), split by ``model_run``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rtmatrix.metrics.partitions import Graph, Partition, Shape
from rtmatrix.runtimes.onnxruntime.placement import count_partitions

KERNEL_SUFFIX = "_kernel_time"
# ORT's profiler names element types as ONNX does; numpy's names are used in the evidence
_ORT_TYPE_NAMES = {"float": "float32", "double": "float64"}


def parse_profile(events: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], int]:
    """Per-provider node counts and contiguous partitions from an ORT profiling JSON: the node
    kernel events of the first run, in execution order."""
    nodes: list[tuple[float, str, str]] = []
    seen: set[str] = set()
    for ev in events:
        args = ev.get("args") or {}
        name = str(ev.get("name", ""))
        if ev.get("cat") != "Node" or "provider" not in args or not name.endswith(KERNEL_SUFFIX):
            continue
        if name in seen:  # later runs repeat the same nodes
            continue
        seen.add(name)
        nodes.append((float(ev.get("ts", 0)), name, str(args["provider"])))
    nodes.sort()
    order = [ep for _, _, ep in nodes]
    counts: dict[str, int] = {}
    for ep in order:
        counts[ep] = counts.get(ep, 0) + 1
    return counts, count_partitions(order)


def profile_runs(events: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The node kernel events of each ``model_run``, runs in time order."""
    runs = sorted(
        (float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0)), e)
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    out: list[list[Mapping[str, Any]]] = [[] for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith(KERNEL_SUFFIX):
            continue
        ts = float(e.get("ts", 0))
        for i, (t0, t1, _) in enumerate(runs):
            if t0 <= ts <= t1:
                out[i].append(e)
                break
    return out


def run_durations(events: Sequence[Mapping[str, Any]]) -> list[float]:
    return [
        float(e.get("dur", 0))
        for e in sorted(events, key=lambda e: float(e.get("ts", 0)))
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    ]


def _fused_index(name: str, provider: str, op_name: str) -> int | None:
    """``k`` of ``<provider>_<op_name>_<k>_kernel_time``."""
    pattern = re.escape(f"{provider}_{op_name}_") + r"(\d+)" + re.escape(KERNEL_SUFFIX)
    m = re.fullmatch(pattern, name)
    return int(m.group(1)) if m else None


def partition_times(
    run_events: Sequence[Mapping[str, Any]], partitions: Sequence[Partition]
) -> tuple[dict[str, float], float, list[str]]:
    """Microseconds per partition id for one run's node events, the unattributed microseconds,
    and the names of unattributed events. Names the fused subgraph of a partition (``subgraph``)
    from the event's ``op_name`` as a side effect."""
    part_of_node = {n: p.id for p in partitions for n in p.nodes}
    by_ep_index = {(p.ep, p.ep_index): p for p in partitions if p.ep_index is not None}
    times: dict[str, float] = {p.id: 0.0 for p in partitions}
    other, missed = 0.0, []
    for e in run_events:
        name = str(e.get("name", ""))
        args = e.get("args") or {}
        provider, op_name = str(args.get("provider", "")), str(args.get("op_name", ""))
        dur = float(e.get("dur", 0))
        node = name[: -len(KERNEL_SUFFIX)]
        # a node fused after partitioning is named "<first original node>/<Fusion>/"
        pid = part_of_node.get(node, part_of_node.get(node.split("/", 1)[0]))
        if pid is None:
            k = _fused_index(name, provider, op_name)
            part = by_ep_index.get((provider, k)) if k is not None else None
            if part is not None:
                part.subgraph = op_name
                pid = part.id
        if pid is None:
            other += dur
            missed.append(name)
        else:
            times[pid] += dur
    return times, other, missed


def shapes_from_profile(run_events: Sequence[Mapping[str, Any]], graph: Graph) -> dict[str, Shape]:
    """Tensor shapes as ORT reports them for one run: each node event's ``output_type_shape``
    (``[{dtype: dims}, ...]``, one per present output) matched to that node's outputs in the
    graph. A node whose event lists another number of outputs is skipped (no guessing)."""
    nodes = {n.name: n for n in graph.nodes}
    out: dict[str, Shape] = {}
    for e in run_events:
        node = nodes.get(str(e.get("name", ""))[: -len(KERNEL_SUFFIX)])
        types = (e.get("args") or {}).get("output_type_shape")
        if node is None or not isinstance(types, list):
            continue
        names = [t for t in node.outputs if t]
        if len(names) != len(types):
            continue
        for name, entry in zip(names, types, strict=True):
            if isinstance(entry, dict) and len(entry) == 1:
                ((dtype, dims),) = entry.items()
                dtype = _ORT_TYPE_NAMES.get(str(dtype), str(dtype))
                out[name] = (dtype, tuple(int(d) for d in dims))
    return out


def fused_node_args(
    run_events: Sequence[Mapping[str, Any]], partitions: Sequence[Partition]
) -> dict[str, dict[str, int]]:
    """What ORT hands each fused delegate subgraph per run, from its profiling event (after
    ``partition_times`` named the subgraphs): number of inputs and outputs, and ORT's own
    ``parameter_size`` (bytes of initializers passed in as inputs), ``activation_size`` and
    ``output_size``."""
    by_sub = {p.subgraph: p.id for p in partitions if p.subgraph}
    out: dict[str, dict[str, int]] = {}
    for e in run_events:
        args = e.get("args") or {}
        pid = by_sub.get(str(args.get("op_name", "")))
        if pid is None:
            continue
        entry = {
            "inputs": len(args.get("input_type_shape") or []),
            "outputs": len(args.get("output_type_shape") or []),
        }
        for key, label in (
            ("parameter_size", "parameter_bytes"),
            ("activation_size", "activation_bytes"),
            ("output_size", "output_bytes"),
        ):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                entry[label] = int(args[key])
        out[pid] = entry
    return out
