"""benchmark_app as the openvino row's reference tool: the shapes it is given and its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtmatrix.runtimes.openvino.benchmark import BenchmarkUnavailable, parse_report, shape_arg

PAST = [("past_key_values.0.key", 4, 64), ("past_key_values.0.value", 4, 64)]
ALL = {"input_ids", "attention_mask", "position_ids", *(n for n, _, _ in PAST)}


def test_prefill_and_decode_shapes_name_every_input() -> None:
    assert shape_arg(PAST, ALL, 128, 0) == (
        "input_ids[1,128],attention_mask[1,128],position_ids[1,128],"
        "past_key_values.0.key[1,4,0,64],past_key_values.0.value[1,4,0,64]"
    )
    decode = shape_arg(PAST, ALL, 1, 128)
    assert "attention_mask[1,129]" in decode and "past_key_values.0.value[1,4,128,64]" in decode
    assert "attention_mask" not in shape_arg(PAST, {"input_ids"}, 1, 8)


def test_the_report_gives_its_median_latency_or_says_why_not(tmp_path: Path) -> None:
    good = tmp_path / "benchmark_report.json"
    good.write_text(json.dumps({"execution_results": {"latency (ms)": "12.5"}}), "utf-8")
    assert parse_report(good)["latency (ms)"] == "12.5"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"execution_results": {"throughput": "3"}}), "utf-8")
    with pytest.raises(BenchmarkUnavailable, match="no 'latency \\(ms\\)'"):
        parse_report(bad)
    with pytest.raises(BenchmarkUnavailable, match="no readable report"):
        parse_report(tmp_path / "missing.json")
