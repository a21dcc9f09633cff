"""What crosses from the parent to a host and back: plain JSON, checked on both sides.

The parent submits :func:`rtmatrix.fleet.remote.run_cell_remote` (an importable function, never a
pickled closure: a function pickled by value crashed a worker running another Python minor
version) with one :class:`CellJob` as a dict of JSON values; the host answers with a
:class:`CellReply` dict. Both carry :data:`rtmatrix.protocol.PROTOCOL_VERSION` and the result
schema version: either side refuses the other's document on a mismatch, naming both versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rtmatrix import __version__
from rtmatrix.doc import PROTOCOL_VERSION, _Doc
from rtmatrix.matrix import Cell, FixtureEntry
from rtmatrix.outcome import Expect
from rtmatrix.results import SCHEMA_VERSION


def fixture_to_json(fx: FixtureEntry) -> dict[str, Any]:
    return {
        "name": fx.name,
        "dtype": fx.dtype,
        "model": fx.model,
        # a user's own model file must exist at this path on the host too
        "path": str(fx.path) if fx.path else None,
        "variant": fx.variant,
        "expect": str(fx.expect),
        "params": fx.params,
        "run": fx.run,
        "verdicts": fx.verdicts,
        "options": fx.options,
        "scenario": fx.scenario,
        "expect_kinds": list(fx.expect_kinds),
        "prompt": list(fx.prompt) if fx.prompt else None,
        "runtimes": list(fx.runtimes),
    }


def fixture_from_json(d: dict[str, Any]) -> FixtureEntry:
    return FixtureEntry(
        name=d["name"],
        dtype=d["dtype"],
        model=d["model"],
        path=Path(d["path"]) if d["path"] else None,
        variant=d["variant"],
        expect=Expect(d["expect"]),
        params=d["params"],
        run=d["run"],
        verdicts=d["verdicts"],
        options=d["options"],
        scenario=d["scenario"],
        expect_kinds=tuple(d["expect_kinds"]),
        prompt=(str(d["prompt"][0]), str(d["prompt"][1])) if d["prompt"] else None,
        runtimes=tuple(d["runtimes"]),
    )


def cell_to_json(cell: Cell) -> dict[str, Any]:
    return {
        "runtime": cell.runtime,
        "adapter": cell.adapter,
        "fixture": fixture_to_json(cell.fixture),
        "params": cell.params,
        "run": cell.run,
        "options": cell.options,
        "expect": str(cell.expect),
        "verdicts": cell.verdicts,
        "expect_kinds": list(cell.expect_kinds),
        "target": cell.target,
        "crash_control": cell.crash_control,
    }


def cell_from_json(d: dict[str, Any]) -> Cell:
    return Cell(
        runtime=d["runtime"],
        adapter=d["adapter"],
        fixture=fixture_from_json(d["fixture"]),
        params=d["params"],
        run=d["run"],
        options=d["options"],
        expect=Expect(d["expect"]),
        verdicts=d["verdicts"],
        expect_kinds=tuple(d["expect_kinds"]),
        target=d["target"],
        crash_control=d.get("crash_control"),
    )


@dataclass(frozen=True)
class CellJob(_Doc):
    """One cell for one host: the cell, what the host must be, the run's power settings."""

    _what: ClassVar[str] = "fleet job"

    cell: dict[str, Any]
    #: the cell's [[targets]] entry (label, os, arch); None in a matrix without targets
    target: dict[str, Any] | None = None
    power: dict[str, Any] = field(default_factory=dict)
    rtmatrix_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    protocol: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class CellReply(_Doc):
    """The host's answer: the cell's record (as the local runner builds it) and who ran it, or
    why the host refused the job (``refused``)."""

    _what: ClassVar[str] = "fleet reply"

    host: dict[str, Any]
    record: dict[str, Any] | None = None
    refused: str | None = None
    rtmatrix_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    protocol: int = PROTOCOL_VERSION


def version_mismatch(data: dict[str, Any], what: str) -> str | None:
    """Why a document from the other side cannot be used here (protocol or result schema of
    another rtmatrix), naming both sides' versions; None when they agree."""
    theirs = data.get("rtmatrix_version", "?")
    for key, ours in (("protocol", PROTOCOL_VERSION), ("schema_version", SCHEMA_VERSION)):
        if data.get(key) != ours:
            return (
                f"{what} speaks {key} {data.get(key)!r} (rtmatrix {theirs}), this rtmatrix "
                f"{ours} (rtmatrix {__version__}); install the same rtmatrix release on the "
                "host and on the machine that runs the matrix"
            )
    return None
