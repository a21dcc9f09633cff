from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from rtmatrix.cli import main
from rtmatrix.results import load_run
from rtmatrix.results.export import columns, render, tidy
from rtmatrix.results.records import RunRecord

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
RUNS = ["run-v1.json", "gate-base.json"]  # a real run (2 repetitions); 8 samples + an error cell


def expected_rows(run: RunRecord) -> dict[tuple[str, str], int]:
    """(cell key, metric) -> rows it must have: one per sample, else one."""
    return {
        (cell["key"], name): len(m["samples"]) if m.get("samples") else 1
        for cell in run["cells"]
        for name, m in cell["metrics"].items()
    }


@pytest.mark.parametrize("name", RUNS)
def test_csv_has_one_row_per_cell_metric_sample(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = load_run(GOLDEN / name)
    out = tmp_path / "tidy.csv"
    assert main(["export", str(GOLDEN / name), "-o", str(out)]) == 0
    frame = pd.read_csv(out)
    want = expected_rows(run)
    assert len(frame) == sum(want.values())
    sizes = frame.groupby(["key", "metric"], sort=False).size()
    assert {k: int(v) for k, v in sizes.items()} == want
    assert list(frame.columns) == columns(run)
    assert "wrote" in capsys.readouterr().err
    sampled = frame.dropna(subset=["sample"])
    assert (
        sampled.groupby(["key", "metric"])["sample"]
        .agg(list)
        .map(lambda s: s == list(range(len(s))))
        .all()
    )
    cell = run["cells"][0]
    tg = frame[(frame["key"] == cell["key"]) & (frame["metric"] == "tg_tps")]
    assert tg["value"].tolist() == cell["metrics"]["tg_tps"]["samples"]
    assert set(tg["source"]) == {"harness-clock"} and set(tg["unit"]) == {"tokens/s"}
    assert tg["threads"].tolist() == [cell["params"]["threads"]] * len(tg)


def test_single_text_and_unavailable_metrics() -> None:
    run = load_run(GOLDEN / "gate-base.json")
    frame = pd.read_csv(io.StringIO(render(tidy(run), "csv")))
    error_key = run["cells"][2]["key"]
    gone = frame[(frame["key"] == error_key) & (frame["metric"] == "tg_tps")]
    assert len(gone) == 1 and gone["value"].isna().all() and gone["sample"].isna().all()
    assert gone["source"].tolist() == ["unavailable"]
    assert gone["reason"].tolist() == ["the cell's outcome is error: nothing was measured"]
    assert gone["status"].tolist() == ["error"]
    size = frame[(frame["key"] == error_key) & (frame["metric"] == "package_size_bytes")]
    assert size["value"].tolist() == [run["cells"][2]["metrics"]["package_size_bytes"]["value"]]
    lic = frame[frame["metric"] == "license"]
    assert set(lic["text"]) == {"MIT"} and lic["value"].isna().all()
    assert frame["value"].dtype == float  # numbers only: text lives in its own column


def test_json_records_keep_every_digit_and_null(capsys: pytest.CaptureFixture[str]) -> None:
    run = load_run(GOLDEN / "run-v1.json")
    assert main(["export", str(GOLDEN / "run-v1.json"), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == sum(expected_rows(run).values())
    cold = next(r for r in records if r["metric"] == "cold_start_total_s")
    assert cold["value"] == run["cells"][0]["metrics"]["cold_start_total_s"]["value"]
    assert cold["sample"] is None and cold["variant"] is None
    assert list(records[0]) == columns(run)


def test_param_named_like_a_column_is_prefixed() -> None:
    run = load_run(GOLDEN / "run-v1.json")
    for cell in run["cells"]:
        cell["params"]["value"] = 7
    frame = tidy(run)
    assert (frame["param_value"] == 7).all()
    assert frame["value"].dtype == float


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown export format 'xml'; valid: csv, json"):
        render(tidy(load_run(GOLDEN / "run-v1.json")), "xml")
    with pytest.raises(SystemExit) as exc:
        main(["export", str(GOLDEN / "run-v1.json"), "--format", "xml"])
    assert exc.value.code == 4
