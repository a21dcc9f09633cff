"""The selection verdict: which runtime row × dtype × settings a team should pick for each model
under its own constraints (hard limits, priorities), with the reasons, and why the others are
out. ``rtmatrix select`` and the report's opening answer read it.

Layers, lowest first: ``constraints`` (what a team asks) → ``verdict`` (what is said of one
candidate) → ``models`` (what a cell is) → ``candidates`` → ``limits``; ``compare`` (two
candidates on one criterion) → ``consistency`` (over runs) → ``ordering`` (Pareto layers,
priorities, ties); ``answer`` (the verdict per model, as JSON and Markdown); ``select`` ties
them together. Nothing here imports the report.
"""

from __future__ import annotations

from rtmatrix.selection.answer import ModelSelection, Selection
from rtmatrix.selection.constraints import Constraints, Limit, SelectionError, parse_override
from rtmatrix.selection.select import constraints_for, select
from rtmatrix.selection.verdict import Candidate, Consistency, Failure, Regression

__all__ = [
    "Candidate",
    "Consistency",
    "Constraints",
    "Failure",
    "Limit",
    "ModelSelection",
    "Regression",
    "Selection",
    "SelectionError",
    "constraints_for",
    "parse_override",
    "select",
]
