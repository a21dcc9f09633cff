"""NVML through a fake pynvml: the energy counter, sampled power, no device."""

from __future__ import annotations

import time

import pytest

from rtmatrix.metrics import power
from rtmatrix.metrics.power.nvml import NVML_RESOLUTION_J
from tests.helpers.power import fake_nvml, reading, source_info


def test_nvml_energy_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = fake_nvml(monkeypatch)
    with power.open_meter({"sources": ["nvml"], "nvml_devices": [1]}) as meter:
        with meter.phase("decode"):
            nv.mj += 250  # device 1 counts 2 x
        rec = reading(meter.take()["decode"], "nvml")
        info = meter.info()
    assert rec["j"] == pytest.approx(0.5)
    assert info["meter"] == "nvml" and info["devices"] == ["gpu:1"]
    info = source_info(info, "nvml")
    assert info["resolution_j"] == NVML_RESOLUTION_J
    assert info["devices"] == ["gpu:1"] and info["device_names"] == {"gpu:1": "NVIDIA H200"}
    assert info["inputs"]["device_names"] == ["NVIDIA H200"] and info["inputs"]["driver"] == "570.1"
    assert nv.inited == 0  # shut down on close


def test_nvml_without_energy_counter_samples_power(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, energy=False)
    with power.open_meter({"sources": ["nvml"], "sample_interval_s": 0.01}) as meter:
        with meter.phase("decode"):
            time.sleep(0.1)
        rec = reading(meter.take()["decode"], "nvml")
        info = source_info(meter.info(), "nvml")
    assert info["devices"] == ["gpu:0", "gpu:1"]
    assert info["sampled"] is True and "sampled" in info["inputs"]["method"]
    assert rec["j"] == pytest.approx(300.0 * rec["s"], rel=0.05)  # 2 devices x 150 W
    assert rec["samples"] >= 3


def test_nvml_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, count=0)
    assert power.open_meter({"sources": ["nvml"]}).tried == {"nvml": "no NVML device"}
