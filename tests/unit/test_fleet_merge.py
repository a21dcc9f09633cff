"""``rtmatrix merge``: single-host runs -> one run file, cells keyed by target, parts kept."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.fleet import FleetError
from rtmatrix.fleet.merge import merge_runs, parse_part
from rtmatrix.results import save_run

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"


def single_host_run(tmp_path: Path, name: str, arch: str) -> Path:
    run: dict[str, Any] = json.loads(GOLDEN.read_text("utf-8"))
    run = copy.deepcopy(run)
    run["run_id"] = f"run-{name}"
    run["machine"] |= {"hostname": name, "arch": arch}
    path = tmp_path / f"{name}.json"
    save_run(run, path)
    return path


def test_two_single_host_runs_merge_into_one_matrix_keyed_by_target(tmp_path: Path) -> None:
    a = single_host_run(tmp_path, "laptop", "x86_64")
    b = single_host_run(tmp_path, "rk3588.local", "aarch64")
    rec = merge_runs([(a, None), (b, "board")])
    save_run(rec, tmp_path / "merged.json")  # valid against the schema
    cells = {c["target"]: c for c in rec["cells"]}
    assert set(cells) == {"laptop", "board"}  # the host name, or the label given
    assert cells["board"]["key"] == "llama_cpp@board|tiny/f32|t2-c256-p16-g24"
    assert cells["board"]["host"]["machine"]["arch"] == "aarch64"
    assert cells["laptop"]["host"]["machine"]["arch"] == "x86_64"
    assert cells["board"]["host"]["part"] == 1
    assert [p["run_id"] for p in rec["parts"]] == ["run-laptop", "run-rk3588.local"]
    assert rec["parts"][1]["target"] == "board" and len(rec["parts"][1]["sha256"]) == 64
    assert rec["parts"][0]["machine"]["hostname"] == "laptop"
    assert rec["matrix"]["n_cells"] == 2 and rec["status"] == "complete"


def test_a_cell_in_two_parts_is_refused(tmp_path: Path) -> None:
    a = single_host_run(tmp_path, "laptop", "x86_64")
    with pytest.raises(FleetError, match=r"is in .*laptop\.json and .*laptop\.json"):
        merge_runs([(a, None), (a, None)])


def test_cells_that_carry_a_target_keep_it(tmp_path: Path) -> None:
    a = single_host_run(tmp_path, "laptop", "x86_64")
    merged = tmp_path / "m1.json"
    save_run(merge_runs([(a, "pc")]), merged)
    again = merge_runs([(merged, "ignored")])
    assert [c["key"].split("|")[0] for c in again["cells"]] == ["llama_cpp@pc"]


def test_parse_part() -> None:
    assert parse_part("board=runs/b.json") == (Path("runs/b.json"), "board")
    assert parse_part("runs/b.json") == (Path("runs/b.json"), None)
    assert parse_part("a b=c.json") == (Path("a b=c.json"), None)  # not a label
