"""The host side: what a Dask worker runs for one cell.

:func:`run_cell_remote` is submitted by reference (``rtmatrix.fleet.remote.run_cell_remote``), so
the host imports its own rtmatrix; it runs exactly the local path
(:func:`rtmatrix.runner.orchestrate.run_cell`: the fixture is built and cached *on the host* by
its content hash, a worker subprocess of its own with the matrix's caps and timeout) and returns
the record with the host's machine profile. A job of another protocol or schema version, or a
host that is not what the cell's target expects, is refused before anything runs.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

from rtmatrix import __version__
from rtmatrix.fleet.payload import CellJob, CellReply, cell_from_json, version_mismatch
from rtmatrix.matrix import Cell, Matrix, Target
from rtmatrix.metrics import host, package
from rtmatrix.outcome import Status
from rtmatrix.protocol import PROTOCOL_VERSION, ProtocolError
from rtmatrix.runner.classify import not_run
from rtmatrix.runner.orchestrate import RunContext, run_cell
from rtmatrix.runner.process import describe_adapter
from rtmatrix.runner.record import Finished, base_record, cell_record


@cache
def _machine() -> dict[str, Any]:
    return host.machine_info()


@cache
def _describe(adapter: str) -> dict[str, Any]:
    """The adapter as installed on this host, with its runtime's version here."""
    info = describe_adapter(adapter)
    dist = info.get("distribution")
    return info | {"version": package.version(dist) if dist else None}


def _worker() -> tuple[str | None, str | None]:
    try:
        from distributed import get_worker

        w = get_worker()
    except (ImportError, ValueError):
        return None, None  # called outside a Dask worker (tests, a plain process)
    return str(w.address), str(w.name)


def host_block(runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """Who ran the cell: the worker, its machine profile, the runtime and rtmatrix there."""
    address, name = _worker()
    out: dict[str, Any] = {
        "worker": address,
        "name": name,
        "machine": _machine(),
        "rtmatrix_version": __version__,
        "protocol": PROTOCOL_VERSION,
        "python": sys.executable,
    }
    if runtime is not None:
        keep = ("distribution", "version", "extra", "container", "error")
        out["runtime"] = {k: runtime[k] for k in keep if k in runtime}
    return out


def _refused(why: str) -> dict[str, Any]:
    return CellReply(host=host_block(), refused=why).to_dict()


def _not_this_host(cell: Cell, info: dict[str, Any], why: str) -> dict[str, Any]:
    address, name = _worker()
    msg = f"worker {address} ({name}) does not match: {why}; check which host holds that label"
    fin = Finished(cell, not_run(Status.UNAVAILABLE, "target", msg))
    return cell_record(fin, base_record(cell, info.get("container")), info.get("distribution"))


def run_cell_remote(payload: dict[str, Any]) -> dict[str, Any]:
    """One cell on this host: check the job, run it as the local runner does, return the
    :class:`~rtmatrix.fleet.payload.CellReply` as a dict."""
    mismatch = version_mismatch(payload, "the job")
    if mismatch:
        return _refused(mismatch)
    try:
        job = CellJob.from_dict(payload)
        cell = cell_from_json(job.cell)
    except (ProtocolError, KeyError, ValueError) as exc:
        return _refused(f"the job cannot be read here: {exc}")
    info = _describe(cell.adapter)
    target = Target(**job.target) if job.target else None
    why = target.mismatch(_machine()) if target else None
    if why:
        return CellReply(host=host_block(info), record=_not_this_host(cell, info, why)).to_dict()
    matrix = Matrix(Path("<fleet job>"), dict(cell.run), {}, [], [], power=dict(job.power))
    ctx = RunContext(matrix, {"cells": []}, {cell.runtime: info})
    record = run_cell(ctx, cell)
    return CellReply(host=host_block(info), record=record).to_dict()
