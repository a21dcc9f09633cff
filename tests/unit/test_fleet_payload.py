"""The fleet job and reply: plain JSON, a cell that survives the trip, versions checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.fleet.payload import (
    CellJob,
    CellReply,
    cell_from_json,
    cell_to_json,
    version_mismatch,
)
from rtmatrix.matrix import parse_matrix
from rtmatrix.protocol import PROTOCOL_VERSION, ProtocolError
from rtmatrix.results import SCHEMA_VERSION

TEXT = """
[[targets]]
label = "lab"
[[runtimes]]
name = "numpy"
adapter = "tests.helpers.adapters:NumpyAdapter"
expect = "error"
expect_kind = "bad-file"
verdicts = { crash = "PASS" }
options = { x = 1 }
[[fixtures]]
model = "tiny"
variant = "truncated"
params = { n_ctx = [64, 128] }
run = { timeout_s = 5 }
[[fixtures]]
name = "mine"
path = "models/mine.gguf"
[[fixtures]]
model = "smollm2-135m"
dtypes = ["q8_0"]
prompt = "a prompt of the fixture's own"
runtimes = ["numpy"]
"""


def cells_of(tmp_path: Path) -> list[Any]:
    """The matrix's cells, its model file present (the loader refuses a missing one)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.gguf").write_bytes(b"GGUF....")
    return parse_matrix(TEXT, tmp_path / "m.toml").cells()


def test_every_cell_survives_a_json_round_trip(tmp_path: Path) -> None:
    cells = cells_of(tmp_path)
    assert len(cells) == 4 and cells[-1].fixture.prompt is not None
    for cell in cells:
        back = cell_from_json(json.loads(json.dumps(cell_to_json(cell))))
        assert back == cell and back.key == cell.key


def test_job_and_reply_are_versioned_json(tmp_path: Path) -> None:
    cell = cells_of(tmp_path)[0]
    job = CellJob(cell=cell_to_json(cell), target={"label": "lab", "os": None, "arch": None})
    data = json.loads(json.dumps(job.to_dict()))
    assert data["protocol"] == PROTOCOL_VERSION and CellJob.from_dict(data) == job
    assert version_mismatch(data, "the job") is None
    with pytest.raises(ProtocolError, match="unknown key"):
        CellReply.from_dict({"host": {}, "extra": 1})


def test_a_mismatch_names_both_versions() -> None:
    other = PROTOCOL_VERSION + 1
    why = version_mismatch({"protocol": other, "rtmatrix_version": "9.0"}, "the host h")
    assert why is not None
    assert why.startswith(
        f"the host h speaks protocol {other} (rtmatrix 9.0), this rtmatrix {PROTOCOL_VERSION}"
    )
    newer = SCHEMA_VERSION + 1
    why = version_mismatch({"protocol": PROTOCOL_VERSION, "schema_version": newer}, "the job")
    assert why is not None and f"schema_version {newer}" in why
