"""metrics/hostprobe.py: the child's pieces, on tiny inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.metrics import hostprobe


def test_spread_is_median_min_max_and_interquartile_range() -> None:
    s = hostprobe.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"n": 5, "median": 3.0, "min": 1.0, "max": 5.0, "iqr": [2.0, 4.0]}
    assert hostprobe.spread([7.0])["iqr"] == [7.0, 7.0]


def test_the_last_level_cache_comes_from_sysfs(tmp_path: Path) -> None:
    cache = tmp_path / "devices/system/cpu/cpu0/cache"
    for index, level, size in (("index0", "1", "48K"), ("index2", "2", "1024K"),
                               ("index3", "3", "32768K")):  # fmt: skip
        (cache / index).mkdir(parents=True)
        (cache / index / "level").write_text(level)
        (cache / index / "size").write_text(size + "\n")
    assert hostprobe.llc_bytes(tmp_path) == 32 * 2**20
    assert hostprobe.llc_bytes(tmp_path / "nowhere") is None


def test_read_bandwidth_reads_every_byte_in_every_pass() -> None:
    lines: list[str] = []
    out = hostprobe.read_bandwidth(2, 4 * 2**20, 3, lines.append)
    assert out["unit"] == "bytes/s" and len(out["samples"]) == 3
    assert out["value"] == out["stats"]["median"] and out["stats"]["min"] <= out["value"]
    assert out["params"]["threads"] == 2 and out["params"]["concurrency"]["n"] == 3
    assert len(lines) == 3


def test_bf16_is_unavailable_without_the_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostprobe, "cpu_flags", lambda: {"avx2", "fma"})
    out = hostprobe.matmul_bf16(1, 2, 256, lambda _: None)
    assert out["value"] is None and "no native bf16" in out["reason"]


def test_cpu_flags_of_x86_and_arm(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert "avx512_bf16" in hostprobe.cpu_flags(x86)
    assert "bf16" in hostprobe.cpu_flags(arm)
    assert hostprobe.cpu_flags(tmp_path / "absent") == set()


def test_a_failing_probe_is_its_own_unavailable_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> dict[str, object]:
        msg = "no room"
        raise MemoryError(msg)

    monkeypatch.setitem(hostprobe.MATMULS, "f32", broken)
    out = hostprobe.probe(1, 2**20, 2, ["f32"], 256, lambda _: None)
    assert out["matmul"]["f32"]["value"] is None
    assert "MemoryError: no room" in out["matmul"]["f32"]["reason"]
    assert out["bandwidth"]["value"] is not None  # the other probes still ran
