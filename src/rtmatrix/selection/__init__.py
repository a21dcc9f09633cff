"""The selection verdict: which runtime row × dtype × settings a team should pick for each model
under its own constraints (hard limits, priorities), with the reasons, and why the others are
out. ``rtmatrix select`` and the report's opening answer read it."""

from __future__ import annotations

from rtmatrix.selection.constraints import Constraints, Limit, SelectionError, parse_override
from rtmatrix.selection.select import (
    Candidate,
    Consistency,
    Failure,
    ModelSelection,
    Regression,
    Selection,
    constraints_for,
    select,
)

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
