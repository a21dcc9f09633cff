"""``rtmatrix merge``: runs made separately on different machines -> one run file.

Every cell is keyed by its target: a cell that has one keeps it (a ``--target`` or cluster run);
the cells of a run without targets take the part's label (``LABEL=RUN.json``, else the host name
the run recorded). Each cell gets a ``host`` block (that part's machine and runtime) and each part's
provenance is kept whole in ``parts[]``; the merged file's own ``machine`` and ``project`` are
where the merge was made.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from rtmatrix.fleet.security import FleetError
from rtmatrix.matrix import key_with_target
from rtmatrix.matrix.targets import LABEL
from rtmatrix.results import SCHEMA_VERSION, load_run

RUNTIME_KEYS = ("distribution", "version", "extra", "container", "error")


def parse_part(arg: str) -> tuple[Path, str | None]:
    """``RUN.json`` or ``LABEL=RUN.json`` (a path that exists as given wins)."""
    label, sep, rest = arg.partition("=")
    if sep and not Path(arg).exists() and LABEL.match(label):
        return Path(rest), label
    return Path(arg), None


def _host_label(run: dict[str, Any], path: Path) -> str:
    name = str(run.get("machine", {}).get("hostname") or "")
    label = re.sub(r"[^A-Za-z0-9_.-]", "-", name).strip("-.")
    if not label or not LABEL.match(label):
        msg = f"{path}: its cells have no target and no host name; give one: LABEL={path}"
        raise FleetError(msg)
    return label


def _host(run: dict[str, Any], cell: dict[str, Any], index: int) -> dict[str, Any]:
    if "host" in cell:
        return dict(cell["host"]) | {"part": index}
    rt = run.get("runtimes", {}).get(cell["runtime"], {})
    return {
        "worker": None,
        "name": run.get("machine", {}).get("hostname"),
        "machine": run.get("machine", {}),
        "runtime": {k: rt[k] for k in RUNTIME_KEYS if k in rt},
        "rtmatrix_version": str(run.get("project", {}).get("rtmatrix_version")),
        "part": index,
    }


def _part_cells(
    run: dict[str, Any], path: Path, label: str | None, index: int
) -> list[dict[str, Any]]:
    out = []
    for cell in run["cells"]:
        c = dict(cell)
        if "target" not in c:
            c["target"] = label or _host_label(run, path)
            c["key"] = key_with_target(c["key"], c["target"])
        c["host"] = _host(run, cell, index)
        out.append(c)
    return out


def _provenance(run: dict[str, Any], path: Path, label: str | None) -> dict[str, Any]:
    keep = ("run_id", "created_utc", "finished_utc", "status", "matrix", "machine", "project")
    out = {k: run[k] for k in keep if k in run}
    out |= {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "target": label,
        "runtimes": run.get("runtimes", {}),
        "n_cells": len(run["cells"]),
    }
    if "fleet" in run:
        out["fleet"] = run["fleet"]
    return out


def _matrix(runs: list[dict[str, Any]], n_cells: int) -> dict[str, Any]:
    shas = {r["matrix"]["sha256"] for r in runs}
    if len(shas) == 1:
        return dict(runs[0]["matrix"]) | {"n_cells": n_cells}
    paths = list(dict.fromkeys(str(r["matrix"]["path"]) for r in runs))
    return {
        "path": " + ".join(paths),
        "sha256": "",
        "n_cells": n_cells,
        "description": f"merged from runs of {len(shas)} different matrix files (see parts)",
    }


def _skipped(run: dict[str, Any], label: str | None, path: Path) -> list[dict[str, Any]]:
    if any("target" in c for c in run["cells"]) or not run.get("skipped"):
        return list(run.get("skipped", []))
    tgt = label or _host_label(run, path)
    return [s | {"key": key_with_target(s["key"], tgt)} for s in run["skipped"]]


def merge_runs(parts: Sequence[tuple[Path, str | None]]) -> dict[str, Any]:
    """One run record from the given (path, label) parts; FleetError on a cell two parts hold."""
    from rtmatrix.metrics.host import machine_info, project_info

    if not parts:
        msg = "rtmatrix merge: give at least one RUN.json"
        raise FleetError(msg)
    # the merge copies each part's record key by key, whatever keys it holds: plain dicts
    runs = [cast(dict[str, Any], load_run(path)) for path, _ in parts]
    cells: list[dict[str, Any]] = []
    owner: dict[str, Path] = {}
    runtimes: dict[str, Any] = {}
    skipped: dict[str, dict[str, Any]] = {}
    for i, (run, (path, label)) in enumerate(zip(runs, parts, strict=True)):
        for c in _part_cells(run, path, label, i):
            if c["key"] in owner:
                msg = (
                    f"cell {c['key']} is in {owner[c['key']]} and {path}: give the parts "
                    "different targets (LABEL=RUN.json)"
                )
                raise FleetError(msg)
            owner[c["key"]] = path
            cells.append(c)
        for name, rt in run.get("runtimes", {}).items():
            runtimes.setdefault(name, rt)
        for s in _skipped(run, label, path):
            skipped.setdefault(s["key"], s)
    now = datetime.now(UTC)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex(),
        "created_utc": now.isoformat(),
        "finished_utc": now.isoformat(),
        "status": "complete" if all(r["status"] == "complete" for r in runs) else "interrupted",
        "matrix": _matrix(runs, len(cells)),
        "machine": machine_info(),
        "project": project_info(),
        "runtimes": runtimes,
        "skipped": list(skipped.values()),
        "cells": cells,
        "parts": [
            _provenance(run, path, label) for run, (path, label) in zip(runs, parts, strict=True)
        ],
    }
