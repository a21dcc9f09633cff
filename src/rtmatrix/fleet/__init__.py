"""The matrix across a fleet of target devices, on Dask distributed.

- :mod:`~rtmatrix.fleet.select` chooses the cells of a run (``--target``, ``--cluster``);
- :mod:`~rtmatrix.fleet.payload` is what crosses to a host and back (versioned JSON);
- :mod:`~rtmatrix.fleet.remote` runs one cell on a host (``run_cell_remote``);
- :mod:`~rtmatrix.fleet.dispatch` submits the cells and merges the records as they finish;
- :mod:`~rtmatrix.fleet.security` TLS unless everything is on loopback;
- :mod:`~rtmatrix.fleet.merge` merges runs made separately on different machines;
- :mod:`~rtmatrix.fleet.local` a loopback cluster for tests and ``nox -s fleet``.

Only ``dispatch``, ``remote`` and ``local`` import ``distributed`` (the ``fleet`` extra).
"""

from __future__ import annotations

from rtmatrix.fleet.security import FleetError
from rtmatrix.fleet.select import RunPlan, plan_run

__all__ = ["FleetError", "RunPlan", "plan_run"]
