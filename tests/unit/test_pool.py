"""``run --processes``: one cell's records from several worker processes pooled into one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rtmatrix.runner.pool import pool


def rec(tg: float, status: str = "ok", samples: list[float] | None = None) -> dict[str, Any]:
    return {
        "key": "k",
        "outcome": {"status": status, "message": "" if status == "ok" else "boom"},
        "verdict": "PASS" if status == "ok" else "WARN",
        "metrics": {
            "tg_tps": {
                "value": tg,
                "unit": "tokens/s",
                "source": "harness-clock",
                "samples": samples or [tg, tg],
            },
            "license": {"value": "MIT", "unit": "text", "source": "package-metadata"},
        },
    }


def test_process_medians_are_kept_and_their_median_is_the_value() -> None:
    got = pool([rec(10.0), rec(12.0), rec(11.0, samples=[10.5, 11.5])])
    tg = got["metrics"]["tg_tps"]
    assert got["processes"] == 3 and tg["process_values"] == [10.0, 12.0, 11.0]
    assert tg["value"] == 11.0 and tg["samples"] == [10.0, 10.0, 12.0, 12.0, 10.5, 11.5]
    assert got["metrics"]["license"] == {"value": "MIT", "unit": "text",
                                         "source": "package-metadata"}  # fmt: skip


def test_the_worst_outcome_wins_and_names_the_others() -> None:
    got = pool([rec(10.0), rec(0.0, status="crash"), rec(11.0)])
    assert got["outcome"]["status"] == "crash"
    assert "processes: ok, crash, ok" in got["outcome"]["message"]
    assert "process_values" not in got["metrics"]["tg_tps"]


def test_one_record_is_itself_with_a_count_and_inputs_are_not_changed() -> None:
    one = rec(10.0)
    before = copy.deepcopy(one)
    assert pool([one])["processes"] == 1
    assert one == before
    with pytest.raises(ValueError, match="at least one"):
        pool([])
