"""The typed run records (``rtmatrix.results.records``) against the JSON Schema they mirror: the
keys each TypedDict requires are the keys the schema requires, and every property the schema
names is a key of the TypedDict, so the two cannot drift apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pytest

from rtmatrix.results import records
from rtmatrix.results.store import load_run, schema

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"


def _node(path: str) -> dict[str, Any]:
    """The schema object at a slash path (``$defs/cell/properties/fixture``)."""
    node: dict[str, Any] = schema()
    for part in path.split("/") if path else []:
        node = node[part]
    return node


# TypedDict -> the schema object it mirrors
MIRRORS: dict[str, str] = {
    "RunRecord": "",
    "MatrixRecord": "properties/matrix",
    "MachineRecord": "properties/machine",
    "ProjectRecord": "properties/project",
    "RuntimeRecord": "properties/runtimes/additionalProperties",
    "SkippedRecord": "properties/skipped/items",
    "FleetRecord": "properties/fleet",
    "PartRecord": "properties/parts/items",
    "CellRecord": "$defs/cell",
    "FixtureRecord": "$defs/cell/properties/fixture",
    "OutcomeRecord": "$defs/cell/properties/outcome",
    "ParityRecord": "$defs/cell/properties/parity",
    "HostRecord": "$defs/cell/properties/host",
    "SelfCheckRecord": "$defs/cell/properties/self_checks/additionalProperties",
    "MetricRecord": "$defs/metric",
}


def drift(typed: Any, node: dict[str, Any]) -> list[str]:
    """How a TypedDict differs from a schema object: required keys on either side only, and
    properties the schema names that the TypedDict does not know."""
    want, have = set(node.get("required", [])), set(typed.__required_keys__)
    out = [f"required by the schema only: {k}" for k in sorted(want - have)]
    out += [f"required by the TypedDict only: {k}" for k in sorted(have - want)]
    keys = set(typed.__required_keys__) | set(typed.__optional_keys__)
    out += [f"not in the TypedDict: {k}" for k in sorted(set(node.get("properties", {})) - keys)]
    return out


@pytest.mark.parametrize(("name", "path"), MIRRORS.items())
def test_typed_dict_mirrors_the_schema(name: str, path: str) -> None:
    assert drift(getattr(records, name), _node(path)) == []


def test_every_object_with_required_keys_has_a_typed_dict() -> None:
    """An object the schema gives required keys (a new one too) has a TypedDict here."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if "required" in node:
            found.append(path)
        for k, v in node.items():
            if k not in ("if", "then", "else"):  # conditional requirements stay optional
                walk(v, f"{path}/{k}" if path else k)

    walk(schema(), "")
    assert len(found) > 10
    assert set(found) <= set(MIRRORS.values())


def test_drift_is_caught() -> None:
    """The check itself fails on a TypedDict that lost a required key, gained one, or does not
    know a property (functional syntax: evaluated here, so NotRequired counts)."""
    outcome = _node("$defs/cell/properties/outcome")
    drifted = TypedDict("drifted", {"status": str, "message": NotRequired[str], "extra": str})  # noqa: UP013
    said = drift(drifted, outcome)
    assert "required by the schema only: message" in said
    assert "required by the TypedDict only: extra" in said
    assert "not in the TypedDict: phase" in said
    assert drift(records.OutcomeRecord, outcome) == []


def test_not_required_is_seen_at_run_time() -> None:
    """records.py evaluates its annotations (no postponed ones): on Python 3.11 a postponed
    ``NotRequired`` would make every key count as required."""
    assert "reason" in records.MetricRecord.__optional_keys__
    assert "host" in records.CellRecord.__optional_keys__


def test_load_run_returns_the_file_as_json_gave_it(tmp_path: Path) -> None:
    """Typing the records changes nothing: ``load_run`` hands back the parsed JSON itself."""
    loaded = load_run(GOLDEN)
    assert type(loaded) is dict
    assert loaded == json.loads(GOLDEN.read_text("utf-8"))


def test_helpers() -> None:
    run = load_run(GOLDEN)
    cell = run["cells"][0]
    assert records.evidence_of(cell) is cell["evidence"]
    assert records.evidence_of(None) == {}
    assert records.value_of(cell["metrics"]["tg_tps"]) == cell["metrics"]["tg_tps"]["value"]
    assert records.value_of(None) is None
