from __future__ import annotations

import pytest

from rtmatrix.metrics import cell
from rtmatrix.protocol import Repetition


def rep(
    pp_s: float = 0.1,
    decode: tuple[float, ...] = (0.01, 0.01, 0.02),
    counters: dict[str, float] | None = None,
) -> Repetition:
    return Repetition(
        pp_s=pp_s,
        pp_tokens=100,
        ttft_s=pp_s + 0.001,
        decode_s=list(decode),
        step_s=[d + 0.001 for d in decode],
        tokens=[1, 2, 3, 4],
        counters=counters
        if counters is not None
        else {"pp_ms": 95.0, "pp_tokens": 100, "tg_ms": 38.0, "tg_tokens": 3},
        nonfinite_steps=0,
        first_token_monotonic=0.0,
        t_start=0.0,
        t_end=1.0,
    )


def test_throughput_from_clock_and_counters() -> None:
    m = cell.throughput([rep(), rep(pp_s=0.2)])
    assert m["pp_tps"].source == "harness-clock" and m["pp_tps"].samples == [1000.0, 500.0]
    assert m["tg_tps"].value == pytest.approx(75.0)
    assert m["pp_tps_counter"].source == "runtime-counter"
    assert m["pp_tps_counter"].value == pytest.approx(100 / 0.095)
    assert m["tg_tps_counter"].value == pytest.approx(3 / 0.038)


def test_runtime_without_counters_is_unavailable_not_zero() -> None:
    m = cell.throughput([rep(counters={})])
    assert m["pp_tps_counter"].value is None and m["pp_tps_counter"].source == "unavailable"
    assert "no PP counter" in str(m["pp_tps_counter"].reason)


def test_single_token_generation_has_no_tg() -> None:
    m = cell.throughput([rep(decode=())]) | cell.latency([rep(decode=())])
    assert m["tg_tps"].value is None and "fewer than 2" in str(m["tg_tps"].reason)
    assert m["tpot_s"].value is None and m["ttft_s"].value is not None


def test_no_reps_gives_unavailable_everywhere() -> None:
    for metric in (cell.throughput([]) | cell.latency([])).values():
        assert metric.value is None and metric.reason


def test_latency_percentiles_pool_all_reps() -> None:
    m = cell.latency([rep(decode=(0.001, 0.002)), rep(decode=(0.003, 0.004))])
    assert m["token_latency_p50_s"].value == pytest.approx(0.0035)
    assert m["tpot_s"].samples == pytest.approx([0.0025, 0.0045])


def test_cold_start_split_and_missing_marks() -> None:
    t = {"worker_start": 10.1, "imported": 10.4, "loaded": 10.9, "first_token": 11.0}
    m = cell.cold_start(t, spawned=10.0)
    assert m["cold_start_process_s"].value == pytest.approx(0.1)
    assert m["cold_start_load_s"].value == pytest.approx(0.5)
    assert m["cold_start_total_s"].value == pytest.approx(1.0)
    crashed = cell.cold_start({"worker_start": 10.1, "imported": 10.4}, spawned=10.0)
    assert crashed["cold_start_load_s"].value is None
    assert "never reached 'loaded'" in str(crashed["cold_start_load_s"].reason)


def test_memory_and_power() -> None:
    m = cell.memory(100, 0.02, None)
    assert m["peak_rss_sampled_bytes"].value == 100
    assert m["peak_rss_os_bytes"].value is None
    p = cell.power(None)
    assert p["power_w"].value is None and p["power_w"].source == "unavailable"
