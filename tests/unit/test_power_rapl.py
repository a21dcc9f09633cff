"""RAPL through sysfs powercap: zones, wraps, resolution, unreadable counters."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.metrics import power
from rtmatrix.metrics.power import rapl
from rtmatrix.metrics.power.base import HARDWARE
from tests.helpers.power import make_powercap, put, reading, source_info, zone


@pytest.fixture
def powercap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_powercap(tmp_path, monkeypatch)


def test_rapl_sums_package_and_dram_across_a_wrap(powercap: Path) -> None:
    with power.open_meter({"sources": ["rapl"]}) as meter:
        info = meter.info()
        assert info["meter"] == "rapl" and info["devices"] == ["cpu"]
        src = source_info(info, "rapl")
        assert src["source"] == str(HARDWARE) and src["devices"] == ["cpu"]
        names = sorted(z["name"] for z in src["inputs"]["zones"])
        assert names == ["dram", "package-0"]  # no core (inside package), no mmio duplicate
        with meter.phase("prefill"):
            # the package counter passes max_energy_range_uj (1e9 uJ) and restarts from 0
            put(powercap / "intel-rapl:0" / "energy_uj", "1000000\n")
            put(powercap / "intel-rapl:0:2" / "energy_uj", "500000\n")
        with meter.phase("decode"):
            put(powercap / "intel-rapl:0" / "energy_uj", "4000000\n")
        rep = {ph: reading(rec, "rapl") for ph, rec in meter.take().items()}
        assert rep["prefill"]["j"] == pytest.approx(2.0 + 0.5)  # 1 J before the wrap, 1 J after
        assert rep["decode"]["j"] == pytest.approx(3.0)
        m = meter.metrics(n_generated_tokens=4)
        assert source_info(meter.info(), "rapl")["inputs"]["wraps"] == 1
    assert m["energy_prefill_j"].value == pytest.approx(2.5)
    assert m["energy_decode_j"].value == pytest.approx(3.0)
    assert m["energy_j"].value == pytest.approx(5.5)
    assert m["energy_per_token_j"].value == pytest.approx(5.5 / 4)
    e = m["energy_j"]
    assert e.source == HARDWARE and e.detail["meter"] == "rapl"
    assert e.detail["resolution_j"] == rapl.RAPL_RESOLUTION_J
    assert e.detail["update_interval_s"] == rapl.RAPL_UPDATE_S
    assert m["power_w"].unit == "W" and m["power_w"].value is not None
    assert m["power_w"].value == pytest.approx(5.5 / sum(e.detail["seconds"]))


def test_rapl_counter_wraps_repeatedly_on_reads(powercap: Path) -> None:
    src = rapl.RaplSource.probe(power.normalize_config({"rapl_domains": ["package"]}))
    assert isinstance(src, rapl.RaplSource)
    pkg = powercap / "intel-rapl:0" / "energy_uj"
    total = 0.0
    for raw, step_uj in ((999_900_000, 900_000), (100_000, 200_000), (999_999_999, 999_899_999)):
        put(pkg, f"{raw}\n")
        total += step_uj * 1e-6
        assert src.read_j() == pytest.approx(total)
    put(pkg, "5\n")  # wraps again: 1 uJ to the top, 5 after
    assert src.read_j() == pytest.approx(total + 6e-6)


def test_rapl_short_phase_is_flagged_long_one_resolved(powercap: Path) -> None:
    pkg = powercap / "intel-rapl:0" / "energy_uj"
    with power.open_meter({"sources": ["rapl"]}) as meter:
        with meter.phase("prefill"):
            pass  # far under 5 counter updates (1 ms each)
        with meter.phase("decode"):
            time.sleep(0.03)
            put(pkg, "999500000\n")  # 0.5 J
        rep = {ph: reading(rec, "rapl") for ph, rec in meter.take().items()}
        m = meter.metrics(3)
    assert rep["prefill"]["resolved"] is False and rep["decode"]["resolved"] is True
    assert m["energy_prefill_j"].detail["resolved"] is False
    assert "below what the meter resolves" in m["energy_prefill_j"].detail["note"]
    assert m["energy_decode_j"].detail["resolved"] is True
    assert m["energy_j"].detail["unresolved_reps"] == 1


def test_rapl_without_wanted_zones_or_readable_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone(tmp_path, "intel-rapl:0:0", "core", 1)
    monkeypatch.setenv(rapl.POWERCAP_ENV, str(tmp_path))
    meter = power.open_meter({"sources": ["rapl"]})
    assert not meter.available
    assert meter.reason is not None and "no package/dram zone" in meter.reason
    assert "zones found: core" in meter.reason
    zone(tmp_path, "intel-rapl:0", "package-0", 1)

    def denied(self: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(rapl._Zone, "raw", denied)
    meter = power.open_meter({"sources": ["rapl"]})
    assert meter.reason is not None and "not readable by uid" in meter.reason
