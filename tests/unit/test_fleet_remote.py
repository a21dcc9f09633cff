"""The host side, called in-process as a Dask worker would call it (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtmatrix.fleet.payload import CellJob, CellReply, cell_to_json
from rtmatrix.fleet.remote import run_cell_remote
from rtmatrix.matrix import Cell, parse_matrix
from rtmatrix.protocol import PROTOCOL_VERSION
from rtmatrix.results import SCHEMA_VERSION

TEXT = """
[run]
repetitions = 2
warmup = 0
timeout_s = 30
[params]
n_ctx = 64
prompt_tokens = 6
gen_tokens = 5
[[targets]]
label = "here"
[[targets]]
label = "board"
arch = "riscv64"
[[runtimes]]
name = "numpy"
adapter = "tests.helpers.adapters:NumpyAdapter"
[[fixtures]]
model = "tiny"
"""


def cell_on(label: str) -> tuple[Cell, dict[str, Any]]:
    m = parse_matrix(TEXT, Path("m.toml"))
    cell = next(c for c in m.cells() if c.target == label)
    return cell, m.target(label).to_dict()


def test_a_cell_runs_here_as_the_local_runner_runs_it() -> None:
    cell, target = cell_on("here")
    reply = CellReply.from_dict(run_cell_remote(CellJob(cell_to_json(cell), target).to_dict()))
    assert reply.refused is None and reply.record is not None
    rec = reply.record
    assert rec["key"] == "numpy@here|tiny/f32|t2-c64-p6-g5" and rec["target"] == "here"
    assert rec["outcome"]["status"] == "ok" and rec["parity"]["all_tokens_agree"]
    assert rec["fixture"]["sha256"]  # built on this host by its content hash
    assert reply.host["machine"]["arch"] and reply.host["runtime"]["distribution"] == "numpy"
    assert reply.host["worker"] is None  # not inside a Dask worker


def test_a_host_that_is_not_the_target_runs_nothing() -> None:
    cell, target = cell_on("board")
    reply = CellReply.from_dict(run_cell_remote(CellJob(cell_to_json(cell), target).to_dict()))
    assert reply.record is not None
    out = reply.record["outcome"]
    assert out["status"] == "unavailable" and out["phase"] == "target"
    assert "target 'board' expects arch 'riscv64'" in out["message"]
    assert reply.record["wall_s"] == 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"protocol": 99}, "the job speaks protocol 99"),
        ({"schema_version": 0}, "the job speaks schema_version 0"),
    ],
)
def test_a_job_of_another_version_is_refused_naming_both(
    change: dict[str, int], message: str
) -> None:
    cell, target = cell_on("here")
    payload = CellJob(cell_to_json(cell), target).to_dict() | change
    reply = CellReply.from_dict(run_cell_remote(payload))
    assert reply.record is None and reply.refused is not None
    assert reply.refused.startswith(message) and "this rtmatrix" in reply.refused


def test_an_unreadable_job_is_refused() -> None:
    reply = CellReply.from_dict(
        run_cell_remote({"protocol": PROTOCOL_VERSION, "schema_version": SCHEMA_VERSION})
    )
    assert reply.refused is not None and "missing key 'cell'" in reply.refused
