"""Read and write run records: validated against the packaged JSON Schema on write and on load,
written atomically (temp file + rename), older schema versions migrated, newer ones refused."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from rtmatrix.results.records import RunRecord

SCHEMA_VERSION = 2

#: schema 2 (issue 42): a converter's own quantization is a dtype named for its vendor; a
#: schema-1 cell converted by that vendor's tool at rtmatrix's generic weight-only dtype took
#: the converter's quantization at that width
_VENDOR_DTYPES_V2 = {
    ("ort_genai", "int8w"): "genai-int8",
    ("ort_genai", "int4w"): "genai-int4",
    ("optimum_intel", "int8w"): "ov-int8",
    ("optimum_intel", "int4w"): "ov-int4",
    ("mnn_llmexport", "int8w"): "mnn-q8",
    ("mnn_llmexport", "int4w"): "mnn-q4",
}


def _vendor_dtypes(record: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: converted cells at ``int8w``/``int4w`` get their vendor's dtype (the fixture's
    ``dtype`` and the cell key), so a diff against a newer run pairs the same cells."""
    for cell in record.get("cells", []):
        fx = cell.get("fixture") or {}
        converter = (fx.get("conversion") or {}).get("converter")
        new = _VENDOR_DTYPES_V2.get((str(converter), str(fx.get("dtype"))))
        if new is None:
            continue
        old = str(fx["dtype"])
        fx["dtype"] = new
        parts = str(cell.get("key", "")).split("|")
        if len(parts) >= 2:
            parts[1] = re.sub(rf"/{old}(?=$|[^\w-])", f"/{new}", parts[1])
            cell["key"] = "|".join(parts)
    return record


# schema_version N -> function upgrading a record from N to N + 1
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _vendor_dtypes}


class ResultError(ValueError):
    """A result file that cannot be read, is invalid, or is from a newer rtmatrix."""


@cache
def schema() -> dict[str, Any]:
    text = resources.files("rtmatrix.results").joinpath("schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def schema_path() -> str:
    return str(resources.files("rtmatrix.results").joinpath("schema.json"))


@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


@cache
def _cell_validator() -> Any:
    import jsonschema

    cell_schema = {"$ref": "#/$defs/cell", "$defs": schema()["$defs"]}
    return jsonschema.Draft202012Validator(cell_schema)


def _raise_errors(errors: list[Any], where: str, prefix: str = "") -> None:
    if not errors:
        return
    errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
    lines = [
        f"  at {prefix}/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in errors[:10]
    ]
    more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
    msg = f"{where} does not match the rtmatrix result schema v{SCHEMA_VERSION}:\n"
    raise ResultError(msg + "\n".join(lines) + more)


def validate_run(
    record: RunRecord | dict[str, Any], where: str = "run record", skip_cells: int = 0
) -> None:
    """Validate against the schema; ``skip_cells`` leading cells already validated are trusted
    (the runner saves after every cell, so a full check each time would cost O(cells^2))."""
    if not skip_cells:
        _raise_errors(list(_validator().iter_errors(record)), where)
        return
    envelope = {**record, "cells": []}
    _raise_errors(list(_validator().iter_errors(envelope)), where)
    cells = record.get("cells", [])
    for i in range(skip_cells, len(cells)):
        _raise_errors(list(_cell_validator().iter_errors(cells[i])), where, f"/cells/{i}")


def migrate(record: dict[str, Any], where: str) -> dict[str, Any]:
    version = record.get("schema_version")
    if not isinstance(version, int):
        msg = f"{where}: no integer schema_version; is this an rtmatrix result file?"
        raise ResultError(msg)
    if version > SCHEMA_VERSION:
        msg = (
            f"{where}: schema_version {version} is newer than this rtmatrix understands "
            f"({SCHEMA_VERSION}); upgrade rtmatrix to read it"
        )
        raise ResultError(msg)
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            msg = f"{where}: no migration from schema_version {version}"
            raise ResultError(msg)
        record = MIGRATIONS[version](record)
        version = record["schema_version"] = version + 1
    return record


def save_run(record: RunRecord | dict[str, Any], path: Path, skip_cells: int = 0) -> None:
    """Validate, then write atomically: readers see the old file or the new one, never half."""
    validate_run(record, str(path), skip_cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=False, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_run(path: Path) -> RunRecord:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read result file ({exc.strerror})"
        raise ResultError(msg) from None
    try:
        record = json.loads(text)
    except ValueError as exc:
        msg = f"{path}: not valid JSON ({exc}); is it a partially copied file?"
        raise ResultError(msg) from None
    if not isinstance(record, dict):
        msg = f"{path}: expected a JSON object at the top level"
        raise ResultError(msg)
    record = migrate(record, str(path))
    validate_run(record, str(path))
    # safe: the record now matches the schema, whose required keys and types RunRecord mirrors
    # (tests/unit/test_records.py checks the two against each other); the cast changes nothing
    # at run time, the dict is returned as json.loads gave it
    return cast(RunRecord, record)
