"""Which cells a run covers, and where: a cluster address, or this host as one target.

A matrix without ``[[targets]]`` runs here as it always did. A matrix with targets runs on a
cluster (``--cluster ADDRESS`` or ``[cluster] address``), or here as the target(s) this host is
(``--target LABEL``: the host must be what the target expects); each run's cells carry their
target, so runs made separately merge into one matrix (``rtmatrix merge``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rtmatrix.fleet.security import FleetError
from rtmatrix.matrix import Cell, Matrix


@dataclass(frozen=True)
class RunPlan:
    #: the scheduler to submit to; None runs here
    address: str | None
    #: the targets this run is restricted to (empty: all the matrix declares)
    targets: tuple[str, ...] = ()

    def only(self, cell: Cell) -> bool:
        return not self.targets or cell.target in self.targets


def _check_labels(matrix: Matrix, labels: Sequence[str]) -> None:
    valid = [t.label for t in matrix.targets]
    if not valid:
        msg = f"--target {', '.join(labels)}: {matrix.path} declares no [[targets]]"
        raise FleetError(msg)
    bad = [lbl for lbl in labels if lbl not in valid]
    if bad:
        msg = f"--target {', '.join(bad)}: not in {matrix.path}; valid: {', '.join(valid)}"
        raise FleetError(msg)


def _check_this_host(matrix: Matrix, labels: Sequence[str]) -> None:
    from rtmatrix.metrics.host import machine_info

    machine = machine_info()
    wrong = [why for lbl in labels if (why := matrix.target(lbl).mismatch(machine))]
    if wrong:
        msg = f"this host is not the target: {'; '.join(wrong)}"
        raise FleetError(msg)


def plan_run(matrix: Matrix, cluster: str | None, targets: Sequence[str] | None) -> RunPlan:
    """``rtmatrix run``'s ``--cluster`` and ``--target`` against the matrix; FleetError names
    the problem and the valid choices."""
    labels = tuple(targets or ())
    if labels:
        _check_labels(matrix, labels)
    address = cluster or (matrix.cluster.address if matrix.cluster else None)
    if address:
        return RunPlan(address, labels)
    if matrix.targets and not labels:
        valid = ", ".join(t.label for t in matrix.targets)
        msg = (
            f"{matrix.path} declares targets ({valid}): run it on a cluster with --cluster "
            "ADDRESS (or [cluster] address = ...), or on one of those hosts with --target LABEL"
        )
        raise FleetError(msg)
    if labels:
        _check_this_host(matrix, labels)
    return RunPlan(None, labels)


def combine(*filters: Callable[[Cell], bool] | None) -> Callable[[Cell], bool] | None:
    """All the given cell filters at once (None when there are none)."""
    active = [f for f in filters if f is not None]
    if not active:
        return None
    return lambda cell: all(f(cell) for f in active)
