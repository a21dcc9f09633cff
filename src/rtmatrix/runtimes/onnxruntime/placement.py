"""Where ONNX Runtime ran the work: the pure parts of the ORT rows' placement evidence.

ORT's verbose "Node placements" log lines, provider lists as the session takes them, contiguous
partitions of an execution order, and the fallback rule. Used by the ``onnxruntime`` and
``onnxruntime_openvino`` rows and by ``onnxruntime_genai`` (whose ORT session logs the same
lines); unit-tested without a runtime.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

CPU = "CPUExecutionProvider"
_PLACED = re.compile(
    r"(?:All nodes|Node\(s\)) placed on \[(?P<ep>[^\]]+)\]\. Number of nodes: (?P<n>\d+)"
)


def parse_placement_log(lines: Sequence[str]) -> dict[str, int]:
    """Per-provider node counts from ORT's verbose "Node placements" log."""
    counts: dict[str, int] = {}
    for line in lines:
        m = _PLACED.search(line)
        if m:
            counts[m.group("ep")] = counts.get(m.group("ep"), 0) + int(m.group("n"))
    return counts


def count_partitions(providers_in_order: Sequence[str]) -> int:
    """Maximal runs of consecutive nodes on the same provider."""
    runs, prev = 0, None
    for ep in providers_in_order:
        if ep != prev:
            runs += 1
            prev = ep
    return runs


def provider_names(providers: Sequence[Any]) -> list[str]:
    return [p if isinstance(p, str) else str(p[0]) for p in providers]


def judge_fallback(
    requested: Sequence[str], used: Sequence[str], nodes: dict[str, int] | None, explicit: bool
) -> tuple[bool, list[str]]:
    """A requested accelerator provider the session dropped, or gave no node, is a fallback.
    Only an explicit request can fall back; the default list is "whatever is there"."""
    problems = []
    for ep in requested:
        if ep == CPU:
            continue
        if ep not in used:
            problems.append(f"{ep} not registered in the session")
        elif nodes is not None and nodes.get(ep, 0) == 0:
            problems.append(f"{ep} registered but assigned no node")
    return explicit and bool(problems), problems
