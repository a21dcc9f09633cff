"""The parent side: spawn one worker per cell, cap and watch it, classify how it ended, record it
and store each finished cell before the next starts. Never imports an adapter or a runtime.

- :mod:`~rtmatrix.runner.process` supervises one worker process (spawn, sample, deadline, reap);
- :mod:`~rtmatrix.runner.classify` says how a cell ended from process evidence and its result;
- :mod:`~rtmatrix.runner.record` builds the cell's record (metrics, parity, evidence, verdict);
- :mod:`~rtmatrix.runner.orchestrate` is the loop over the cells.
"""

from __future__ import annotations

from rtmatrix.runner.classify import CellOutcome, classify, refine
from rtmatrix.runner.orchestrate import RunContext, plan_cells, run_cell, run_matrix
from rtmatrix.runner.process import Launch, launch, os_peak

__all__ = [
    "CellOutcome",
    "Launch",
    "RunContext",
    "classify",
    "launch",
    "os_peak",
    "plan_cells",
    "refine",
    "run_cell",
    "run_matrix",
]
