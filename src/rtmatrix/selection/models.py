"""What a cell is to the selection: which model it ran (a real checkpoint, an architecture toy,
or synthetic), which host, which fixture classes it belongs to, and whether a limit's ``at``
names it."""

from __future__ import annotations

import fnmatch
from typing import Any

from rtmatrix.fixtures.sources import REAL_MODELS
from rtmatrix.fixtures.variants import VARIANTS
from rtmatrix.results.columns import Column, as_dict, scenario_of
from rtmatrix.results.records import CellRecord

#: the kinds of model, in the order the answer lists them
KINDS = ("real checkpoint", "architecture toy", "synthetic")


def model_of(cell: CellRecord) -> tuple[str, str]:
    """(model name, kind) of a cell: a real checkpoint, an architecture toy, or synthetic."""
    fx = as_dict(cell.get("fixture"))
    name = str(fx.get("model") or fx.get("name") or "?")
    if fx.get("source") or name in REAL_MODELS:
        return name, KINDS[0]
    return name, KINDS[1] if fx.get("architecture") else KINDS[2]


def host_of(col: Column) -> str:
    m = col.machine
    cores = m.get("cores_logical")
    detail = ", ".join(
        str(x) for x in (m.get("cpu_model"), m.get("arch"), cores and f"{cores} cores") if x
    )
    name = str(m.get("hostname") or "this host")
    return f"{name} ({detail})" if detail else name


def tag(cell: CellRecord) -> str:
    """The params tag of a cell's key: ``t2-c256-p16-g24``."""
    return str(cell["key"]).rsplit("|", 1)[-1]


def matches(at: str, cell: CellRecord) -> bool:
    """Whether a limit's ``at`` glob names this cell: ``FIXTURE|TAG`` or the fixture name."""
    name = str(as_dict(cell.get("fixture")).get("name"))
    target = f"{name}|{tag(cell)}" if "|" in at else name
    return fnmatch.fnmatchcase(target, at)


def classes_of(cell: CellRecord, headline: Any) -> set[str]:
    """The fixture classes a cell belongs to (``must_behave``)."""
    fx = as_dict(cell.get("fixture"))
    variant = fx.get("variant")
    out: set[str] = set()
    if variant in VARIANTS:
        out |= {str(variant), VARIANTS[str(variant)].kind}
    if cell.get("expect") == "error":
        out.add("failing")
        if "out-of-memory" in (cell.get("expect_kind") or []):
            out.add("memory")
        return out
    scenario = scenario_of(cell)
    if scenario is not None:
        return out | {"lifecycle", str(scenario)}
    if not variant and cell["params"] != headline:
        out.add("boundary")
    return out
