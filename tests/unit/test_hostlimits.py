"""metrics/hostlimits.py: the cache key, the typed result, the child probe (tiny settings)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rtmatrix.metrics import hostlimits
from rtmatrix.metrics.hostlimits import HostLimits, Probe, ProbeConfig

#: a probe small enough for a unit test: an 8 MiB buffer, two passes, 256×256 f32 matmuls
TINY = ProbeConfig(buffer_mib=8, repeats=2, max_side=256, dtypes=("f32",))


def _limits(threads: int, bandwidth: float = 20e9, contended: bool = False) -> HostLimits:
    return HostLimits(
        key=hostlimits.host_key(threads, TINY),
        bandwidth=Probe("bytes/s", bandwidth, (bandwidth * 0.9, bandwidth, bandwidth * 1.1),
                        "numpy maximum.reduce", {"threads": threads}),
        matmul={"f32": Probe("FLOP/s", 1e11, (1e11,), "numpy matmul"),
                "bf16": Probe("FLOP/s", reason="the CPU lists no native bf16")},
        command="OMP_NUM_THREADS=2 python -m rtmatrix.metrics.hostprobe",
        measured_utc="2026-12-05T00:00:00+00:00",
        wall_s=3.0,
        load_avg=(0.5, 0.4, 0.3),
        host_busy_cores=1.5 if contended else 0.01,
        contended=contended,
    )


def test_the_cache_key_includes_the_thread_count(tmp_path: Path) -> None:
    two, four = hostlimits.host_key(2, TINY), hostlimits.host_key(4, TINY)
    assert two["threads"] == 2 and four["threads"] == 4
    assert {k: v for k, v in two.items() if k != "threads"} == {
        k: v for k, v in four.items() if k != "threads"
    }
    assert hostlimits.cache_path(two, tmp_path) != hostlimits.cache_path(four, tmp_path)
    hostlimits.store(_limits(2), tmp_path)
    assert hostlimits.load_cached(2, TINY, tmp_path) == _limits(2)
    assert hostlimits.load_cached(4, TINY, tmp_path) is None  # never another thread count's
    assert hostlimits.load_cached(2, ProbeConfig(), tmp_path) is None  # nor other settings'


def test_the_key_names_host_kernel_and_cpu() -> None:
    key = hostlimits.host_key(1)
    assert {"hostname", "kernel", "cpu_model", "threads", "probe_version"} <= set(key)


def test_limits_round_trip_through_their_dict() -> None:
    limits = _limits(2, contended=True)
    data = json.loads(json.dumps(limits.to_dict()))
    assert HostLimits.from_dict(data) == limits
    assert data["bandwidth"]["min"] == pytest.approx(18e9) and data["bandwidth"]["max"] == 22e9
    assert data["matmul"]["bf16"] == {"value": None, "unit": "FLOP/s",
                                      "reason": "the CPU lists no native bf16"}  # fmt: skip


def test_a_probe_has_a_value_or_a_reason() -> None:
    with pytest.raises(ValueError, match="value or a reason"):
        Probe("bytes/s")
    with pytest.raises(ValueError, match="value or a reason"):
        Probe("bytes/s", 1.0, reason="both")


def test_a_dtype_never_probed_is_unavailable_saying_so() -> None:
    peak = _limits(2).peak("int8")
    assert peak.value is None and "no int8 matmul peak" in str(peak.reason)
    assert _limits(2).peak("f32").value == 1e11


def test_the_child_measures_and_shows_progress() -> None:
    lines: list[str] = []
    limits = hostlimits.measure(1, TINY, progress=lines.append)
    assert isinstance(limits, HostLimits), limits
    bw, f32 = limits.bandwidth, limits.matmul["f32"]
    assert bw.value is not None and bw.value > 1e8 and len(bw.samples) == 2
    assert "maximum.reduce" in bw.method and bw.params["buffer_bytes"] == 8 * 2**20
    assert f32.value is not None and f32.value > 1e7 and f32.params["side"] == 256
    assert set(limits.matmul) == {"f32"}  # only the dtypes asked for
    assert any("read bandwidth 2/2" in line for line in lines)
    assert any("f32 matmul 1/2" in line for line in lines)
    assert limits.command.startswith("OMP_NUM_THREADS=1 ")
    assert limits.threads == 1


def test_a_failed_child_is_a_reason_with_its_last_words() -> None:
    bad = replace(TINY, dtypes=("f64",))
    why = hostlimits.measure(1, bad, progress=lambda _: None)
    assert isinstance(why, str)
    assert "exit code" in why and "unknown dtype(s) f64" in why


def test_cached_limits_are_read_and_a_contended_result_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[int] = []

    def fake_measure(threads: int, config: ProbeConfig, progress: object) -> HostLimits:
        measured.append(threads)
        return _limits(threads, bandwidth=30e9)

    monkeypatch.setattr(hostlimits, "measure", fake_measure)
    hostlimits.store(_limits(2), tmp_path)
    assert hostlimits.limits_for(2, TINY, lambda _: None, tmp_path) == _limits(2)
    assert measured == []
    hostlimits.store(_limits(2, contended=True), tmp_path)
    again = hostlimits.limits_for(2, TINY, lambda _: None, tmp_path)
    assert measured == [2] and isinstance(again, HostLimits) and again.bandwidth.value == 30e9
    assert hostlimits.load_cached(2, TINY, tmp_path) == again  # the new result replaced it


def test_off_measures_nothing_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hostlimits.ENV, "off")
    hostlimits.store(_limits(2), tmp_path)
    assert hostlimits.limits_for(2, TINY, lambda _: None, tmp_path) == "not measured: " \
        "RTMATRIX_HOST_LIMITS=off"  # fmt: skip
    assert "RTMATRIX_HOST_LIMITS=off" in str(hostlimits.cached_or_reason(2, TINY, tmp_path))
    entry = hostlimits.machine_entry([2, 2], lambda _: None, TINY)
    assert list(entry["host_limits"]) == ["2"]
    assert "off" in entry["host_limits"]["2"]["unavailable"]


def test_a_cell_never_probes_it_reads_what_the_run_measured(tmp_path: Path) -> None:
    why = hostlimits.cached_or_reason(2, TINY, tmp_path)
    assert isinstance(why, str) and "no host limits measured" in why and "2 thread" in why
    hostlimits.store(_limits(2), tmp_path)
    assert hostlimits.cached_or_reason(2, TINY, tmp_path) == _limits(2)
