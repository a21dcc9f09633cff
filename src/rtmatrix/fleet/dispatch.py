"""The parent side of a fleet run: submit each cell to a Dask worker holding its target's
resource, merge the records into the one run file as they finish, and record the faults of a
fleet as outcomes.

- a host that dies mid-cell (``distributed.KilledWorker``; the scheduler should run with
  ``distributed.scheduler.allowed-failures = 0``) -> ``host-lost`` naming the worker, no retry
  unless ``[cluster] host_lost_retries`` asks for one;
- no worker holding a label for ``[cluster] no_workers_timeout_s`` (or the scheduler's own
  ``NoValidWorkerError``) -> ``unavailable`` with the reason;
- a host with another protocol or schema version -> ``unavailable`` naming both versions.

Ctrl-C cancels what is pending and keeps what finished (``--resume`` runs the rest); a cell
already running on a host finishes there (within its ``timeout_s``) and is discarded.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix.fleet.payload import CellJob, CellReply, cell_to_json, version_mismatch
from rtmatrix.fleet.security import FleetError, check_workers, security_for
from rtmatrix.matrix import Cell, ClusterConfig, Matrix
from rtmatrix.names import M
from rtmatrix.outcome import Metric, Status
from rtmatrix.protocol import ProtocolError
from rtmatrix.results import save_run
from rtmatrix.runner.classify import not_run
from rtmatrix.runner.orchestrate import OpenedRun, close_run, open_run
from rtmatrix.runner.record import Finished, base_record, cell_record, progress_line

Progress = Callable[[str], None]
#: how often the parent looks for finished cells, and for labels no worker holds
POLL_S = 0.1
WATCH_S = 1.0
REMOTE_FUNCTION = "rtmatrix.fleet.remote:run_cell_remote"


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Submitted:
    cell: Cell
    label: str | None
    #: the workers lost while running this cell so far (one per attempt)
    lost: list[str] = field(default_factory=list)


@dataclass
class Fleet:
    """The state of one fleet run."""

    client: Any
    address: str
    opened: OpenedRun
    cluster: ClusterConfig
    progress: Progress
    pending: dict[str, tuple[Any, Submitted]] = field(default_factory=dict)
    #: futures rtmatrix cancelled itself (no worker for the label), with the reason
    cancelled: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    absent_since: dict[str, float] = field(default_factory=dict)
    allowed_failures: Any = None
    scheduler_lost: str | None = None
    n_submitted: int = 0
    #: in every task key: a resumed run never reuses a key a cancelled task may still hold
    token: str = field(default_factory=lambda: os.urandom(3).hex())

    @property
    def record(self) -> dict[str, Any]:
        return self.opened.ctx.record


def connect(address: str, cluster: ClusterConfig) -> tuple[Any, bool]:
    """A client of the scheduler (TLS unless all is loopback); and whether TLS is used."""
    security, files = security_for(address, cluster)
    from distributed import Client

    try:
        client = Client(
            address,
            security=security,
            timeout=cluster.connect_timeout_s,
            set_as_default=False,
        )
    except (OSError, TimeoutError) as exc:
        msg = (
            f"cannot reach the scheduler at {address} within {cluster.connect_timeout_s:.0f} s: "
            f"{exc}"
        )
        raise FleetError(msg) from None
    return client, files is not None


def _workers(fleet: Fleet) -> dict[str, dict[str, Any]]:
    workers: dict[str, dict[str, Any]] = fleet.client.scheduler_info(n_workers=-1)["workers"]
    for addr, w in workers.items():
        fleet.names[addr] = str(w.get("name"))
    return workers


def _worker_text(fleet: Fleet, address: str | None) -> str:
    if not address:
        return "an unknown worker"
    name = fleet.names.get(address)
    return f"{address} ({name})" if name and name != address else address


def _submit(fleet: Fleet, cell: Cell, sub: Submitted | None = None) -> None:
    from rtmatrix.fleet.remote import run_cell_remote  # pickled by reference: importable there

    matrix = fleet.opened.ctx.matrix
    sub = sub or Submitted(cell, cell.target)
    job = CellJob(
        cell=cell_to_json(cell),
        target=matrix.target(cell.target).to_dict() if cell.target else None,
        power=dict(matrix.power),
    )
    fleet.n_submitted += 1
    key = f"rtmatrix-{fleet.record['run_id']}-{fleet.token}-{fleet.n_submitted}"
    fut = fleet.client.submit(
        run_cell_remote,
        job.to_dict(),
        key=key,
        resources={sub.label: 1} if sub.label else None,
        pure=False,
    )
    fleet.pending[fut.key] = (fut, sub)


def _not_run(
    fleet: Fleet, sub: Submitted, status: Status, phase: str, message: str, worker: str | None
) -> dict[str, Any]:
    """The record of a cell no host measured, built on the parent."""
    cell = sub.cell
    info = fleet.opened.ctx.describe[cell.runtime]
    rec = cell_record(
        Finished(cell, not_run(status, phase, message)),
        base_record(cell, info.get("container")),
        None,
    )
    why = f"not measured: no host ran the cell ({status})"
    rec["metrics"][str(M.PACKAGE_SIZE)] = Metric.unavailable("bytes", why).to_dict()
    rec["metrics"][str(M.LICENSE)] = Metric.unavailable("spdx", why).to_dict()
    rec["host"] = {"worker": worker, "name": fleet.names.get(worker or "")} | _lost(sub)
    return rec


def _lost(sub: Submitted) -> dict[str, Any]:
    return {"lost": list(sub.lost)} if sub.lost else {}


def _from_reply(fleet: Fleet, sub: Submitted, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        msg = f"the host answered {type(data).__name__}, not a fleet reply"
        return _not_run(fleet, sub, Status.ERROR, "protocol", msg, None)
    worker = (data.get("host") or {}).get("worker")
    mismatch = version_mismatch(data, f"the host {_worker_text(fleet, worker)}")
    if mismatch:
        return _not_run(fleet, sub, Status.UNAVAILABLE, "protocol", mismatch, worker)
    try:
        reply = CellReply.from_dict(data)
    except ProtocolError as exc:
        return _not_run(fleet, sub, Status.ERROR, "protocol", str(exc), worker)
    if reply.refused or reply.record is None:
        why = f"the host {_worker_text(fleet, worker)} refused the cell: {reply.refused}"
        refused = _not_run(fleet, sub, Status.UNAVAILABLE, "protocol", why, worker)
        refused["host"] = reply.host | _lost(sub)  # who refused, and what it is
        return refused
    rec = reply.record
    if rec.get("key") != sub.cell.key:
        why = f"the host returned the record of {rec.get('key')!r}, not {sub.cell.key!r}"
        return _not_run(fleet, sub, Status.ERROR, "protocol", why, worker)
    rec["host"] = reply.host | _lost(sub)
    return rec


def _host_lost(fleet: Fleet, sub: Submitted, exc: Any) -> dict[str, Any] | None:
    """A KilledWorker: resubmit while ``host_lost_retries`` allows, else the ``host-lost``
    record naming the worker."""
    last = getattr(exc, "last_worker", None)
    worker = str(getattr(last, "address", "") or "") or None
    sub.lost.append(_worker_text(fleet, worker))
    if len(sub.lost) <= fleet.cluster.host_lost_retries:
        fleet.progress(f"rtmatrix: {sub.cell.key}: host {sub.lost[-1]} lost; resubmitting")
        _submit(fleet, sub.cell, sub)
        return None
    msg = (
        f"host lost mid-cell: worker {_worker_text(fleet, worker)} left the cluster while "
        f"running the cell (scheduler allowed-failures {fleet.allowed_failures}); nothing it "
        "measured came back"
    )
    if len(sub.lost) > 1:
        msg += f" (attempt {len(sub.lost)}; lost before: {', '.join(sub.lost[:-1])})"
    return _not_run(fleet, sub, Status.HOST_LOST, "host", msg, worker)


def _errored(fleet: Fleet, sub: Submitted, fut: Any) -> dict[str, Any] | None:
    from distributed import KilledWorker
    from distributed.scheduler import NoValidWorkerError

    exc = fut.exception()
    if isinstance(exc, KilledWorker):
        return _host_lost(fleet, sub, exc)
    if isinstance(exc, NoValidWorkerError):
        why = f"no worker holds resource {sub.label!r} on {fleet.address}: {exc}"
        return _not_run(fleet, sub, Status.UNAVAILABLE, "schedule", why, None)
    tb = "".join(traceback.format_tb(fut.traceback()))[-4000:]
    if isinstance(exc, ImportError):
        why = (
            f"the host cannot import {REMOTE_FUNCTION}: {exc}; install the same rtmatrix "
            "release on every host"
        )
        rec = _not_run(fleet, sub, Status.UNAVAILABLE, "host", why, None)
    else:
        why = f"the host failed to run the cell: {type(exc).__name__}: {exc}"
        rec = _not_run(fleet, sub, Status.ERROR, "host", why, None)
    rec["evidence"]["traceback_tail"] = tb
    return rec


def _finished(fleet: Fleet, fut: Any) -> dict[str, Any] | None:
    """The record of a future that is done, or None when there is none to keep (resubmitted;
    cancelled because the scheduler went away)."""
    _, sub = fleet.pending.pop(fut.key)
    if fut.status == "finished":
        return _from_reply(fleet, sub, fut.result())
    if fut.status == "cancelled":
        why = fleet.cancelled.pop(fut.key, None)
        if why is None:
            fleet.scheduler_lost = fleet.scheduler_lost or f"it cancelled {sub.cell.key}"
            return None
        return _not_run(fleet, sub, Status.UNAVAILABLE, "schedule", why, None)
    return _errored(fleet, sub, fut)


def _no_worker_reason(fleet: Fleet, label: str, workers: dict[str, dict[str, Any]]) -> str:
    seen = [
        f"{w.get('name')} ({', '.join(w.get('resources') or {}) or 'no resources'})"
        for w in workers.values()
    ]
    return (
        f"no worker holding resource {label!r} on {fleet.address} for "
        f"{fleet.cluster.no_workers_timeout_s:.0f} s (workers: {', '.join(seen) or 'none'}); "
        f"start one there with: dask worker {fleet.address} --resources '{label}=1' --nthreads 1"
    )


def _watch(fleet: Fleet) -> None:
    """Cancel the cells of a label no worker has held for ``no_workers_timeout_s``."""
    try:
        workers = _workers(fleet)
    except (OSError, TimeoutError) as exc:
        fleet.scheduler_lost = f"scheduler_info failed: {exc}"
        return
    held = {res for w in workers.values() for res in (w.get("resources") or {})}
    now = time.monotonic()
    waiting = {sub.label for _, sub in fleet.pending.values() if sub.label}
    for label in waiting:
        if label in held:
            fleet.absent_since.pop(label, None)
            continue
        since = fleet.absent_since.setdefault(label, now)
        if now - since < fleet.cluster.no_workers_timeout_s:
            continue
        why = _no_worker_reason(fleet, label, workers)
        futs = [f for f, sub in fleet.pending.values() if sub.label == label]
        fleet.cancelled |= {f.key: why for f in futs}
        fleet.client.cancel(futs)
        fleet.absent_since.pop(label, None)


def _keep(fleet: Fleet, rec: dict[str, Any], cell: Cell) -> None:
    record = fleet.record
    record["cells"].append(rec)
    save_run(record, fleet.opened.path, skip_cells=len(record["cells"]) - 1)
    fleet.progress(progress_line(len(record["cells"]), len(fleet.opened.cells), cell, rec))


def _loop(fleet: Fleet) -> None:
    from distributed import as_completed

    ac = as_completed([f for f, _ in fleet.pending.values()], loop=fleet.client.loop)
    next_watch = 0.0
    while fleet.pending and fleet.scheduler_lost is None:
        batch = ac.next_batch(block=False) if ac.has_ready() else []
        for fut in batch:
            cell = fleet.pending[fut.key][1].cell
            before = set(fleet.pending)
            rec = _finished(fleet, fut)
            for key in set(fleet.pending) - before:  # a resubmitted cell
                ac.add(fleet.pending[key][0])
            if rec is not None:
                _keep(fleet, rec, cell)
        if fleet.client.status not in ("running", "connecting"):
            fleet.scheduler_lost = f"the client is {fleet.client.status}"
        if time.monotonic() >= next_watch:
            _watch(fleet)
            next_watch = time.monotonic() + WATCH_S
        if not batch:
            time.sleep(POLL_S)


def _header(fleet: Fleet, tls: bool) -> None:
    import dask.config

    workers = _workers(fleet)
    check_workers(fleet.address, tls, list(workers))
    fleet.allowed_failures = fleet.client.run_on_scheduler(
        dask.config.get, "distributed.scheduler.allowed-failures"
    )
    matrix = fleet.opened.ctx.matrix
    fleet.record["fleet"] = {
        "cluster": fleet.address,
        "tls": tls,
        "allowed_failures": fleet.allowed_failures,
        "no_workers_timeout_s": fleet.cluster.no_workers_timeout_s,
        "targets": {t.label: t.to_dict() for t in matrix.targets},
        "workers": [
            {"address": a, "name": w.get("name"), "resources": w.get("resources") or {}}
            for a, w in workers.items()
        ],
    }
    held = {r for w in workers.values() for r in (w.get("resources") or {})}
    fleet.progress(
        f"rtmatrix: cluster {fleet.address} ({'TLS' if tls else 'plain TCP on loopback'}): "
        f"{len(workers)} worker(s); resources held: {', '.join(sorted(held)) or 'none'}"
    )
    if fleet.allowed_failures != 0:
        fleet.progress(
            f"rtmatrix: note: the scheduler's allowed-failures is {fleet.allowed_failures}, so a "
            "lost host's cell is rerun elsewhere before it is recorded host-lost; start the "
            "scheduler with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0"
        )


def _interrupted(fleet: Fleet, matrix: Matrix) -> None:
    with contextlib.suppress(Exception):
        fleet.client.cancel([f for f, _ in fleet.pending.values()])
    close_run(fleet.record, fleet.opened.path, "interrupted")
    fleet.progress(
        f"rtmatrix: interrupted; {len(fleet.record['cells'])} finished cell(s) kept in "
        f"{fleet.opened.path} ({len(fleet.pending)} pending cancelled; a cell already running "
        f"on a host finishes there and is discarded); finish with: rtmatrix run {matrix.path} "
        f"--cluster {fleet.address} --resume {fleet.opened.path}"
    )


def run_on_cluster(
    matrix: Matrix,
    results_dir: Path,
    address: str,
    progress: Progress = _stderr_progress,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
    resume: Path | None = None,
) -> Path:
    """Run the matrix's cells on the cluster at ``address``; returns the run file's path.

    The same planning, record and resume as :func:`rtmatrix.runner.run_matrix`; each cell runs
    on a worker holding its target's resource; records are saved as cells finish."""
    cluster = matrix.cluster or ClusterConfig()
    client, tls = connect(address, cluster)
    try:
        opened = open_run(matrix, results_dir, progress, cwd, only, resume)
        fleet = Fleet(client, address, opened, cluster, progress)
        _header(fleet, tls)
        try:
            for cell in opened.todo:
                _submit(fleet, cell)
            _loop(fleet)
        except KeyboardInterrupt:
            _interrupted(fleet, matrix)
            raise
        if fleet.scheduler_lost:
            close_run(fleet.record, opened.path, "interrupted")
            msg = (
                f"lost the scheduler at {address} ({fleet.scheduler_lost}); "
                f"{len(fleet.record['cells'])} finished cell(s) kept in {opened.path}; finish "
                f"with: rtmatrix run {matrix.path} --cluster {address} --resume {opened.path}"
            )
            raise FleetError(msg)
        close_run(fleet.record, opened.path, "complete")
        return opened.path
    finally:
        with contextlib.suppress(Exception):
            client.close()
