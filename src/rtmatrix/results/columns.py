"""A run's columns: one runtime row (on one target, for a fleet run) of one run, with its cells,
and the readings of cells every view of runs shares — the report's matrices, its ranking and
history, and ``rtmatrix select``.

Which cells are a row's plain timed generation (``normal_cells``: no expected error, no
lifecycle scenario), the params most of them share (``common_params``: where rows and dtypes
compare), and which of a cell's runs supplies its figures (``Column.picks``: set by
:mod:`rtmatrix.results.series`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.names import M, Scenario
from rtmatrix.results.records import CellRecord, RunRecord
from rtmatrix.scenarios import metric_prefixes


@dataclass(frozen=True)
class Spread:
    """How much one figure of a row varies: the coefficient of variation (sd / mean) of the
    shown cell's repetitions, and of its medians over the runs where it is comparable."""

    within_cv: float | None
    n_samples: int
    between_cv: float | None = None
    n_runs: int = 1
    run_medians: tuple[float, ...] = ()

    @property
    def swing(self) -> float | None:
        """The variation a reader should expect: run to run where known, else repetitions."""
        return self.between_cv if self.between_cv is not None else self.within_cv


@dataclass(frozen=True)
class Rank:
    """One row's place for one criterion at one fixture: best, within noise of it, or behind."""

    place: int  # 1-based, by median
    of: int  # rows ranked
    best: bool
    tie: bool  # within noise of the best
    test: str  # how it was judged against the best
    swings: str = ""  # set when its spread exceeds its lead over the next row
    untested: bool = False  # too few samples to tell it from the best either way


@dataclass(frozen=True)
class Pick:
    """The cell whose figures a row shows for one of its fixtures, and why when it is not the
    newest run's (that one ran contended)."""

    cell: CellRecord
    run_id: str
    version: str
    why: str = ""


@dataclass(eq=False)
class Column:
    """One runtime row of one run (on one target, for a fleet run): a column of the selection
    matrix and of the fixture grid."""

    run_index: int
    run: RunRecord
    runtime: str
    info: Mapping[str, Any]  # the run's runtimes entry ({} for a runtime it does not list)
    cells: list[tuple[str, CellRecord]]  # (evidence anchor id, cell)
    headline: dict[str, Any] | None = None  # the params its selection values are read at
    target: str | None = None  # the [[targets]] label its cells ran on (rtmatrix.fleet)

    def _host(self, key: str) -> dict[str, Any]:
        """The host block's ``key`` of the first cell that ran on a fleet host, else {}."""
        for _, c in self.cells:
            host: Mapping[str, Any] = c.get("host") or {}
            value = host.get(key)
            if isinstance(value, dict) and value:
                return value
        return {}

    @property
    def machine(self) -> dict[str, Any]:
        """The machine its cells ran on: the fleet host's, else the run's."""
        return self._host("machine") or dict(self.run.get("machine", {}))

    #: this row in every run of the same matrix, oldest first (itself last); [] when alone
    series: list[Column] = field(default_factory=list, repr=False)
    picks: dict[str, Pick] = field(default_factory=dict)  # cell key -> figures shown
    spreads: dict[tuple[str, str], Spread] = field(default_factory=dict)  # (row key, metric)
    ranks: dict[tuple[str, str], Rank] = field(default_factory=dict)  # (row key, metric)

    @property
    def version(self) -> str:
        return str(
            self._host("runtime").get("version") or self.info.get("version") or "not installed"
        )

    @property
    def label(self) -> str:
        where = f"{self.runtime}@{self.target}" if self.target else self.runtime
        return f"{where} {self.version}"

    @property
    def headline_text(self) -> str:
        return params_text(self.headline) if self.headline else ""


def as_dict(value: Any) -> dict[str, Any]:
    """Evidence is free-form: a mapping where one is expected, else nothing."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """Evidence is free-form: a list where one is expected (a lone value becomes one item)."""
    if isinstance(value, list | tuple):
        return list(value)
    return [] if value in (None, "", {}) else [value]


def anchor(run_index: int, cell_index: int) -> str:
    return f"ev-{run_index}-{cell_index}"


def columns(runs: list[RunRecord], ran_only: bool = False) -> list[Column]:
    """One column per runtime row (and target) of each run, in run order, then matrix order;
    with ``ran_only``, rows without a cell in that run (they did not run) are left out."""
    cols = []
    for ri, run in enumerate(runs):
        names = list(run.get("runtimes", {}))
        names += [c["runtime"] for c in run["cells"] if c["runtime"] not in names]
        for name in dict.fromkeys(names):
            info: Mapping[str, Any] = run.get("runtimes", {}).get(name, {})
            mine = [
                (anchor(ri, ci), c) for ci, c in enumerate(run["cells"]) if c["runtime"] == name
            ]
            if ran_only and not mine:
                continue
            for target in dict.fromkeys(c.get("target") for _, c in mine) or [None]:
                cells = [(a, c) for a, c in mine if c.get("target") == target]
                cols.append(Column(ri, run, name, info, cells, target=target))
    shared = common_params(c for col in cols for c in normal_of(col))
    for col in cols:
        own = normal_of(col)
        col.headline = shared if any(c["params"] == shared for c in own) else common_params(own)
    return cols


def row_key(cell: CellRecord) -> str:
    """The cell's key without its runtime: the same fixture and params across runtimes."""
    key = str(cell["key"])
    return key.split("|", 1)[1] if "|" in key else key


def fixture_label(cell: CellRecord) -> str:
    fx = cell["fixture"]
    text = str(fx.get("name"))
    if fx.get("dtype"):
        text += f"/{fx['dtype']}"
    if fx.get("variant") and str(fx["variant"]) not in str(fx.get("name")):
        text += f" +{fx['variant']}"
    return text


def varying_params(cells: Iterable[CellRecord]) -> list[str]:
    seen: dict[str, set[Any]] = {}
    for c in cells:
        for k, v in c["params"].items():
            seen.setdefault(k, set()).add(v)
    return [k for k, vals in seen.items() if len(vals) > 1]


PARAM_NAMES = {"n_ctx": "ctx", "prompt_tokens": "prompt", "gen_tokens": "gen"}


def params_text(params: dict[str, Any], keys: Iterable[str] | None = None) -> str:
    return " ".join(
        f"{PARAM_NAMES.get(k, k)} {params[k]}"
        for k in (params if keys is None else keys)
        if k in params
    )


def params_label(cell: CellRecord, keys: Iterable[str] | None = None) -> str:
    return params_text(cell["params"], keys)


def cell_label(cell: CellRecord, vary: list[str]) -> str:
    label = fixture_label(cell)
    return f"{label} {params_label(cell, vary)}" if vary else label


def _scenario_named(value: object) -> Scenario | bool | None:
    """A recorded scenario name: the lifecycle scenario, None for the plain generation, False
    when nothing (or nothing known) is recorded."""
    if value is None:
        return False
    try:
        sc = Scenario(str(value))
    except ValueError:
        return False
    return None if sc is Scenario.GENERATE else sc


def scenario_of(cell: CellRecord) -> Scenario | None:
    """The lifecycle scenario a cell ran, or None for the plain timed generation: the cell's
    ``scenario`` when the record has it (the fixture's in older records, the ``lifecycle_checks``
    metric's in older still), else which scenario's metric family the cell has
    (``rtmatrix.scenarios.metric_prefixes()``). A cell that ended before measuring in a record
    without any of these counts as a plain generation."""
    metrics = cell["metrics"]
    for recorded in (
        cell.get("scenario"),
        cell["fixture"].get("scenario"),
        as_dict(metrics.get(M.LIFECYCLE_CHECKS)).get("scenario"),
    ):
        found = _scenario_named(recorded)
        if found is not False:
            return found if isinstance(found, Scenario) else None
    for sc, prefix in metric_prefixes().items():
        if any(str(k).startswith(prefix) for k in metrics):
            return sc
    return None


def normal_cells(cells: Iterable[CellRecord]) -> list[CellRecord]:
    """Cells of the plain timed generation expected to run: no expected error (failing-model
    variants expect one; a variant expected to run, such as a partition fixture, counts) and no
    lifecycle scenario (those have their own panel)."""
    return [c for c in cells if c.get("expect", "ok") == "ok" and scenario_of(c) is None]


def normal_of(col: Column) -> list[CellRecord]:
    return normal_cells(c for _, c in col.cells)


def common_params(cells: Iterable[CellRecord]) -> dict[str, Any] | None:
    """The params most cells share (first seen wins a tie): where runtimes and dtypes compare."""
    counts: dict[str, tuple[int, dict[str, Any]]] = {}
    for c in cells:
        k = repr(sorted(c["params"].items()))
        counts[k] = (counts.get(k, (0, c["params"]))[0] + 1, c["params"])
    return max(counts.values(), key=lambda t: t[0])[1] if counts else None


def headline_cells(col: Column) -> list[CellRecord]:
    """The column's ordinary cells at its headline params: one per fixture and dtype; where the
    newest run's cell ran contended, the cell picked in its stead (``Column.picks``)."""
    return [picked(col, c) for c in normal_of(col) if c["params"] == col.headline]


def picked(col: Column, cell: CellRecord) -> CellRecord:
    pick = col.picks.get(str(cell["key"]))
    return pick.cell if pick else cell
