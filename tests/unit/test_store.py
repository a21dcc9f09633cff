from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.results import store
from rtmatrix.results.store import ResultError, load_run, save_run, validate_run

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"


@pytest.fixture
def record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN.read_text("utf-8"))
    return data


def test_golden_file_is_valid(record: dict[str, Any]) -> None:
    validate_run(record)
    assert record["cells"][0]["metrics"]["tg_tps"]["source"] == "harness-clock"


def test_round_trip(tmp_path: Path, record: dict[str, Any]) -> None:
    save_run(record, tmp_path / "r.json")
    assert load_run(tmp_path / "r.json") == record


def test_invalid_record_is_not_written_and_old_file_survives(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    path = tmp_path / "r.json"
    save_run(record, path)
    bad = copy.deepcopy(record)
    bad["cells"][0]["metrics"]["tg_tps"]["source"] = "guess"
    with pytest.raises(ResultError, match=r"at /cells/0/metrics/tg_tps/source"):
        save_run(bad, path)
    assert load_run(path) == record
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_failed_write_keeps_the_old_file(
    tmp_path: Path, record: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.json"
    save_run(record, path)
    changed = copy.deepcopy(record)
    changed["status"] = "complete"

    def broken_dump(*_a: Any, **_k: Any) -> None:
        msg = "disk full"
        raise OSError(msg)

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        save_run(changed, path)
    monkeypatch.undo()
    assert load_run(path) == record
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_unavailable_metric_needs_reason_and_null(record: dict[str, Any]) -> None:
    bad = copy.deepcopy(record)
    bad["cells"][0]["metrics"]["power_w"] = {"value": 0, "unit": "W", "source": "unavailable"}
    with pytest.raises(ResultError, match="power_w"):
        validate_run(bad)


def test_newer_schema_is_refused(tmp_path: Path, record: dict[str, Any]) -> None:
    record["schema_version"] = 99
    (tmp_path / "r.json").write_text(json.dumps(record))
    with pytest.raises(ResultError, match=r"schema_version 99 is newer.*upgrade rtmatrix"):
        load_run(tmp_path / "r.json")


def test_older_schema_is_migrated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, record: dict[str, Any]
) -> None:
    old = copy.deepcopy(record)
    old["schema_version"] = 0
    old["runs_on"] = old.pop("machine")

    def v0_to_v1(r: dict[str, Any]) -> dict[str, Any]:
        r["machine"] = r.pop("runs_on")
        return r

    monkeypatch.setitem(store.MIGRATIONS, 0, v0_to_v1)
    (tmp_path / "r.json").write_text(json.dumps(old))
    assert load_run(tmp_path / "r.json") == record


@pytest.mark.parametrize(
    ("content", "pattern"),
    [("{not json", "not valid JSON"), ("[]", "JSON object"), ("{}", "no integer schema_version")],
)
def test_bad_files_get_clear_errors(tmp_path: Path, content: str, pattern: str) -> None:
    (tmp_path / "r.json").write_text(content)
    with pytest.raises(ResultError, match=pattern):
        load_run(tmp_path / "r.json")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultError, match="cannot read result file"):
        load_run(tmp_path / "none.json")


def test_incremental_validation_checks_only_new_cells(record: dict[str, Any]) -> None:
    bad_old = copy.deepcopy(record)
    bad_old["cells"].append(copy.deepcopy(record["cells"][0]))
    bad_old["cells"][0]["metrics"]["tg_tps"]["source"] = "guess"
    validate_run(bad_old, skip_cells=1)  # the first cell is trusted
    bad_new = copy.deepcopy(record)
    bad_new["cells"].append(copy.deepcopy(record["cells"][0]))
    bad_new["cells"][1]["outcome"]["status"] = "fine"
    with pytest.raises(ResultError, match=r"at /cells/1/outcome/status"):
        validate_run(bad_new, skip_cells=1)
    bad_env = copy.deepcopy(record)
    bad_env["status"] = "halfway"
    with pytest.raises(ResultError, match=r"at /status"):
        validate_run(bad_env, skip_cells=1)


def test_schema_1_converted_cells_at_generic_weight_only_dtypes_get_their_vendors_dtype(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    old = copy.deepcopy(record)
    old["schema_version"] = 1
    cell = old["cells"][0]
    model = cell["fixture"]["name"]
    cell["fixture"] |= {"dtype": "int4w", "conversion": {"converter": "mnn_llmexport"}}
    runtime, _, tag = cell["key"].split("|")
    cell["key"] = f"{runtime}|{model}/int4w|{tag}"
    seeded = copy.deepcopy(old["cells"][0])  # rtmatrix's own writer: no conversion, kept
    seeded["fixture"] = {k: v for k, v in seeded["fixture"].items() if k != "conversion"}
    seeded["key"] = f"{runtime}|{model}/int4w-own|{tag}"
    old["cells"].append(seeded)
    (tmp_path / "r.json").write_text(json.dumps(old))
    new = load_run(tmp_path / "r.json")
    assert new["schema_version"] == store.SCHEMA_VERSION
    assert new["cells"][0]["fixture"]["dtype"] == "mnn-q4"
    assert new["cells"][0]["key"] == f"{runtime}|{model}/mnn-q4|{tag}"
    assert new["cells"][-1]["fixture"]["dtype"] == "int4w"
    assert new["cells"][-1]["key"].endswith(f"/int4w-own|{tag}")
